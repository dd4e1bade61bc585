//! Manifests are user input: arbitrary text and arbitrary objects of the kinds the proxy reads
//! never panic, and whatever is refused is reported with where it came from.

use proptest::prelude::*;
use proxy::Snapshot;
use proxy::planner::{Backend, NodeContext, plan_service};
use serde_json::{Value, json};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![
            Just("10.96.0.10".to_string()),
            Just("TCP".to_string()),
            Just("Local".to_string()),
            ".{0,12}"
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        let key = prop_oneof![
            Just("spec".to_string()),
            Just("ports".to_string()),
            Just("port".to_string()),
            Just("clusterIP".to_string()),
            Just("endpoints".to_string()),
            Just("addresses".to_string()),
            Just("nodeName".to_string()),
            Just("conditions".to_string()),
            Just("metadata".to_string()),
            Just("name".to_string()),
            Just("targetPort".to_string()),
            "[a-zA-Z]{1,10}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        let mut snap = Snapshot::default();
        proxy::source::manifests::load_text(&text, "fuzz.yaml", &mut snap);
        for p in &snap.problems {
            prop_assert!(p.contains("fuzz.yaml"), "a problem says where: {p}");
        }
    }

    #[test]
    fn arbitrary_objects_never_panic(
        kind in prop::sample::select(vec!["Service", "EndpointSlice", "Node", "List", "Pod"]),
        body in json_value(),
    ) {
        let mut obj = match body { Value::Object(m) => m, _ => Default::default() };
        obj.insert("kind".into(), json!(kind));
        let mut snap = Snapshot::default();
        proxy::source::manifests::load_text(&Value::Object(obj).to_string(), "fuzz.json", &mut snap);
        // Whatever was accepted can be planned without panicking, and planned LBs have backends.
        let ctx = NodeContext { hostname: "win-1".into(), ..NodeContext::default() };
        let by_service = snap.slices_by_service();
        for (key, svc) in &snap.services {
            let slices = by_service.get(key).cloned().unwrap_or_default();
            let plan = plan_service(svc, &slices, &ctx);
            for lb in &plan.lbs {
                prop_assert!(!lb.backends.is_empty());
                prop_assert!(lb.backends.iter().all(|b| !matches!(b, Backend::Root)));
            }
        }
    }
}

/// A Service of any shape with endpoints anywhere in any condition.
fn service_and_slice() -> impl Strategy<Value = (Value, Value)> {
    let endpoint = (
        0u8..4,
        1u8..250,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(node, host, ready, serving, terminating)| {
            let node_name = ["win-1", "win-2", "linux-1", "win-1"][node as usize];
            json!({"addresses":[format!("10.244.{}.{host}", node + 1)],"nodeName":node_name,
            "conditions":{"ready":ready,"serving":serving,"terminating":terminating}})
        });
    (
        prop::sample::select(vec!["ClusterIP", "NodePort", "LoadBalancer"]),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(endpoint, 0..8),
    )
        .prop_map(|(ty, etp_local, itp_local, affinity, ingress, eps)| {
            let mut svc = json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"default"},
                "spec":{"type":ty,"clusterIP":"10.96.0.10","externalIPs":["192.168.0.100"],
                    "externalTrafficPolicy": if etp_local {"Local"} else {"Cluster"},
                    "internalTrafficPolicy": if itp_local {"Local"} else {"Cluster"},
                    "sessionAffinity": if affinity {"ClientIP"} else {"None"},
                    "ports":[{"name":"a","port":80,"targetPort":8080,"nodePort":30080},{"name":"b","port":53,"protocol":"UDP","nodePort":30053}]}});
            if ingress {
                svc["status"] = json!({"loadBalancer":{"ingress":[{"ip":"192.168.0.200"}]}});
            }
            let slice = json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
                "metadata":{"name":"s-1","namespace":"default","labels":{"kubernetes.io/service-name":"s"}},
                "addressType":"IPv4","ports":[{"name":"a","port":8080},{"name":"b","port":53,"protocol":"UDP"}],"endpoints":eps});
            (svc, slice)
        })
}

proptest! {
    #[test]
    fn plans_keep_winkernel_invariants((svc, slice) in service_and_slice(), dsr in any::<bool>()) {
        let mut snap = Snapshot::default();
        proxy::source::manifests::load_text(&format!("---\n{svc}\n---\n{slice}\n"), "gen", &mut snap);
        prop_assert!(snap.problems.is_empty(), "{:?}", snap.problems);
        let ctx = NodeContext { hostname: "win-1".into(), dsr_supported: true, enable_dsr: dsr, session_affinity_supported: true, ..NodeContext::default() };
        let (key, service) = snap.services.iter().next().unwrap();
        let slices = snap.slices_by_service().get(key).cloned().unwrap_or_default();
        let plan = plan_service(service, &slices, &ctx);
        let mut frontends = std::collections::BTreeSet::new();
        let mut remotes = std::collections::BTreeSet::new();
        for lb in &plan.lbs {
            prop_assert!(frontends.insert(lb.frontend.clone()), "one LB per frontend");
            prop_assert!(!lb.backends.is_empty());
            let all_local = lb.backends.iter().all(|b| matches!(b, Backend::Local(_)));
            match lb.role {
                proxy::planner::Role::ClusterIp => {
                    if service.internal_policy_local { prop_assert!(all_local) }
                    prop_assert_eq!(lb.lb_flags & 1 == 1, dsr);
                }
                _ => {
                    if service.external_policy_local { prop_assert!(all_local); prop_assert_eq!(lb.lb_flags & 1, 1) }
                }
            }
            prop_assert_eq!(lb.distribution, if service.session_affinity { 2 } else { 0 });
            for b in &lb.backends {
                if let Backend::Remote(ip) = b { remotes.insert(*ip); }
            }
        }
        let planned: std::collections::BTreeSet<_> = plan.remotes.iter().map(|r| r.ip).collect();
        prop_assert_eq!(planned, remotes, "a remote endpoint for every remote backend, and no other");
    }
}
