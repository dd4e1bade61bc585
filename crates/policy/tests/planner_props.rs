//! The planner against Kubernetes' NetworkPolicy semantics: random pods, namespaces and
//! policies (as the JSON a user writes), every connection between the pods judged by a
//! reference written from the API's documentation, small and obvious, over that JSON. Linux's
//! verdict (`Cluster::allows`) must equal it; the calico style's ACLs, matched as the switch
//! matches them (hns-compiler's rules from what HNS reads, sets expanded, lowest priority
//! first), must equal it when felix
//! skipped nothing and never allow more when it did; the npm style's must equal it when NPM
//! refused nothing.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use hcn::policy::{AclAction, AclDirection};
use policy::acl::Acl;
use policy::model::Protocol;
use policy::{Cluster, Connection, NodeContext, Plan, Style, plan};
use proptest::prelude::*;
use serde_json::{Value, json};
use vfp::Headers;

const NODE: &str = "n1";

// ---- the reference: Kubernetes' documented semantics, over the policies' JSON ----

struct RefPod {
    ns: String,
    labels: BTreeMap<String, String>,
    ip: IpAddr,
    http: bool,
}

fn ns_labels(ns: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("ns".to_string(), ns.to_string()),
        ("kubernetes.io/metadata.name".to_string(), ns.to_string()),
    ])
}

/// A label selector: matchLabels all equal, each expression holds.
fn selects(sel: &Value, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let exprs_ok = sel["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|e| {
            let value = labels.get(e["key"].as_str().unwrap());
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str().unwrap() {
                "In" => value.is_some_and(|v| values.contains(&v.as_str())),
                "NotIn" => value.is_none_or(|v| !values.contains(&v.as_str())),
                "Exists" => value.is_some(),
                _ => value.is_none(),
            }
        });
    labels_ok && exprs_ok
}

/// Whether a peer entry names the address `ip` (policy in namespace `ns`).
fn peer_names(peer: &Value, ns: &str, ip: IpAddr, pods: &[RefPod]) -> bool {
    if let Some(block) = peer.get("ipBlock") {
        let inside = |cidr: &str| cidr.parse::<ipnet::IpNet>().unwrap().contains(&ip);
        let except = block["except"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| inside(e.as_str().unwrap()));
        return inside(block["cidr"].as_str().unwrap()) && !except;
    }
    let Some(pod) = pods.iter().find(|p| p.ip == ip) else {
        return false;
    };
    let ns_ok = match peer.get("namespaceSelector") {
        Some(s) => selects(s, &ns_labels(&pod.ns)),
        None => pod.ns == ns,
    };
    let pod_ok = peer
        .get("podSelector")
        .is_none_or(|s| selects(s, &pod.labels));
    ns_ok && pod_ok
}

fn port_names(port: &Value, proto: &str, number: u16, dst: Option<&RefPod>) -> bool {
    if port["protocol"].as_str().unwrap_or("TCP") != proto {
        return false;
    }
    match &port["port"] {
        Value::Null => true,
        Value::String(name) => {
            name == "http" && proto == "TCP" && number == 80 && dst.is_some_and(|d| d.http)
        }
        n => {
            let first = n.as_u64().unwrap() as u16;
            let last = port["endPort"].as_u64().map_or(first, |e| e as u16);
            (first..=last).contains(&number)
        }
    }
}

