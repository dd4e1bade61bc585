//! NetworkPolicies vs HNS ACLs: an ACL the node's policy agent plans that an endpoint lacks
//! (removed by hand, or never applied), one an endpoint holds that no plan asks for, a network
//! set an ACL names that the network lacks, and — on a build where any ACL makes an endpoint
//! default-deny (ws2025 after its 2026 updates) — a direction no ACL allows although no
//! NetworkPolicy isolates it. Whether the switch holds each ACL's rules is `rules-missing`'s.

use std::collections::BTreeSet;

use hcn::policy::{AclAction, AclDirection, AclPolicySetting, AclRuleType};
use hcn::{Endpoint, NetworkPolicy};
use hns_client::acl::endpoint_acls;

use crate::finding::{Finding, ObjectRef, ProblemKind};
use crate::node::{Node, endpoint_ref};
use crate::planned::{PlannedAcl, PlannedEndpoint, PolicyView};

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    default_deny(n, out);
    missing_sets(n, out);
    if let Some(view) = &n.snap.policy {
        for planned in &view.endpoints {
            if let Some(ep) = local_endpoint(n, planned) {
                compare(n, view, planned, ep, out);
            }
        }
    }
}

/// The local endpoint of a planned pod (a pod without one is `pod-without-endpoint`): of two
/// with its address (`duplicate-endpoint-ip`), the one in a pod's namespace, then one with ACLs.
fn local_endpoint<'a>(n: &Node<'a>, planned: &PlannedEndpoint) -> Option<&'a Endpoint> {
    let local: Vec<&'a Endpoint> = n
        .by_ip
        .get(&planned.ip)?
        .iter()
        .filter(|e| !e.is_remote())
        .copied()
        .collect();
    let in_pod = |e: &&Endpoint| n.pod_endpoints.iter().any(|(p, _)| p.id == e.id);
    let rank = |e: &&Endpoint| (!in_pod(e), endpoint_acls(e).is_empty());
    local.into_iter().min_by_key(rank)
}

/// The node's own endpoints (remote ones carry no ACLs an agent programs).
fn local_endpoints<'a>(n: &Node<'a>) -> impl Iterator<Item = &'a Endpoint> {
    n.snap.hns.endpoints.iter().filter(|e| !e.is_remote())
}

/// The ACL as HNS shows it (`Get-HnsEndpoint`'s policy JSON).
fn shown(a: &AclPolicySetting) -> String {
    serde_json::to_string(a).unwrap_or_else(|_| format!("{a:?}"))
}

fn pod_ref(p: &PlannedEndpoint) -> ObjectRef {
    ObjectRef::new("Pod", p.pod.clone(), p.ip.to_string())
}

/// The planned ACLs the endpoint lacks and the ones it holds beyond the plan (as multisets:
/// the same rule listed twice is held once, as the agent sends it).
fn compare(
    n: &Node,
    view: &PolicyView,
    planned: &PlannedEndpoint,
    ep: &Endpoint,
    out: &mut Vec<Finding>,
) {
    let mut held = endpoint_acls(ep);
    let mut missing: Vec<&PlannedAcl> = Vec::new();
    for p in &planned.acls {
        match held.iter().position(|h| **h == p.acl) {
            Some(i) => {
                held.remove(i);
            }
            None if missing.iter().any(|m| m.acl == p.acl) => {}
            None => missing.push(p),
        }
    }
    for m in missing {
        out.push(missing_finding(n, view, planned, ep, m));
    }
    for h in held {
        out.push(extra_finding(n, view, planned, ep, h));
    }
}

fn missing_finding(
    n: &Node,
    view: &PolicyView,
    planned: &PlannedEndpoint,
    ep: &Endpoint,
    m: &PlannedAcl,
) -> Finding {
    let mut objects = vec![endpoint_ref(ep), pod_ref(planned)];
    if let Some(p) = &m.policy {
        objects.push(ObjectRef::new(
            "NetworkPolicy",
            p.clone(),
            m.made_by.clone(),
        ));
    }
    let breaks = match m.acl.action {
        AclAction::Block => format!(
            "what it blocks {} pod {} passes",
            dir_word(m.acl.direction),
            planned.pod
        ),
        _ => format!(
            "what it allows {} pod {} meets the next rule instead (the closing Block, or the default): connections the NetworkPolicy allows fail",
            dir_word(m.acl.direction),
            planned.pod
        ),
    };
    n.finding(
        ProblemKind::PolicyAclMissing,
        format!(
            "endpoint {} (pod {}) lacks ACL {} that the {} agent plans ({}) from {}",
            ep.name,
            planned.pod,
            shown(&m.acl),
            view.style,
            m.made_by,
            view.source
        ),
        objects,
        breaks,
        format!(
            "let the node's policy agent apply the endpoint's whole list again: it re-sends an endpoint whose ACLs differ from its plan on its next sync (restart `winnet policy` on node {}, or change any of its objects); edit no agent's ACLs by hand. On ws2022/ws2025 the re-apply resets the endpoint's TCP connections",
            n.snap.node
        ),
    )
}

