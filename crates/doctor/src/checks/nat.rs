//! OutBoundNAT exceptions vs the address plan: an exception that covers destinations outside
//! the cluster (pods reach them untranslated, with an address the outside cannot route back
//! to), exceptions that miss the cluster or Service CIDR (pod -> pod traffic translated to the
//! node's address), and an entry that is not an address at all (the compiler drops it).

use std::net::IpAddr;

use hcn::policy::EndpointPolicy;
use ipnet::IpNet;

use crate::finding::{Finding, ProblemKind};
use crate::node::{Node, endpoint_ref};

/// An HNS address list entry: an address or a prefix (as the compiler reads it).
fn parse_net(s: &str) -> Option<IpNet> {
    let s = s.trim();
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

/// Prefixes that are inside the cluster: its CIDRs, the networks' subnets, the node's own
/// address prefixes (the underlay, which L2Bridge pods reach untranslated).
pub(crate) fn internal(n: &Node) -> Vec<IpNet> {
    let mut v: Vec<IpNet> = [n.snap.cluster.cluster_cidr, n.snap.cluster.service_cidr]
        .into_iter()
        .flatten()
        .collect();
    v.extend(
        n.snap
            .hns
            .networks
            .iter()
            .flat_map(|net| net.subnets().filter_map(|s| s.ip_address_prefix)),
    );
    if let Some(sw) = &n.snap.switch {
        v.extend(sw.facts.addresses.iter().map(IpNet::trunc));
    }
    v
}

fn covered(inner: &IpNet, by: &[IpNet]) -> bool {
    by.iter().any(|b| b.contains(inner))
}

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    let inside = internal(n);
    for (e, _) in &n.pod_endpoints {
        let mut exceptions = Vec::new();
        let mut explicit = false;
        for p in &e.policies {
            // A policy that names Destinations (loopback DSR's) translates only toward them.
            if let EndpointPolicy::OutBoundNat(s) = p
                && s.destinations.is_empty()
            {
                explicit = true;
                for x in &s.exceptions {
                    match parse_net(x) {
                        Some(net) => exceptions.push(net),
                        None => out.push(n.finding(
                            ProblemKind::ExceptionCoversExternal,
                            format!("OutBoundNAT exception \"{x}\" of endpoint {} is not an address or prefix", e.id),
                            vec![endpoint_ref(e)],
                            "the switch ignores the entry, so what it was meant to exempt is translated".into(),
                            "fix the entry in the CNI config's OutBoundNAT ExceptionList".into(),
                        )),
                    }
                }
            }
        }
        if !explicit {
            continue;
        }
        for x in &exceptions {
            if x.addr().is_ipv4() != e.ips().next().is_none_or(|a| a.is_ipv4())
                || covered(x, &inside)
            {
                continue;
            }
            out.push(n.finding(
                ProblemKind::ExceptionCoversExternal,
                format!("OutBoundNAT exception {x} of endpoint {} covers destinations outside the cluster", e.id),
                vec![endpoint_ref(e)],
                format!("pod -> {x} leaves with the pod's own address instead of the node's; outside hosts cannot route the replies back, so those connections time out"),
                format!("remove {x} from the CNI config's OutBoundNAT ExceptionList (keep the cluster CIDR, the Service CIDR and the node subnet)"),
            ));
        }
        let v4 = e.ips().any(|a| a.is_ipv4());
        for (what, cidr) in [
            ("cluster CIDR", n.snap.cluster.cluster_cidr),
            ("Service CIDR", n.snap.cluster.service_cidr),
        ] {
            let Some(cidr) = cidr else { continue };
            if cidr.addr().is_ipv4() != v4 || covered(&cidr, &exceptions) {
                continue;
            }
            out.push(n.finding(
                ProblemKind::ExceptionsMissClusterCidr,
                format!("the OutBoundNAT exceptions of endpoint {} do not cover the {what} {cidr}", e.id),
                vec![endpoint_ref(e)],
                format!("pod -> {cidr} is translated to the node's address: the other end sees the node, not the pod (NetworkPolicy and client IPs break), and replies to remote pods may not find their way back"),
                format!("add {cidr} to the CNI config's OutBoundNAT ExceptionList"),
            ));
        }
    }
}
