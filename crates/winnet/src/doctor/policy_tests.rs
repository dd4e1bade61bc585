//! The policy checks over what the real agent programs into an hnsd in this process
//! (`hns::InProcess`): a synced node is clean; an ACL removed or added by hand, a set removed
//! by hand, ws2025's default-deny on a direction no policy isolates, and a policy one node
//! enforces and another does not are each found, named with the endpoint and the policy.

use std::net::IpAddr;
use std::sync::Arc;

use doctor::{Finding, NodeSnapshot, ProblemKind};
use hcn::policy::{AclAction, AclPolicySetting};
use hcn::{NetworkPolicy, RequestType};
use hns::profile::Limitation;
use hns::store::Store;
use hns::{InProcess, Profile, Service};
use hns_client::Client;
use policy::Style;
use policy::agent::{Agent, Config};
use serde_json::json;

use super::policy::{AgentFacts, view};

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
spec: {nodeName: n1, containers: [{name: c}]}
status: {podIP: 10.244.1.3}
---
apiVersion: v1
kind: Pod
metadata: {namespace: x, name: c, labels: {pod: a}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {podIP: 10.244.2.2}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: allow-b}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{protocol: TCP, port: 80}]
"#;

const A: &str = "10.244.1.2";

struct TestNode {
    name: String,
    profile: Profile,
    client: Arc<Client>,
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An in-process hnsd for node `name` with network cbr0 and an endpoint per address.
async fn node(name: &str, profile: Profile, subnet: &str, ips: &[&str]) -> TestNode {
    let service = Arc::new(Service::start(Store::in_memory().unwrap(), profile).unwrap());
    let client = Arc::new(Client::over(Arc::new(InProcess::new(service, name))));
    let gateway = subnet.replace(".0/24", ".1");
    let net = testkit::hnsd::create_network(
        &client,
        &json!({"Name":"cbr0","Type":"L2Bridge","Ipams":[{"Subnets":[
            {"IpAddressPrefix":subnet,"Routes":[{"NextHop":gateway,"DestinationPrefix":"0.0.0.0/0"}]}]}]}),
    )
    .await;
    for (i, ip) in ips.iter().enumerate() {
        let ep = hcn::Endpoint {
            name: format!("pod{i}_cbr0"),
            host_compute_network: net.id,
            ip_configurations: vec![hcn::IpConfig {
                ip_address: Some(ip.parse().unwrap()),
                prefix_length: 24,
            }],
            ..Default::default()
        };
        client.create_endpoint(&ep).await.unwrap();
    }
    TestNode {
        name: name.into(),
        profile,
        client,
    }
}

fn objects() -> kubesrc::Objects {
    let mut o = kubesrc::Objects::default();
    kubesrc::manifests::load_text(OBJECTS, "objects.yaml", &mut o);
    assert!(o.problems.is_empty(), "{:?}", o.problems);
    o
}

/// The node's agent syncs once, as `winnet policy` does.
async fn run_agent(n: &TestNode, style: Style) {
    let config = Config {
        style,
        node: n.name.clone(),
        network_name: "cbr0".into(),
        hns_socket: "/nonexistent".into(),
        source: kubesrc::Source::Manifests {
            dir: "/nonexistent".into(),
            poll: std::time::Duration::from_millis(50),
        },
        host_addresses: vec!["192.168.0.11/32".parse().unwrap()],
        healthz_bind: None,
    };
    let mut agent = Agent::new(Arc::clone(&n.client), &config);
    let (_, report) = agent.sync(&policy::Cluster::from_objects(&objects())).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
}

/// The node's snapshot as `winnet doctor` takes it: HNS objects and the agent's plan.
async fn snapshot(n: &TestNode, style: Style) -> NodeSnapshot {
    let hns = doctor::snapshot::HnsView {
        networks: n.client.list_networks().await.unwrap(),
        endpoints: n.client.list_endpoints().await.unwrap(),
        ..Default::default()
    };
    let agent = AgentFacts {
        style: Some(style),
        host_addresses: Some(vec!["192.168.0.11/32".parse().unwrap()]),
    };
    let policy = view(&objects(), "objects.yaml", &n.name, &hns.endpoints, &agent).unwrap();
    NodeSnapshot {
        node: n.name.clone(),
        profile: doctor::snapshot::ProfileFacts {
            name: n.profile.as_str().into(),
            acl_default_deny: n.profile.imposes(Limitation::AclDefaultDeny),
            ..Default::default()
        },
        hns,
        policy,
        ..Default::default()
    }
}

fn of_kind(found: &[Finding], kind: ProblemKind) -> Vec<&Finding> {
    found.iter().filter(|f| f.kind == kind).collect()
}

async fn endpoint_of(n: &TestNode, ip: &str) -> hcn::Endpoint {
    let ip: IpAddr = ip.parse().unwrap();
    let eps = n.client.list_endpoints().await.unwrap();
    eps.into_iter().find(|e| e.ips().any(|i| i == ip)).unwrap()
}

async fn held(n: &TestNode, ip: &str) -> (hcn::Guid, Vec<AclPolicySetting>) {
    let ep = endpoint_of(n, ip).await;
    let acls = hns_client::acl::endpoint_acls(&ep)
        .into_iter()
        .cloned()
        .collect();
    (ep.id, acls)
}

#[test]
fn a_synced_node_is_clean_and_a_hand_removed_or_added_acl_is_named_with_its_policy() {
    rt().block_on(async {
        let n = node("n1", Profile::Ws2022, "10.244.1.0/24", &[A, "10.244.1.3"]).await;
        run_agent(&n, Style::Calico).await;
        let found = doctor::diagnose(&snapshot(&n, Style::Calico).await);
        assert!(found.is_empty(), "a synced node: {found:#?}");

        // The Allow of b -> a removed by hand.
        let (ep, mut acls) = held(&n, A).await;
        let i = acls
            .iter()
            .position(|a| a.id.starts_with("policy-x/knp.default.allow-b-in0"))
            .expect("the agent's Allow of rule 0");
        acls.remove(i);
        n.client.set_endpoint_acls(ep, acls.clone()).await.unwrap();
        let found = doctor::diagnose(&snapshot(&n, Style::Calico).await);
        let missing = of_kind(&found, ProblemKind::PolicyAclMissing);
        assert_eq!(missing.len(), 1, "{found:#?}");
        let policy = missing[0]
            .objects
            .iter()
            .find(|o| o.kind == "NetworkPolicy")
            .expect("the policy is named");
        assert_eq!(policy.id, "x/allow-b");
        assert_eq!(
            policy.detail,
            "NetworkPolicy x/allow-b rule spec.ingress[0]"
        );
        assert!(missing[0].objects.iter().any(|o| o.kind == "Endpoint"));
        assert!(
            missing[0].fix.contains("winnet policy"),
            "{}",
            missing[0].fix
        );
        assert_eq!(found.len(), 1, "nothing else: {found:#?}");

        // A Block added by hand beside it.
        let extra: AclPolicySetting = serde_json::from_value(json!(
            {"Id": "by-hand", "Action": "Block", "Direction": "Out", "Priority": 10}
        ))
        .unwrap();
        acls.push(extra);
        n.client.set_endpoint_acls(ep, acls).await.unwrap();
        let found = doctor::diagnose(&snapshot(&n, Style::Calico).await);
        let extra = of_kind(&found, ProblemKind::PolicyAclExtra);
        assert_eq!(extra.len(), 1, "{found:#?}");
        assert!(extra[0].summary.contains("by-hand"), "{}", extra[0].summary);
    });
}

#[test]
fn npm_on_ws2025_leaves_egress_default_deny_and_a_set_removed_by_hand_is_named() {
    rt().block_on(async {
        let n = node("n1", Profile::Ws2025, "10.244.1.0/24", &[A, "10.244.1.3"]).await;
        run_agent(&n, Style::Npm).await;
        let found = doctor::diagnose(&snapshot(&n, Style::Npm).await);
        // x/allow-b isolates a's ingress only; NPM writes no egress ACL, and ws2025 drops it.
        let deny = of_kind(&found, ProblemKind::AclDefaultDenyWithoutAllow);
        assert_eq!(deny.len(), 1, "{found:#?}");
        assert!(deny[0].summary.contains("egress"), "{}", deny[0].summary);
        assert!(deny[0].objects.iter().any(|o| o.id == "x/a"), "{deny:#?}");
        assert_eq!(found.len(), 1, "nothing else: {found:#?}");

        // The Allow naming b's set, then the set itself, removed by hand.
        let (ep, mut acls) = held(&n, A).await;
        let i = acls
            .iter()
            .position(|a| a.action == AclAction::Allow)
            .unwrap();
        let allow = acls.remove(i);
        n.client.set_endpoint_acls(ep, acls).await.unwrap();
        let set = allow.remote_addresses.as_str().to_string();
        let nets = n.client.list_networks().await.unwrap();
        let held_set = nets[0]
            .policies
            .iter()
            .find_map(|p| match p {
                NetworkPolicy::SetPolicy(s) if s.id == set => Some(s.clone()),
                _ => None,
            })
            .expect("the agent's set");
        n.client
            .set_policies(nets[0].id, RequestType::Remove, vec![held_set])
            .await
            .unwrap();
        let found = doctor::diagnose(&snapshot(&n, Style::Npm).await);
        let sets = of_kind(&found, ProblemKind::AclSetMissing);
        assert_eq!(sets.len(), 1, "{found:#?}");
        assert!(sets[0].summary.contains(&set), "{}", sets[0].summary);
        assert_eq!(of_kind(&found, ProblemKind::PolicyAclMissing).len(), 1);
    });
}

#[test]
fn a_policy_one_node_enforces_and_another_does_not_is_named_on_the_other() {
    rt().block_on(async {
        let n1 = node("n1", Profile::Ws2022, "10.244.1.0/24", &[A, "10.244.1.3"]).await;
        let n2 = node("n2", Profile::Ws2022, "10.244.2.0/24", &["10.244.2.2"]).await;
        run_agent(&n1, Style::Calico).await;
        let snaps = [
            snapshot(&n1, Style::Calico).await,
            snapshot(&n2, Style::Calico).await,
        ];
        let nodes = doctor::diagnose_nodes(&snaps);
        assert!(nodes[0].1.is_empty(), "{:#?}", nodes[0].1);
        let across = of_kind(&nodes[1].1, ProblemKind::PolicyNotOnEveryNode);
        assert_eq!(across.len(), 1, "{:#?}", nodes[1].1);
        assert!(
            across[0].summary.contains("x/allow-b is applied on n1"),
            "{}",
            across[0].summary
        );
        // n2's own check names each ACL its endpoint lacks.
        assert!(!of_kind(&nodes[1].1, ProblemKind::PolicyAclMissing).is_empty());
        // Once n2's agent runs, both are clean.
        run_agent(&n2, Style::Calico).await;
        let snaps = [snaps[0].clone(), snapshot(&n2, Style::Calico).await];
        for (node, found) in doctor::diagnose_nodes(&snaps) {
            assert!(found.is_empty(), "{node}: {found:#?}");
        }
    });
}
