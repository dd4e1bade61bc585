//! Each planned ACL explained: the NetworkPolicy rule that made it (from felix's Ids alone, and
//! for NPM's Ids through the planner), the explained list equal to what the agent sends, and
//! Kubernetes' verdict beside what a style skipped.

use std::net::IpAddr;

use hcn::policy::AclAction;
use policy::explain::{Source, explain_plan, linux_verdict};
use policy::model::{Direction, Protocol};
use policy::{Cluster, Connection, NodeContext, Style, plan};

const OBJECTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {ns: x}}
---
apiVersion: v1
kind: Namespace
metadata: {name: y, labels: {ns: y}}
---
apiVersion: v1
kind: Pod
metadata: {namespace: x, name: a, labels: {pod: a}}
spec: {nodeName: n1, containers: [{name: c, ports: [{name: http, containerPort: 80}]}]}
status: {podIP: 10.244.1.2}
---
apiVersion: v1
kind: Pod
metadata: {namespace: y, name: b, labels: {pod: b}}
spec: {nodeName: n2, containers: [{name: c}]}
status: {podIP: 10.244.2.3}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: allow-y}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: zzz}}}]
  - from: [{namespaceSelector: {matchLabels: {ns: y}}}]
    ports: [{protocol: TCP, port: 81}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: named}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - ports: [{protocol: TCP, port: http}]
"#;

const A: &str = "10.244.1.2";
const B: &str = "10.244.2.3";

fn cluster() -> Cluster {
    let mut objects = kubesrc::Objects::default();
    kubesrc::manifests::load_text(OBJECTS, "t", &mut objects);
    let c = Cluster::from_objects(&objects);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    c
}