/// One side: the pod's policies of `kind` ("ingress"/"egress") allow the connection.
fn side(
    policies: &[Value],
    pod: &RefPod,
    kind: &str,
    remote: IpAddr,
    c: (&str, u16),
    dst: Option<&RefPod>,
    pods: &[RefPod],
) -> bool {
    let type_name = if kind == "ingress" {
        "Ingress"
    } else {
        "Egress"
    };
    let applying: Vec<&Value> = policies
        .iter()
        .filter(|p| {
            p["metadata"]["namespace"] == pod.ns.as_str()
                && selects(&p["spec"]["podSelector"], &pod.labels)
        })
        .filter(|p| match p["spec"]["policyTypes"].as_array() {
            Some(types) => types.iter().any(|t| t == type_name),
            None => {
                kind == "ingress"
                    || p["spec"]["egress"]
                        .as_array()
                        .is_some_and(|e| !e.is_empty())
            }
        })
        .collect();
    applying.is_empty()
        || applying.iter().any(|p| {
            let ns = p["metadata"]["namespace"].as_str().unwrap();
            let peers_key = if kind == "ingress" { "from" } else { "to" };
            p["spec"][kind]
                .as_array()
                .into_iter()
                .flatten()
                .any(|rule| {
                    let peers = rule[peers_key].as_array().cloned().unwrap_or_default();
                    let ports = rule["ports"].as_array().cloned().unwrap_or_default();
                    (peers.is_empty()
                        || peers.iter().any(|peer| peer_names(peer, ns, remote, pods)))
                        && (ports.is_empty()
                            || ports.iter().any(|port| port_names(port, c.0, c.1, dst)))
                })
        })
}

fn reference(policies: &[Value], pods: &[RefPod], src: usize, dst: usize, c: (&str, u16)) -> bool {
    let (s, d) = (&pods[src], &pods[dst]);
    side(policies, s, "egress", d.ip, c, Some(d), pods)
        && side(policies, d, "ingress", s.ip, c, Some(d), pods)
}

// ---- the generator ----

fn selector() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({})),
        prop::sample::select(vec!["a", "b", "c"]).prop_map(|v| json!({"matchLabels": {"pod": v}})),
        Just(json!({"matchExpressions": [{"key": "pod", "operator": "In", "values": ["a", "b"]}]})),
        Just(json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]})),
        Just(json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]})),
        Just(json!({"matchExpressions": [{"key": "pod", "operator": "NotIn", "values": ["a"]}]})),
    ]
}

fn ns_selector() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({})),
        prop::sample::select(vec!["x", "y"]).prop_map(|v| json!({"matchLabels": {"ns": v}})),
    ]
}

fn peer() -> impl Strategy<Value = Value> {
    prop_oneof![
        selector().prop_map(|s| json!({"podSelector": s})),
        ns_selector().prop_map(|s| json!({"namespaceSelector": s})),
        (selector(), ns_selector())
            .prop_map(|(p, n)| json!({"podSelector": p, "namespaceSelector": n})),
        Just(json!({"ipBlock": {"cidr": "10.0.0.0/30"}})),
        Just(json!({"ipBlock": {"cidr": "10.0.0.0/29", "except": ["10.0.0.4/30"]}})),
    ]
}

fn port() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"protocol": "TCP", "port": 80})),
        Just(json!({"port": 81})),
        Just(json!({"protocol": "UDP", "port": 80})),
        Just(json!({"protocol": "TCP", "port": 80, "endPort": 81})),
        Just(json!({"protocol": "UDP"})),
        Just(json!({"port": "http"})),
    ]
}

fn rule(peers_key: &'static str) -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(peer(), 0..3),
        prop::collection::vec(port(), 0..3),
    )
        .prop_map(move |(peers, ports)| {
            let mut r = serde_json::Map::new();
            if !peers.is_empty() {
                r.insert(peers_key.into(), json!(peers));
            }
            if !ports.is_empty() {
                r.insert("ports".into(), json!(ports));
            }
            Value::Object(r)
        })
}

fn policy() -> impl Strategy<Value = Value> {
    let types = prop_oneof![
        Just(None),
        Just(Some(json!(["Ingress"]))),
        Just(Some(json!(["Egress"]))),
        Just(Some(json!(["Ingress", "Egress"]))),
    ];
    (
        prop::sample::select(vec!["x", "y"]),
        selector(),
        types,
        prop::collection::vec(rule("from"), 0..3),
        prop::collection::vec(rule("to"), 0..3),
    )
        .prop_map(|(ns, sel, types, ingress, egress)| {
            let mut spec = json!({"podSelector": sel, "ingress": ingress, "egress": egress});
            if let Some(t) = types {
                spec["policyTypes"] = t;
            }
            json!({"kind": "NetworkPolicy", "apiVersion": "networking.k8s.io/v1",
                "metadata": {"namespace": ns, "name": "p"}, "spec": spec})
        })
}

