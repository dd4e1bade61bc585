//! HNS objects vs the compiled switch: an object whose rules are missing (fewer on a port's
//! layer than the compiler placed there, or no port or rule at all), rules no HNS object placed
//! (added by hand with vfpctrl, or left by a deleted object), an Overlay remote subnet without
//! its encapsulation rule.

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
    let owners: HashSet<String> = rules(sw).filter_map(|(_, _, r)| owner_guid(r)).collect();
    if sw.placed.is_empty() {
        // A dump from before the compiler's placements were recorded: only rules whose owner
        // HNS no longer has can be told apart.
        orphans_by_owner(n, sw, out);
    } else {
        against_placements(n, sw, out);
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
        let placed = sw
            .placed
            .iter()
            .any(|p| p.owner_kind == "LoadBalancer" && p.owner_id.eq_ignore_ascii_case(&id));
        // A load balancer the compiler placed but whose rules are gone is named above.
        if lb.host_compute_endpoints.is_empty() || owners.contains(&id) || placed {
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

const ORPHAN_BREAKS: &str = "packets matching them are still translated or dropped as the deleted object said (a deleted load balancer still balancing, a deleted ACL still blocking)";

/// Rules whose owner HNS no longer has, one finding per owner.
fn orphans_by_owner(n: &Node, sw: &SwitchDump, out: &mut Vec<Finding>) {
    let mut orphans: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (port, layer, r) in rules(sw) {
        let Some(guid) = owner_guid(r) else { continue };
        if !n.ids.contains(&guid) {
            orphans
                .entry((r.owner_kind.clone(), guid))
                .or_default()
                .push(format!("{port}/{layer}"));
        }
    }
    for ((kind, id), places) in orphans {
        out.push(n.finding(
            ProblemKind::RulesWithoutOwner,
            format!("{} rules owned by {kind} {id}, which HNS no longer has", places.len()),
            vec![ObjectRef::new("Rule", format!("{kind} {id}"), places.join(", "))],
            ORPHAN_BREAKS.into(),
            "restart hnsd: it recompiles the switch from its store (on Windows: findDegradedPolicy.ps1, then restart HNS)".into(),
        ));
    }
}

/// (port number, layer, owner kind, owner id).
type Place = (u16, String, String, String);

/// The switch against what the compiler placed in it: an owner with fewer rules on a port's
/// layer than it was given (removed by hand, `vfpctrl /remove-rule`), and rules no HNS object
/// was given there (added by hand, or left by a deleted object).
fn against_placements(n: &Node, sw: &SwitchDump, out: &mut Vec<Finding>) {
    let port_names: BTreeMap<u16, &str> =
        sw.ports.iter().map(|p| (p.id, p.name.as_str())).collect();
    let mut live: BTreeMap<Place, (u64, Vec<String>)> = BTreeMap::new();
    for p in &sw.ports {
        for l in &p.layers {
            for r in &l.rules {
                let e = live
                    .entry((
                        p.id,
                        l.name.clone(),
                        r.owner_kind.clone(),
                        r.owner_id.clone(),
                    ))
                    .or_default();
                e.0 += 1;
                e.1.push(r.id.clone());
            }
        }
    }
    let placed: BTreeMap<Place, u64> = sw
        .placed
        .iter()
        .map(|p| {
            (
                (
                    p.port,
                    p.layer.clone(),
                    p.owner_kind.clone(),
                    p.owner_id.clone(),
                ),
                p.rules,
            )
        })
        .collect();
    let place_text = |(port, layer, _, _): &Place| {
        format!(
            "port {port} {}/{layer}",
            port_names.get(port).copied().unwrap_or("?")
        )
    };
    let mut missing: BTreeMap<(String, String), (u64, u64, Vec<String>)> = BTreeMap::new();
    for (place, want) in &placed {
        let have = live.get(place).map_or(0, |(c, _)| *c);
        if have >= *want {
            continue;
        }
        let m = missing
            .entry((place.2.clone(), place.3.clone()))
            .or_default();
        m.0 += want - have;
        m.1 += want;
        m.2.push(format!("{} ({have} of {want})", place_text(place)));
    }
    for ((kind, id), (gone, total, places)) in missing {
        out.push(n.finding(
            ProblemKind::RulesMissing,
            format!("{kind} {id}: {gone} of its {total} rules are missing from the switch"),
            vec![owner_ref(n, &kind, &id), ObjectRef::new("Rule", format!("{kind} {id}"), places.join(", "))],
            format!("the flows its missing rules decide: HNS holds {kind} {id} and the switch no longer carries out all of it (the flannel#1394 symptom: HNS looks right, VFP has no rule)"),
            "make its owner recompile (restart hnsd, which recompiles the switch from its store; on Windows conditionalMitigator.ps1 restarts HNS when a rule is missing)".into(),
        ));
    }
    let mut orphans: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (place, (count, ids)) in &live {
        let want = placed.get(place).copied().unwrap_or(0);
        if *count <= want {
            continue;
        }
        // An owner the compiler placed fewer rules for than the layer holds: the extra ones
        // were not compiled (a replaced owner's leftovers, or added by hand under its name).
        orphans
            .entry((place.2.clone(), place.3.clone()))
            .or_default()
            .push(format!("{} {}", place_text(place), ids.join(",")));
    }
    for ((kind, id), places) in orphans {
        let gone = owner_guid_of(&kind, &id).is_some_and(|g| !n.ids.contains(&g));
        let why = if kind == hns_client::switch::OPERATOR {
            "added by hand (vfpctrl), no HNS object asked for them".to_string()
        } else if gone {
            "owned by an object HNS no longer has".to_string()
        } else {
            "not compiled from any HNS object".to_string()
        };
        out.push(n.finding(
            ProblemKind::RulesWithoutOwner,
            format!("rules of {kind} {id} that no HNS object placed: {why}"),
            vec![ObjectRef::new("Rule", format!("{kind} {id}"), places.join("; "))],
            ORPHAN_BREAKS.into(),
            "remove them (winnet vfpctrl --remove-rule, vfpctrl /remove-rule on Windows), or restart hnsd: it recompiles the switch from its store".into(),
        ));
    }
}

fn owner_guid_of(kind: &str, id: &str) -> Option<String> {
    owner_guid(&RuleDump {
        owner_kind: kind.to_string(),
        owner_id: id.to_string(),
        ..RuleDump::default()
    })
}

/// The HNS object behind a rule owner, as findings name it.
fn owner_ref(n: &Node, kind: &str, id: &str) -> ObjectRef {
    let guid = owner_guid_of(kind, id).unwrap_or_default();
    if let Some(e) = n.endpoints.get(&guid) {
        return endpoint_ref(e);
    }
    if let Some(lb) = n
        .snap
        .hns
        .load_balancers
        .iter()
        .find(|lb| lb.id.to_string().eq_ignore_ascii_case(&guid))
    {
        return lb_ref(lb);
    }
    if let Some(net) = n
        .snap
        .hns
        .networks
        .iter()
        .find(|net| net.id.to_string().eq_ignore_ascii_case(&guid))
    {
        return ObjectRef::new("Network", net.id.to_string(), net.name.clone());
    }
    let kind = kind.split('/').next().unwrap_or(kind);
    let id = if guid.is_empty() {
        id.to_string()
    } else {
        guid
    };
    ObjectRef::new(kind, id, String::new())
}
