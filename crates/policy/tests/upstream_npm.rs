//! Cases of Azure NPM's Windows translation (Azure/azure-container-networking
//! `npm/pkg/dataplane/policies/policy_windows.go` and `npm/pkg/controlplane/translation/
//! translatePolicy.go`), each named after the upstream function whose output it checks, on
//! the v2 ACL JSON NPM sends (`NPMACLPolSettings` inside `{"Type":"ACL","Settings":...}`).

#![allow(non_snake_case)]

use std::net::IpAddr;

use policy::acl::set_id;
use policy::{Cluster, Construct, Effect, NodeContext, Style, plan};
use serde_json::{Value, json};

const OBJECTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {ns: x}}
---
apiVersion: v1
kind: Pod
metadata: {namespace: x, name: a, labels: {pod: a}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {podIP: 10.244.1.2}
---
apiVersion: v1
kind: Pod
metadata: {namespace: x, name: b, labels: {pod: b}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {podIP: 10.244.2.3}
"#;

fn acls(policies: &str) -> (Vec<Value>, policy::Plan) {
    let mut objects = kubesrc::Objects::default();
    kubesrc::manifests::load_text(&format!("{OBJECTS}\n---\n{policies}"), "t", &mut objects);
    let cluster = Cluster::from_objects(&objects);
    assert!(cluster.problems.is_empty(), "{:?}", cluster.problems);
    let ctx = NodeContext {
        node: "n1".into(),
        host_addresses: Vec::new(),
    };
    let p = plan(&cluster, &ctx, Style::Npm);
    let a: IpAddr = "10.244.1.2".parse().unwrap();
    let json = p.endpoints[&a].acls.iter().map(|x| x.v2_json()).collect();
    (json, p)
}

/// convertToAclSettings / getPortStrFromPorts / aclPolicyID: Allow at 222 with the peer's
/// set, the port range written out port by port, a Block at 3000, every ACL with
/// `azure-acl-<ns>-<name>`, `Protocols` as text.
#[test]
fn convert_to_acl_settings__npm() {
    let (got, p) = acls(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: web}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{protocol: TCP, port: 222, endPort: 225}]
"#,
    );
    let peer = set_id("ns-x&podlabel-pod:b");
    assert_eq!(
        got,
        [
            json!({"Type":"ACL","Settings":{"Id":"azure-acl-x-web","Protocols":"6","Action":"Allow","Direction":"In",
                "RemoteAddresses":peer,"LocalPorts":"222,223,224,225","RuleType":"Switch","Priority":222}}),
            json!({"Type":"ACL","Settings":{"Id":"azure-acl-x-web","Action":"Block","Direction":"In","RuleType":"Switch","Priority":3000}}),
        ]
    );
    // The sets: the namespace's and the label's (as NPM makes them), and the peer's.
    let names: Vec<String> = p
        .sets
        .iter()
        .map(|s| {
            format!(
                "{} {} {}",
                s.name,
                s.json()["Settings"]["PolicyType"].as_str().unwrap(),
                s.json()["Settings"]["Values"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "ns-x IPSET 10.244.1.2,10.244.2.3",
            "ns-x&podlabel-pod:b IPSET 10.244.2.3",
            "podlabel-pod:b IPSET 10.244.2.3",
        ]
    );
}

/// translateRule #1 (only ports) and an egress namespace selector: `nslabel-ns:x` is a
/// NESTEDIPSET of namespace sets, after the plain sets.
#[test]
fn translate_rule_egress_namespace_selector__npm() {
    let (got, p) = acls(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: out}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to: [{namespaceSelector: {matchLabels: {ns: x}}}]
    ports: [{protocol: UDP, port: 53}]
"#,
    );
    let nested = set_id("nslabel-ns:x");
    assert_eq!(
        got,
        [
            json!({"Type":"ACL","Settings":{"Id":"azure-acl-x-out","Protocols":"17","Action":"Allow","Direction":"Out",
                "RemoteAddresses":nested,"RemotePorts":"53","RuleType":"Switch","Priority":222}}),
            json!({"Type":"ACL","Settings":{"Id":"azure-acl-x-out","Action":"Block","Direction":"Out","RuleType":"Switch","Priority":3000}}),
        ]
    );
    let last = p.sets.last().unwrap();
    assert_eq!(last.json()["Settings"]["PolicyType"], "NESTEDIPSET");
    assert_eq!(last.json()["Settings"]["Values"], set_id("ns-x"));
}

/// isUnsupportedWindowsTranslationErr: a named port, a NotExist/NotIn selector, an except
/// and SCTP each refuse the whole policy (its pods are left without its ACLs).
#[test]
fn is_unsupported_windows_translation_err__npm() {
    let cases = [
        ("ports: [{port: http}]", Construct::NamedPort("http".into())),
        ("ports: [{protocol: SCTP, port: 80}]", Construct::Sctp),
        (
            "from: [{ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}}]",
            Construct::Except,
        ),
        (
            "from: [{podSelector: {matchExpressions: [{key: pod, operator: DoesNotExist}]}}]",
            Construct::NegativeSelector,
        ),
    ];
    for (rule, construct) in cases {
        let (got, p) = acls(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {{namespace: x, name: bad}}\nspec:\n  podSelector: {{}}\n  ingress:\n  - {rule}\n"
        ));
        assert!(got.is_empty(), "{rule}: {got:?}");
        assert_eq!(p.problems.len(), 1, "{rule}");
        assert_eq!(
            (&p.problems[0].construct, p.problems[0].effect),
            (&construct, Effect::PolicySkipped)
        );
    }
}

/// ipBlockSetName: an ipBlock peer is a set named
/// `<policy>-in-ns-<namespace>-<rule index>-<peer index><IN|OUT>` holding the CIDR.
#[test]
fn ip_block_set_name__npm() {
    let (got, p) = acls(
        r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: ext}
spec:
  podSelector: {matchLabels: {pod: a}}
  policyTypes: [Egress]
  egress:
  - to: [{podSelector: {matchLabels: {pod: b}}}, {ipBlock: {cidr: 192.0.2.0/24}}]
"#,
    );
    let set = p
        .sets
        .iter()
        .find(|s| s.name == "ext-in-ns-x-0-1OUT")
        .expect("the ipBlock's set");
    assert_eq!(set.members, ["192.0.2.0/24"]);
    let remotes: Vec<&Value> = got
        .iter()
        .map(|a| &a["Settings"]["RemoteAddresses"])
        .collect();
    assert_eq!(
        remotes,
        [
            &json!(set_id("ns-x&podlabel-pod:b")),
            &json!(set.id),
            &Value::Null
        ]
    );
}