/// (namespace, pod label, app label, serves a port named http) per pod.
fn pods() -> impl Strategy<Value = Vec<(&'static str, &'static str, Option<&'static str>, bool)>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["x", "y"]),
            prop::sample::select(vec!["a", "b", "c"]),
            prop::option::of(prop::sample::select(vec!["web", "db"])),
            any::<bool>(),
        ),
        2..5,
    )
}

// ---- the system under test ----

fn build(
    pods_spec: &[(&str, &str, Option<&str>, bool)],
    policies: &[Value],
) -> (Cluster, Vec<RefPod>) {
    let mut docs: Vec<Value> = ["x", "y"]
        .iter()
        .map(|n| json!({"kind":"Namespace","apiVersion":"v1","metadata":{"name":n,"labels":{"ns":n}}}))
        .collect();
    let mut refs = Vec::new();
    for (i, (ns, label, app, http)) in pods_spec.iter().enumerate() {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, i as u8 + 1));
        let mut labels = BTreeMap::from([("pod".to_string(), label.to_string())]);
        if let Some(a) = app {
            labels.insert("app".into(), a.to_string());
        }
        let ports = if *http {
            json!([{"name":"http","containerPort":80}])
        } else {
            json!([])
        };
        docs.push(json!({"kind":"Pod","apiVersion":"v1",
            "metadata":{"namespace":ns,"name":format!("p{i}"),"labels":labels},
            "spec":{"nodeName":NODE,"containers":[{"name":"c","ports":ports}]},
            "status":{"podIP":ip.to_string()}}));
        refs.push(RefPod {
            ns: ns.to_string(),
            labels,
            ip,
            http: *http,
        });
    }
    for (i, p) in policies.iter().enumerate() {
        let mut p = p.clone();
        p["metadata"]["name"] = json!(format!("p{i}"));
        docs.push(p);
    }
    let text: String = docs.iter().map(|d| format!("---\n{d}\n")).collect();
    let mut objects = kubesrc::Objects::default();
    kubesrc::manifests::load_text(&text, "generated", &mut objects);
    let cluster = Cluster::from_objects(&objects);
    assert!(cluster.problems.is_empty(), "{:?}", cluster.problems);
    (cluster, refs)
}

/// The switch's verdict for `h` on an endpoint's ACLs of one direction, the rules made by
/// hns-compiler from what HNS reads (sets expanded as the network holds them): the matching
/// rule of lowest priority decides, Block on a tie; no match allows.
fn acl_verdict(
    acls: &[Acl],
    style: Style,
    net: &hcn::Network,
    dir: AclDirection,
    h: &Headers,
) -> bool {
    let vfp_dir = match dir {
        AclDirection::In => vfp::Direction::In,
        AclDirection::Out => vfp::Direction::Out,
    };
    let sets = hns_compiler::acl::Sets::of(net);
    let mine: Vec<Acl> = acls
        .iter()
        .filter(|a| a.direction == dir)
        .cloned()
        .collect();
    policy::acl::hcn_acls(&mine, style)
        .unwrap()
        .iter()
        .flat_map(|a| hns_compiler::acl::rules(a, &sets))
        .map(|(_, r)| r)
        .filter(|r| r.conditions.matches(h, None, vfp_dir))
        .min_by_key(|r| (r.priority, r.action != vfp::Action::Block))
        .is_none_or(|r| r.action == vfp::Action::Allow)
}