fn extra_finding(
    n: &Node,
    view: &PolicyView,
    planned: &PlannedEndpoint,
    ep: &Endpoint,
    h: &AclPolicySetting,
) -> Finding {
    let breaks = match h.action {
        AclAction::Block => format!(
            "packets it names {} pod {} are dropped although no NetworkPolicy asks",
            dir_word(h.direction),
            planned.pod
        ),
        _ => format!(
            "packets it names {} pod {} pass although the NetworkPolicies do not allow them",
            dir_word(h.direction),
            planned.pod
        ),
    };
    n.finding(
        ProblemKind::PolicyAclExtra,
        format!(
            "endpoint {} (pod {}) holds ACL {} that the {} agent does not plan from {}",
            ep.name,
            planned.pod,
            shown(h),
            view.style,
            view.source
        ),
        vec![endpoint_ref(ep), pod_ref(planned)],
        breaks,
        "write what it means as a NetworkPolicy; the agent's next sync of this endpoint sends its planned list, which drops the ACL (restart `winnet policy` on the node to sync now)".into(),
    )
}

fn dir_word(d: AclDirection) -> &'static str {
    match d {
        AclDirection::In => "into",
        AclDirection::Out => "out of",
    }
}

/// The set IDs of the network's `SetPolicy` policies.
fn held_sets<'a>(n: &Node<'a>) -> BTreeSet<&'a str> {
    n.snap
        .hns
        .networks
        .iter()
        .flat_map(|net| net.policies.iter())
        .filter_map(|p| match p {
            NetworkPolicy::SetPolicy(s) => Some(s.id.as_str()),
            _ => None,
        })
        .collect()
}

/// Every set an endpoint's ACL (held, or planned) names that no network holds.
fn missing_sets(n: &Node, out: &mut Vec<Finding>) {
    let held = held_sets(n);
    let planned = n.snap.policy.as_ref();
    let mut seen = BTreeSet::new();
    for ep in local_endpoints(n) {
        let plan = planned.and_then(|v| v.endpoints.iter().find(|p| ep.ips().any(|ip| ip == p.ip)));
        let planned_acls = plan.into_iter().flat_map(|p| p.acls.iter().map(|a| &a.acl));
        for a in endpoint_acls(ep).into_iter().chain(planned_acls) {
            let named = a
                .local_addresses
                .entries()
                .iter()
                .chain(a.remote_addresses.entries())
                .filter_map(|x| match x {
                    hcn::acl::AclAddress::Set(id) => Some(id.as_str()),
                    hcn::acl::AclAddress::Prefix(_) => None,
                });
            for id in named {
                if !held.contains(id) && seen.insert((ep.id, id.to_string())) {
                    out.push(set_finding(n, ep, a, id));
                }
            }
        }
    }
}

fn set_finding(n: &Node, ep: &Endpoint, a: &AclPolicySetting, id: &str) -> Finding {
    let name = n
        .snap
        .policy
        .as_ref()
        .and_then(|v| v.sets.iter().find(|s| s.id == id))
        .map(|s| format!(" ({})", s.name))
        .unwrap_or_default();
    n.finding(
        ProblemKind::AclSetMissing,
        format!(
            "an ACL of endpoint {} names set {id}{name}, which the network does not hold",
            ep.name
        ),
        vec![
            endpoint_ref(ep),
            ObjectRef::new("SetPolicy", id.to_string(), name.trim().to_string()),
        ],
        format!(
            "HNS refuses the ACL list that names it (0x803B000D): ACL {} cannot be applied, and the agent's updates of this endpoint fail until the set is there",
            shown(a)
        ),
        "let the agent add its sets before the ACLs that name them (Azure NPM adds IPSETs, then NESTEDIPSETs, then ACLs): restart its sync; a set removed by hand comes back with it".into(),
    )
}

