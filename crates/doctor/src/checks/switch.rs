//! HNS objects vs the compiled switch: an object whose rules are missing, rules whose owner is
//! gone, an Overlay remote subnet without its encapsulation rule.

use std::collections::{BTreeMap, HashSet};

use hcn::NetworkType;
use hcn::policy::NetworkPolicy;
use hns_client::switch::{RuleDump, SwitchDump};

use crate::finding::{Finding, ObjectRef, ProblemKind};
use crate::node::{Node, endpoint_ref, lb_ref};

/// Owner kinds whose id starts with an HNS object's GUID.
const HNS_OWNERS: [&str; 5] = [
    "LoadBalancer",
    "Endpoint",
    "Network",
    "Route",
    "Endpoint/ACL",
];

fn rules(sw: &SwitchDump) -> impl Iterator<Item = (&str, &str, &RuleDump)> {
    sw.ports.iter().flat_map(|p| {
        p.layers.iter().flat_map(move |l| {
            l.rules
                .iter()
                .map(move |r| (p.name.as_str(), l.name.as_str(), r))
        })
    })
}

/// The HNS GUID at the start of a rule owner's id (`<guid>` or `<guid>/<n>`), lower case.
fn owner_guid(r: &RuleDump) -> Option<String> {
    if !HNS_OWNERS.contains(&r.owner_kind.as_str()) {
        return None;
    }
    let id = r.owner_id.split('/').next()?;
    (id.len() == 36).then(|| id.to_ascii_lowercase())
}

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    let Some(sw) = &n.snap.switch else { return };
    let mut owners: HashSet<String> = HashSet::new();
    let mut orphans: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (port, layer, r) in rules(sw) {
        let Some(guid) = owner_guid(r) else { continue };
        if !n.ids.contains(&guid) {
            orphans
                .entry((r.owner_kind.clone(), guid.clone()))
                .or_default()
                .push(format!("{port}/{layer}"));
        }
        owners.insert(guid);
    }
    for ((kind, id), places) in orphans {
        out.push(n.finding(
            ProblemKind::RulesWithoutOwner,
            format!("{} rules owned by {kind} {id}, which HNS no longer has", places.len()),
            vec![ObjectRef::new("Rule", format!("{kind} {id}"), places.join(", "))],
            "packets matching them are still translated or dropped as the deleted object said (a deleted load balancer still balancing, a deleted ACL still blocking)".into(),
            "restart hnsd: it recompiles the switch from its store (on Windows: findDegradedPolicy.ps1, then restart HNS)".into(),
        ));
    }
    let ports: HashSet<String> = sw
        .ports
        .iter()
        .filter_map(|p| p.endpoint.as_ref())
        .map(|e| e.to_ascii_lowercase())
        .collect();
    for (e, _) in &n.pod_endpoints {
        let id = e.id.to_string().to_ascii_lowercase();
        if !ports.contains(&id) {
            out.push(n.finding(
                ProblemKind::RulesMissing,
                format!("endpoint {} has no switch port", e.id),
                vec![endpoint_ref(e)],
                "every flow to and from the pod: HNS lists the endpoint but the switch never carries its frames".into(),
                "restart hnsd so it recompiles from its store; if the port is still missing, the compiler's notices (winnet hns switch) say why".into(),
            ));
        }
    }
    for lb in &n.snap.hns.load_balancers {
        let id = lb.id.to_string().to_ascii_lowercase();
        if lb.host_compute_endpoints.is_empty() || owners.contains(&id) {
            continue;
        }
        out.push(n.finding(
            ProblemKind::RulesMissing,
            format!("load balancer {} has no rule in the switch", lb.id),
            vec![lb_ref(lb)],
            "every connection to its frontend: HNS holds it, the switch does not balance it".into(),
            "restart hnsd so it recompiles from its store; the compiler's notices say why a rule was refused".into(),
        ));
    }
    for net in &n.snap.hns.networks {
        if net.network_type != NetworkType::Overlay {
            continue;
        }
        for p in &net.policies {
            let NetworkPolicy::RemoteSubnetRoute(r) = p else {
                continue;
            };
            let id = net.id.to_string().to_ascii_lowercase();
            let encap = rules(sw).any(|(_, _, rule)| {
                rule.owner_kind == "Network"
                    && rule.owner_id.eq_ignore_ascii_case(&id)
                    && rule.destinations.contains(&r.destination_prefix)
                    && rule.action.to_ascii_lowercase().contains("encap")
            });
            if encap {
                continue;
            }
            let why = sw
                .notices
                .iter()
                .find(|no| no.message.contains(&r.destination_prefix.to_string()))
                .map(|no| format!(" (compiler: {})", no.message))
                .unwrap_or_default();
            out.push(n.finding(
                ProblemKind::RemoteSubnetWithoutEncap,
                format!(
                    "remote subnet {} via {} has no encapsulation rule{why}",
                    r.destination_prefix, r.provider_address
                ),
                vec![ObjectRef::new(
                    "Network",
                    net.id.to_string(),
                    format!("{} RemoteSubnetRoute {} -> {}", net.name, r.destination_prefix, r.provider_address),
                )],
                format!(
                    "pod -> pod and Service traffic to {} (the pods of the node at {}) leaves unencapsulated and is lost; replies to it too (the flannel#1394 symptom: HNS looks right, VFP has no rule)",
                    r.destination_prefix, r.provider_address
                ),
                format!(
                    "make {} reachable on the underlay (the compiler needs its MAC; check `ip neigh` on the node) or fix the route's provider address in flanneld's lease",
                    r.provider_address
                ),
            ));
        }
    }
}