fn ctx() -> NodeContext {
    NodeContext {
        node: "n1".into(),
        host_addresses: vec!["192.168.0.11/32".parse().unwrap()],
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn every_planned_acl_is_what_the_agent_sends_with_the_rule_that_made_it() {
    let c = cluster();
    for style in [Style::Calico, Style::Npm] {
        let p = plan(&c, &ctx(), style);
        let explained = explain_plan(&c, &p, style).unwrap();
        let ep = &explained[&ip(A)];
        assert_eq!(ep.pod, "x/a");
        // The same list the reconciler sends (it drops a rule listed twice).
        let sent = policy::acl::hcn_acls(&p.endpoints[&ip(A)].acls, style).unwrap();
        let mut ours: Vec<_> = Vec::new();
        for a in &ep.acls {
            if !ours.contains(&a.setting) {
                ours.push(a.setting.clone());
            }
        }
        assert_eq!(ours, sent, "{style:?}");
        // The Allow on TCP 81 from namespace y is rule 1 of x/allow-y.
        let allow_81 = ep
            .acls
            .iter()
            .find(|a| {
                a.acl.action == AclAction::Allow && a.acl.local_ports.iter().any(|r| r.first == 81)
            })
            .unwrap_or_else(|| panic!("{style:?}: no Allow of port 81: {:#?}", ep.acls));
        assert_eq!(
            allow_81.source,
            Source::Rule {
                policy: "x/allow-y".into(),
                direction: Direction::Ingress,
                rule: 1
            },
            "{style:?}"
        );
        assert_eq!(
            allow_81.source.to_string(),
            "NetworkPolicy x/allow-y rule spec.ingress[1]"
        );
    }
}

#[test]
fn each_style_names_its_closing_blocks_and_calico_its_own_allows() {
    let c = cluster();
    let p = plan(&c, &ctx(), Style::Calico);
    let ep = &explain_plan(&c, &p, Style::Calico).unwrap()[&ip(A)];
    let sources: Vec<String> = ep.acls.iter().map(|a| a.source.to_string()).collect();
    assert_eq!(
        sources.first().map(String::as_str),
        Some("the node -> pod Allow (readiness probes)")
    );
    assert!(
        sources
            .iter()
            .any(|s| s.starts_with("the Block closing the endpoint's ingress")),
        "{sources:?}"
    );
    // Egress is isolated by no policy: namespace x's profile allows it.
    assert!(
        sources
            .iter()
            .any(|s| s.starts_with("namespace x's profile: allow all egress")),
        "{sources:?}"
    );
    let p = plan(&c, &ctx(), Style::Npm);
    let ep = &explain_plan(&c, &p, Style::Npm).unwrap()[&ip(A)];
    let blocks: Vec<&Source> = ep
        .acls
        .iter()
        .filter(|a| a.acl.action == AclAction::Block)
        .map(|a| &a.source)
        .collect();
    assert_eq!(
        blocks,
        [&Source::Closing {
            direction: Direction::Ingress,
            policy: Some("x/allow-y".into())
        }]
    );
}

#[test]
fn a_skipped_named_port_is_shown_beside_kubernetes_verdict() {
    let c = cluster();
    let http = Connection {
        src: ip(B),
        dst: ip(A),
        protocol: Protocol::Tcp,
        port: 80,
    };
    for style in [Style::Calico, Style::Npm] {
        let p = plan(&c, &ctx(), style);
        let (allowed, skipped) = linux_verdict(&c, &p.problems, &http, Direction::Ingress);
        assert!(allowed, "x/named allows TCP 80 (port http) into a");
        assert_eq!(skipped.len(), 1, "{style:?}: {skipped:?}");
        assert_eq!(skipped[0].policy, "x/named");
    }
    // A packet no skipped rule judges (from a to b: no policy selects b).
    let out = Connection {
        src: ip(A),
        dst: ip(B),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let p = plan(&c, &ctx(), Style::Calico);
    for side in [Direction::Egress, Direction::Ingress] {
        let (allowed, skipped) = linux_verdict(&c, &p.problems, &out, side);
        assert!(allowed, "{side:?}");
        assert!(skipped.is_empty(), "{side:?}: {skipped:?}");
    }
    // b's egress side of b -> a: no policy selects b, nothing skipped judges it.
    let (allowed, skipped) = linux_verdict(&c, &p.problems, &http, Direction::Egress);
    assert!(allowed && skipped.is_empty(), "{skipped:?}");
    // Port 82 from b: neither policy allows it on Linux either.
    let other = Connection { port: 82, ..http };
    assert!(!linux_verdict(&c, &p.problems, &other, Direction::Ingress).0);
}

#[test]
fn a_skipped_rule_is_shown_only_for_the_packets_it_names() {
    let c = cluster();
    // b -> a on TCP 81: allowed by x/allow-y's rule 1 on Linux too (b is in y); x/named's
    // skipped rule names port 80 only, so it does not bear on this packet.
    let p = plan(&c, &ctx(), Style::Calico);
    let tcp81 = Connection {
        src: ip(B),
        dst: ip(A),
        protocol: Protocol::Tcp,
        port: 81,
    };
    let (allowed, skipped) = linux_verdict(&c, &p.problems, &tcp81, Direction::Ingress);
    assert!(allowed);
    assert!(skipped.is_empty(), "{skipped:?}");
    // NPM did not apply x/named at all: it bears on every packet into a it would isolate.
    let p = plan(&c, &ctx(), Style::Npm);
    let (_, skipped) = linux_verdict(&c, &p.problems, &tcp81, Direction::Ingress);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
}

mod props {
    use super::*;
    use hcn::policy::AclDirection;
    use policy::explain::source_of_id;
    use proptest::prelude::*;

    proptest! {
        /// Any Id read from HNS is parsed without a panic, and what it names is what it says.
        #[test]
        fn any_id_reads_without_a_panic(id in ".{0,80}") {
            if let Some(Source::Rule { policy, .. }) = source_of_id(&id, AclDirection::In) {
                prop_assert!(id.starts_with("policy-") && policy.contains('/'));
            }
        }

        /// Whatever a policy and namespace are called (names hold `-` and `.`), felix's Ids of
        /// its rules read back as that policy and the rule's index.
        #[test]
        fn felix_ids_read_back_as_their_policy_and_rule(
            ns in "[a-z0-9]([a-z0-9-]{0,12}[a-z0-9])?",
            name in "[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?",
            rules in 1usize..4,
        ) {
            let ingress: Vec<String> = (0..rules)
                .map(|r| format!("  - ports: [{{protocol: TCP, port: {}}}]", 80 + r))
                .collect();
            let text = format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{namespace: \"{ns}\", name: p, labels: {{app: w}}}}\n\
                 spec: {{nodeName: n1, containers: [{{name: c}}]}}\nstatus: {{podIP: 10.244.1.9}}\n---\n\
                 apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
                 metadata: {{namespace: \"{ns}\", name: \"{name}\"}}\n\
                 spec:\n  podSelector: {{}}\n  ingress:\n{}\n",
                ingress.join("\n")
            );
            let mut objects = kubesrc::Objects::default();
            kubesrc::manifests::load_text(&text, "t", &mut objects);
            let c = Cluster::from_objects(&objects);
            prop_assert!(c.problems.is_empty(), "{:?}", c.problems);
            let p = plan(&c, &ctx(), Style::Calico);
            let ep = &explain_plan(&c, &p, Style::Calico).unwrap()[&ip("10.244.1.9")];
            let mut seen = Vec::new();
            for a in &ep.acls {
                if let Some(by_id) = source_of_id(&a.acl.id, a.acl.direction) {
                    prop_assert_eq!(&by_id, &a.source);
                }
                if let Source::Rule { policy, rule, .. } = &a.source {
                    prop_assert_eq!(policy, &format!("{ns}/{name}"));
                    seen.push(*rule);
                }
            }
            prop_assert_eq!(seen, (0..rules).collect::<Vec<_>>());
        }
    }
}