/// On a default-deny build: a pod endpoint with ACLs, in a direction none of them allows and
/// no NetworkPolicy isolates (all of it dropped, where Kubernetes allows it).
fn default_deny(n: &Node, out: &mut Vec<Finding>) {
    if !n.snap.profile.acl_default_deny {
        return;
    }
    for ep in local_endpoints(n) {
        let held = endpoint_acls(ep);
        let on_switch: Vec<&&AclPolicySetting> = held
            .iter()
            .filter(|a| a.rule_type != Some(AclRuleType::Host))
            .collect();
        if on_switch.is_empty() {
            continue;
        }
        let plan = n
            .snap
            .policy
            .as_ref()
            .and_then(|v| v.endpoints.iter().find(|p| ep.ips().any(|ip| ip == p.ip)));
        for (dir, name) in [(AclDirection::In, "ingress"), (AclDirection::Out, "egress")] {
            let allows = on_switch
                .iter()
                .any(|a| a.direction == dir && a.action != AclAction::Block);
            let isolated = plan.is_some_and(|p| p.isolated.iter().any(|d| d == name));
            if !allows && !isolated {
                out.push(default_deny_finding(n, ep, plan, name, dir));
            }
        }
    }
}

fn default_deny_finding(
    n: &Node,
    ep: &Endpoint,
    plan: Option<&PlannedEndpoint>,
    name: &str,
    dir: AclDirection,
) -> Finding {
    let mut objects = vec![endpoint_ref(ep)];
    let k8s = match plan {
        Some(p) => {
            objects.push(pod_ref(p));
            format!(
                "; no NetworkPolicy isolates the {name} of pod {}, so Kubernetes (and a Linux node) allows it",
                p.pod
            )
        }
        None => String::new(),
    };
    let mut f = n.finding(
        ProblemKind::AclDefaultDenyWithoutAllow,
        format!(
            "endpoint {} has ACLs but none allows {name}: on {} any ACL makes the endpoint default-deny",
            ep.name, n.snap.profile.name
        ),
        objects,
        format!("every {name} packet of the endpoint is dropped{k8s}"),
        format!(
            "add an Allow ACL for Direction {dir} matching everything, with a Priority number above the endpoint's others (Microsoft's workaround), or use an agent that closes each direction it programs with explicit rules (felix's profile Allow)"
        ),
    );
    f.source = Some("microsoft/Windows-Containers#616".into());
    f
}

/// NetworkPolicies whose planned ACLs one node holds whole and another holds none of: the
/// other node's agent is not enforcing them (stopped, failing, or pointed elsewhere).
pub fn across_nodes(snaps: &[crate::NodeSnapshot]) -> Vec<Finding> {
    // policy -> [(node, planned, held)]
    let mut status: std::collections::BTreeMap<String, Vec<(&str, usize, usize)>> =
        std::collections::BTreeMap::new();
    for snap in snaps {
        let Some(view) = &snap.policy else { continue };
        let node = Node::new(snap);
        let mut per: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
        for pe in &view.endpoints {
            let Some(ep) = local_endpoint(&node, pe) else {
                continue;
            };
            let held = endpoint_acls(ep);
            for a in &pe.acls {
                if let Some(p) = &a.policy {
                    let e = per.entry(p.as_str()).or_default();
                    e.0 += 1;
                    e.1 += usize::from(held.contains(&&a.acl));
                }
            }
        }
        for (p, (planned, held)) in per {
            status
                .entry(p.to_string())
                .or_default()
                .push((snap.node.as_str(), planned, held));
        }
    }
    let mut out = Vec::new();
    for (policy, nodes) in status {
        let applied: Vec<&str> = nodes
            .iter()
            .filter(|(_, planned, held)| held == planned)
            .map(|(n, _, _)| *n)
            .collect();
        if applied.is_empty() {
            continue;
        }
        for (node, planned, _) in nodes.iter().filter(|(_, _, held)| *held == 0) {
            out.push(not_on_node_finding(&policy, node, *planned, &applied));
        }
    }
    out
}

fn not_on_node_finding(policy: &str, node: &str, planned: usize, applied: &[&str]) -> Finding {
    Finding {
        kind: ProblemKind::PolicyNotOnEveryNode,
        node: node.to_string(),
        summary: format!(
            "NetworkPolicy {policy} is applied on {} but none of its {planned} ACL(s) is on node {node}'s endpoints",
            applied.join(", ")
        ),
        objects: vec![
            ObjectRef::new("NetworkPolicy", policy.to_string(), ""),
            ObjectRef::new("Node", node.to_string(), ""),
        ],
        breaks: format!(
            "the pods of {node} that {policy} selects are not isolated by it: what it blocks elsewhere passes here"
        ),
        fix: format!(
            "start (or restart) the NetworkPolicy agent of {node} and read its log: a style that needs SetPolicy refuses to start on a build without it, and a source it cannot read keeps its last good objects"
        ),
        source: None,
        repair: None,
    }
}
