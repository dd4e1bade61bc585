//! The readers of NetworkPolicies and Pods on any document: a NetworkPolicy or Pod of random
//! shape (fields dropped, wrong kinds of values, out-of-range numbers, unknown operators) is
//! used or refused with a reason naming where it is, never a panic; and one that is used
//! reads back to what was written.

use policy::Cluster;
use proptest::prelude::*;
use serde_json::{Value, json};

/// JSON values of every kind, small.
fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-70000i64..70000).prop_map(Value::from),
        prop::sample::select(vec![
            "",
            "TCP",
            "UDP",
            "SCTP",
            "In",
            "NotIn",
            "Exists",
            "http",
            "10.0.0.0/8",
            "10.1.0.0/16",
            "::/0",
            "Ingress",
            "Egress",
            "x"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "port",
                    "endPort",
                    "protocol",
                    "cidr",
                    "except",
                    "key",
                    "operator",
                    "values",
                    "matchLabels",
                    "matchExpressions",
                    "podSelector",
                    "namespaceSelector",
                    "ipBlock",
                    "from",
                    "to",
                    "ports"
                ])
                .prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A policy whose spec fields are replaced by random values.
fn policy_doc() -> impl Strategy<Value = Value> {
    (any_value(), any_value(), any_value(), any_value()).prop_map(
        |(sel, ingress, egress, types)| {
            json!({"kind":"NetworkPolicy","apiVersion":"networking.k8s.io/v1",
            "metadata":{"name":"p","namespace":"x"},
            "spec":{"podSelector":sel,"ingress":ingress,"egress":egress,"policyTypes":types}})
        },
    )
}

fn read(doc: &Value) -> Cluster {
    let mut objects = kubesrc::Objects::default();
    kubesrc::manifests::load_text(&doc.to_string(), "doc.json", &mut objects);
    Cluster::from_objects(&objects)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_policy_is_used_or_refused_naming_where(doc in policy_doc()) {
        let c = read(&doc);
        prop_assert_eq!(c.policies.len() + c.problems.len(), 1, "{:?}", c.problems);
        for p in &c.problems {
            prop_assert!(p.starts_with("doc.json document 1 (NetworkPolicy p): "), "{}", p);
        }
    }

    #[test]
    fn any_pod_ports_are_used_or_refused_naming_where(ports in any_value(), ip in any_value()) {
        let doc = json!({"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"x"},
            "spec":{"nodeName":"n1","containers":[{"name":"c","ports":ports}]},
            "status":{"podIP":ip}});
        let c = read(&doc);
        prop_assert!(c.pods.len() + c.problems.len() <= 1);
        for p in &c.problems {
            prop_assert!(p.starts_with("doc.json document 1 (Pod a): "), "{}", p);
        }
    }

    #[test]
    fn a_port_range_reads_back_as_written(first in 1u16.., len in 0u16..100, udp in any::<bool>()) {
        let last = first.saturating_add(len);
        let protocol = if udp { "UDP" } else { "TCP" };
        let doc = json!({"kind":"NetworkPolicy","apiVersion":"networking.k8s.io/v1",
            "metadata":{"name":"p","namespace":"x"},
            "spec":{"podSelector":{},"ingress":[{"ports":[{"protocol":protocol,"port":first,"endPort":last}]}]}});
        let c = read(&doc);
        prop_assert!(c.problems.is_empty(), "{:?}", c.problems);
        let rules = c.policies[0].ingress.clone().unwrap();
        prop_assert_eq!(&rules[0].ports[0].port, &policy::model::PortMatch::Range { first, last });
        prop_assert_eq!(rules[0].ports[0].protocol.name(), protocol);
    }
}

#[test]
fn a_bad_field_is_named_with_its_fix() {
    let cases = [
        (
            json!({"podSelector":{},"ingress":[{"ports":[{"port":80,"endPort":70}]}]}),
            "spec.ingress[0].ports[0].endPort: 70 is below port 80",
        ),
        (
            json!({"podSelector":{},"ingress":[{"ports":[{"port":0}]}]}),
            "spec.ingress[0].ports[0].port: 0 is not a port; use 1-65535",
        ),
        (
            json!({"podSelector":{"matchExpressions":[{"key":"a","operator":"Has"}]}}),
            "spec.podSelector.matchExpressions[0].operator: \"Has\" is not an operator",
        ),
        (
            json!({"podSelector":{},"egress":[{"to":[{"ipBlock":{"cidr":"10.0.0.0/8","except":["11.0.0.0/8"]}}]}]}),
            "spec.egress[0].to[0].ipBlock.except[0]: 11.0.0.0/8 must be a strict subset of cidr 10.0.0.0/8",
        ),
        (
            json!({"podSelector":{},"policyTypes":["Both"]}),
            "spec.policyTypes[0]: \"Both\" is not a policy type; use Ingress or Egress",
        ),
        (
            json!({"podSelector":{},"ingress":[{"from":[{}]}]}),
            "spec.ingress[0].from[0]: a peer needs podSelector, namespaceSelector or ipBlock",
        ),
    ];
    for (spec, want) in cases {
        let c = read(
            &json!({"kind":"NetworkPolicy","apiVersion":"networking.k8s.io/v1","metadata":{"name":"p","namespace":"x"},"spec":spec}),
        );
        assert!(
            c.policies.is_empty() && c.problems.len() == 1,
            "{want}: {:?}",
            c.problems
        );
        assert!(c.problems[0].contains(want), "{want} in {}", c.problems[0]);
    }
}
