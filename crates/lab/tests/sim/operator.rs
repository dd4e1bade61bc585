//! An operator's hand edits of a node's switch (`winnet vfpctrl`, through
//! `hns_compiler::operator`), on a cluster of the real components: a removed load-balancer rule
//! stops balancing on that port, an added block rule blocks, bad requests are refused naming
//! their field, the next recompile of the owner puts its rules back — and the doctor, reading
//! the switch dump against the compiler's placements, names exactly those edits (nothing on
//! the cluster as compiled).

use doctor::snapshot::{HnsView, NodeSnapshot};
use doctor::{ProblemKind, diagnose};
use hcn::error::HResult;
use hns::Profile;
use hns::state::WriteOp;
use hns_client::rule_spec::RuleSpec;
use hns_client::switch::{EditOp, PortRules, RuleEdit};
use hns_compiler::operator::edit_rules;
use lab::Who;

use crate::topology::*;

fn edit(
    t: &Topo,
    port: &str,
    layer: Option<&str>,
    op: EditOp,
) -> Result<PortRules, hcn::error::HnsError> {
    let mut c = t.c.nodes[0].compiler();
    edit_rules(
        &mut c,
        &RuleEdit {
            port: port.to_string(),
            layer: layer.map(str::to_string),
            group: layer.map(|_| "default".to_string()),
            op,
        },
    )
}

/// Node 0 as the doctor sees it: its HNS objects and its switch dump (no Kubernetes side).
fn snapshot(t: &Topo) -> NodeSnapshot {
    let node = &t.c.nodes[0];
    let hns = node.read(|s| HnsView {
        networks: s.networks().cloned().collect(),
        endpoints: s.endpoints().cloned().collect(),
        namespaces: s.namespaces().cloned().collect(),
        load_balancers: s.load_balancers().cloned().collect(),
        routes: s.routes().cloned().collect(),
    });
    let dump = hns_compiler::dump::switch_dump(&node.compiler(), &[]);
    NodeSnapshot {
        node: "node1".into(),
        hns,
        switch: Some(dump),
        ..NodeSnapshot::default()
    }
}

/// The findings of the switch checks (the snapshot has no Kubernetes side and no address
/// plan, so the others are not asked).
fn switch_findings(s: &NodeSnapshot) -> Vec<doctor::Finding> {
    diagnose(s)
        .into_iter()
        .filter(|f| {
            matches!(
                f.kind,
                ProblemKind::RulesMissing
                    | ProblemKind::RulesWithoutOwner
                    | ProblemKind::RemoteSubnetWithoutEncap
            )
        })
        .collect()
}

fn kinds(s: &NodeSnapshot) -> Vec<ProblemKind> {
    switch_findings(s).iter().map(|f| f.kind).collect()
}