fn windows_allows(plan: &Plan, style: Style, src: IpAddr, dst: IpAddr, c: &Connection) -> bool {
    let net = hcn::Network {
        policies: plan
            .sets
            .iter()
            .map(|s| hcn::NetworkPolicy::SetPolicy(s.setting().unwrap()))
            .collect(),
        ..Default::default()
    };
    let h = Headers {
        src_ip: src,
        dst_ip: dst,
        proto: c.protocol.number(),
        src_port: 40000,
        dst_port: c.port,
        ..Headers::empty()
    };
    let out = plan
        .endpoints
        .get(&src)
        .map(|e| e.acls.as_slice())
        .unwrap_or_default();
    let inn = plan
        .endpoints
        .get(&dst)
        .map(|e| e.acls.as_slice())
        .unwrap_or_default();
    acl_verdict(out, style, &net, AclDirection::Out, &h)
        && acl_verdict(inn, style, &net, AclDirection::In, &h)
}

const CONNECTIONS: [(&str, Protocol, u16); 3] = [
    ("TCP", Protocol::Tcp, 80),
    ("TCP", Protocol::Tcp, 81),
    ("UDP", Protocol::Udp, 80),
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_style_judges_as_kubernetes_does_or_as_its_problems_say(
        pods_spec in pods(),
        policies in prop::collection::vec(policy(), 0..4),
    ) {
        let (cluster, refs) = build(&pods_spec, &policies);
        let named: Vec<Value> = policies.iter().enumerate().map(|(i, p)| {
            let mut p = p.clone();
            p["metadata"]["name"] = json!(format!("p{i}"));
            p
        }).collect();
        let ctx = NodeContext { node: NODE.into(), host_addresses: Vec::new() };
        let calico = plan(&cluster, &ctx, Style::Calico);
        let npm = plan(&cluster, &ctx, Style::Npm);
        for s in 0..refs.len() {
            for d in (0..refs.len()).filter(|d| *d != s) {
                for (name, protocol, port) in CONNECTIONS {
                    let c = Connection { src: refs[s].ip, dst: refs[d].ip, protocol, port };
                    let expected = reference(&named, &refs, s, d, (name, port));
                    prop_assert_eq!(cluster.allows(&c), expected, "linux {:?}", c);
                    let on_calico = windows_allows(&calico, Style::Calico, c.src, c.dst, &c);
                    if calico.problems.is_empty() {
                        prop_assert_eq!(on_calico, expected, "calico {:?} {:#?}", c, calico.endpoints);
                    } else {
                        prop_assert!(!on_calico || expected, "calico allowed more than Linux {:?}", c);
                    }
                    if npm.problems.is_empty() {
                        prop_assert_eq!(windows_allows(&npm, Style::Npm, c.src, c.dst, &c), expected, "npm {:?}", c);
                    }
                }
            }
        }
    }
}

/// AclAction is used by name in the plans' JSON; keep the import honest.
#[test]
fn a_policy_selecting_nothing_programs_only_the_profile() {
    let (cluster, _) = build(&[("x", "a", None, false)], &[]);
    let ctx = NodeContext {
        node: NODE.into(),
        host_addresses: Vec::new(),
    };
    let p = plan(&cluster, &ctx, Style::Calico);
    let acls = &p.endpoints[&"10.0.0.1".parse::<IpAddr>().unwrap()].acls;
    let actions: Vec<(AclDirection, AclAction, u16)> = acls
        .iter()
        .map(|a| (a.direction, a.action, a.priority))
        .collect();
    assert_eq!(
        actions,
        [
            (AclDirection::In, AclAction::Allow, 1000),
            (AclDirection::In, AclAction::Block, 1001),
            (AclDirection::Out, AclAction::Allow, 1000),
            (AclDirection::Out, AclAction::Block, 1001),
        ]
    );
    assert!(
        plan(&cluster, &ctx, Style::Npm)
            .endpoints
            .values()
            .all(|e| e.acls.is_empty())
    );
}