#[test]
fn hand_edits_change_the_switch_and_the_doctor_names_them() {
    // unrestricted: the only profile whose HNS modifies a load balancer in place (the last step).
    let mut t = topo(Backend::HostGw, Profile::Unrestricted);
    let Who::Pod(_, a_ep) = t.a else {
        unreachable!()
    };
    let a = a_ep.to_string();
    assert!(!snapshot(&t).switch.expect("dump").placed.is_empty());
    assert_eq!(kinds(&snapshot(&t)), Vec::<ProblemKind>::new());
    assert!(t.c.tcp_syn(t.a, ip(WEB_REMOTE), 80).ok());

    // The rules of api's load balancer (10.96.0.20) on a's port, listed and removed.
    let lb = t.c.nodes[0]
        .read(|s| {
            s.load_balancers()
                .find(|l| l.frontend_vips == vec![ip(WEB_REMOTE)])
                .cloned()
        })
        .expect("api's load balancer");
    let listed = edit(&t, &a, Some("slb"), EditOp::List).expect("list");
    assert_eq!(listed.endpoint.as_deref(), Some(a.as_str()));
    let ids: Vec<String> = listed
        .layers
        .iter()
        .flat_map(|l| &l.rules)
        .filter(|r| r.owner_id.eq_ignore_ascii_case(&lb.id.to_string()))
        .map(|r| r.id.clone())
        .collect();
    assert!(!ids.is_empty(), "{listed:#?}");
    // Highest index first: the owner's other rules are renumbered from 0 after each removal.
    for id in ids.iter().rev() {
        let after = edit(&t, &a, Some("slb"), EditOp::Remove(id.clone())).expect("remove");
        assert_eq!(after.changed.as_deref(), Some(id.as_str()));
    }
    // Not balanced at a's port any more; the connection still works here because the packet,
    // routed to the host, is balanced by the host vNIC's copy of the rules (so the removal
    // is seen in the dump, not in the traffic).
    let slb = edit(&t, &a, Some("slb"), EditOp::List).expect("list");
    assert!(
        slb.layers[0]
            .rules
            .iter()
            .all(|r| !r.owner_id.eq_ignore_ascii_case(&lb.id.to_string())),
        "{slb:#?}"
    );
    let snap = snapshot(&t);
    assert_eq!(kinds(&snap), vec![ProblemKind::RulesMissing]);
    let f = &switch_findings(&snap)[0];
    assert!(
        f.objects
            .iter()
            .any(|o| o.kind == "LoadBalancer" && o.id.eq_ignore_ascii_case(&lb.id.to_string())),
        "{f:#?}"
    );

    // A block rule added by hand on a's port: a's connections to d are blocked.
    let d = t.ip(t.d);
    let spec: RuleSpec = format!("name=no-d priority=1 dir=out proto=tcp dst={d} action=block")
        .parse()
        .expect("spec");
    let added = edit(&t, &a, Some("acl"), EditOp::Add(spec.clone())).expect("add");
    assert_eq!(added.changed.as_deref(), Some("Operator:no-d:0"));
    assert!(!t.c.tcp_syn(t.a, d, 8080).ok(), "not blocked");
    let again = edit(&t, &a, Some("acl"), EditOp::Add(spec)).expect_err("a second no-d");
    assert!(again.detail.starts_with("name: "), "{again:?}");
    let snap = snapshot(&t);
    assert_eq!(
        kinds(&snap),
        vec![ProblemKind::RulesMissing, ProblemKind::RulesWithoutOwner]
    );
    let f = &switch_findings(&snap)[1];
    assert!(
        f.objects
            .iter()
            .any(|o| o.kind == "Rule" && o.id == "Operator no-d"),
        "{f:#?}"
    );

    // Bad requests, each refused naming its field.
    for (port, layer, op, field, code) in [
        (
            "no-such-port",
            None,
            EditOp::List,
            "port: ",
            HResult::ERROR_NOT_FOUND,
        ),
        (
            a.as_str(),
            Some("vfp"),
            EditOp::List,
            "layer: ",
            HResult::ERROR_NOT_FOUND,
        ),
        (
            a.as_str(),
            Some("slb"),
            EditOp::Remove("LoadBalancer:x".into()),
            "rule: ",
            HResult::E_INVALIDARG,
        ),
        (
            a.as_str(),
            Some("slb"),
            EditOp::Remove("LoadBalancer:nobody:0".into()),
            "rule: ",
            HResult::ERROR_NOT_FOUND,
        ),
    ] {
        let e = edit(&t, port, layer, op).expect_err(field);
        assert!(e.detail.starts_with(field), "{e:?}");
        assert_eq!(e.code, code, "{e:?}");
    }
    let mut c = t.c.nodes[0].compiler();
    let no_group = edit_rules(
        &mut c,
        &RuleEdit {
            port: a.clone(),
            layer: Some("acl".into()),
            group: None,
            op: EditOp::Remove("Operator:no-d:0".into()),
        },
    )
    .expect_err("no group");
    assert!(no_group.detail.starts_with("group: "), "{no_group:?}");
    let other_group = edit_rules(
        &mut c,
        &RuleEdit {
            port: a.clone(),
            layer: Some("acl".into()),
            group: Some("LB_DSR".into()),
            op: EditOp::List,
        },
    )
    .expect("a list of a group that is not there lists nothing");
    assert!(other_group.layers.iter().all(|l| l.rules.is_empty()));
    drop(c);

    // The owner recompiled (its backends changed): its rules are back; the hand-added rule
    // stays until removed.
    let mut changed = lb.clone();
    changed.host_compute_endpoints.reverse();
    t.c.nodes[0]
        .hns(WriteOp::UpdateLoadBalancer(lb.id, changed))
        .expect("update the load balancer");
    assert_eq!(kinds(&snapshot(&t)), vec![ProblemKind::RulesWithoutOwner]);
    edit(
        &t,
        &a,
        Some("acl"),
        EditOp::Remove("Operator:no-d:0".into()),
    )
    .expect("remove no-d");
    assert_eq!(kinds(&snapshot(&t)), Vec::<ProblemKind>::new());
    assert!(t.c.tcp_syn(t.a, d, 8080).ok());
}
