//! Kubernetes Services vs HNS load balancers: a load balancer with no Service, a Service port
//! with no load balancer, backends that are not the Service's ready endpoints, a frontend held
//! twice.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hcn::LoadBalancer;

use crate::finding::{Finding, ObjectRef, ProblemKind, Repair};
use crate::node::{Node, frontend_text, lb_ref, proto_name};
use crate::snapshot::{Service, ServicePort};

/// What a frontend of a Service is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    ClusterIp,
    NodePort,
    External,
    HealthCheck,
}

/// The Service (and port) a load balancer serves, with the frontend's role.
fn owner<'a>(
    n: &Node<'a>,
    lb: &LoadBalancer,
) -> Option<(&'a Service, Option<&'a ServicePort>, Role)> {
    let pm = lb.port_mappings.first()?;
    let vip = lb.frontend_vips.first().copied();
    let node_vip = vip.is_none_or(|v| node_addresses(n).contains(&v));
    for s in &n.snap.kube.services {
        if node_vip && s.health_check_node_port == Some(pm.external_port) {
            return Some((s, None, Role::HealthCheck));
        }
        for p in &s.ports {
            if p.hns_protocol() != pm.protocol {
                continue;
            }
            if let Some(v) = vip
                && p.port == pm.external_port
            {
                if s.cluster_ips.contains(&v) {
                    return Some((s, Some(p), Role::ClusterIp));
                }
                if s.external_ips.contains(&v) {
                    return Some((s, Some(p), Role::External));
                }
            }
            if node_vip && p.node_port == Some(pm.external_port) {
                return Some((s, Some(p), Role::NodePort));
            }
        }
    }
    None
}

fn node_addresses(n: &Node) -> Vec<IpAddr> {
    n.snap
        .switch
        .as_ref()
        .map(|s| s.facts.addresses.iter().map(|a| a.addr()).collect())
        .unwrap_or_default()
}

fn service_ref(s: &Service) -> ObjectRef {
    ObjectRef::new(
        "Service",
        s.key(),
        s.cluster_ips
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// True when a load balancer serves IPv6 (its VIP's family, else its IPv6 flag): a dual-stack
/// Service has one load balancer per family, each over its family's addresses.
fn is_v6(lb: &LoadBalancer) -> bool {
    lb.frontend_vips.first().map_or(
        lb.flags & hcn::loadbalancer::LoadBalancerFlags::IPV6 != 0,
        IpAddr::is_ipv6,
    )
}

/// The addresses of an LB's backends in its family (endpoint IDs resolved through HNS).
fn backend_ips(n: &Node, lb: &LoadBalancer) -> Vec<IpAddr> {
    let v6 = is_v6(lb);
    let mut ips: Vec<IpAddr> = lb
        .host_compute_endpoints
        .iter()
        .filter_map(|id| n.endpoints.get(&id.to_string().to_ascii_lowercase()))
        .flat_map(|e| e.ips().collect::<Vec<_>>())
        .filter(|ip| ip.is_ipv6() == v6)
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

/// The backends a Service's frontend of `role` in the family `v6` should have on this node.
fn wanted_ips(n: &Node, s: &Service, role: Role, v6: bool) -> Vec<IpAddr> {
    let local_only = match role {
        Role::NodePort | Role::External => s.external_policy_local,
        Role::ClusterIp => s.internal_policy_local,
        Role::HealthCheck => false,
    };
    let local = |ip: &IpAddr| {
        n.pod_endpoints
            .iter()
            .any(|(e, _)| e.ips().any(|a| a == *ip))
    };
    let mut ips = s.serving_ips();
    ips.retain(|ip| ip.is_ipv6() == v6);
    if local_only {
        ips.retain(local);
    }
    ips
}

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    if !n.snap.kube.services_known {
        return;
    }
    let lbs = &n.snap.hns.load_balancers;
    let mut by_frontend: BTreeMap<String, Vec<&LoadBalancer>> = BTreeMap::new();
    for lb in lbs {
        by_frontend.entry(frontend_text(lb)).or_default().push(lb);
        let Some((s, port, role)) = owner(n, lb) else {
            out.push(n.finding(
                ProblemKind::LoadBalancerWithoutService,
                format!("load balancer {} ({}) serves no Service", lb.id, frontend_text(lb)),
                vec![lb_ref(lb)],
                format!(
                    "connections to {} keep going to the old backends (or nowhere) instead of failing or reaching what now uses the address",
                    frontend_text(lb)
                ),
                "delete the load balancer (cleanup-stale-lb-rules.ps1 on Windows; winnet hns delete loadbalancer ID), kube-proxy does not own it".into(),
            ));
            continue;
        };
        if role == Role::HealthCheck {
            continue;
        }
        let have = backend_ips(n, lb);
        let want = wanted_ips(n, s, role, is_v6(lb));
        if have != want && !want.is_empty() {
            let text = |v: &[IpAddr]| {
                v.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let port_name = port.map(|p| p.name.clone()).unwrap_or_default();
            let mut f = n.finding(
                ProblemKind::LoadBalancerBackendsDiffer,
                format!(
                    "load balancer {} of {}{} has backends [{}], the Service's ready endpoints are [{}]",
                    lb.id,
                    s.key(),
                    if port_name.is_empty() { String::new() } else { format!(":{port_name}") },
                    text(&have),
                    text(&want)
                ),
                vec![lb_ref(lb), service_ref(s)],
                format!(
                    "connections to {} reach endpoints that are gone or not ready, or never reach new ones",
                    frontend_text(lb)
                ),
                "kube-proxy updates backends on its next sync; if it does not, its cache is stale: resync it (restart kube-proxy) and look at its log for failed HNS calls".into(),
            );
            f.repair = Some(Repair::ResyncProxy);
            out.push(f);
        }
    }
    for (frontend, held) in &by_frontend {
        if held.len() < 2 {
            continue;
        }
        out.push(n.finding(
            ProblemKind::FrontendHeldTwice,
            format!("{} load balancers hold the frontend {frontend}", held.len()),
            held.iter().map(|lb| lb_ref(lb)).collect(),
            format!("connections to {frontend} go to whichever the switch matched first; the other's backends never see traffic"),
            "delete the load balancer no Service owns (the one not named by kube-proxy's last sync); cleanup-stale-lb-rules.ps1 on Windows".into(),
        ));
    }
    for s in &n.snap.kube.services {
        for p in &s.ports {
            for vip in &s.cluster_ips {
                // internalTrafficPolicy Local without a local endpoint (or no endpoint of the
                // VIP's family): no load balancer, by design.
                if wanted_ips(n, s, Role::ClusterIp, vip.is_ipv6()).is_empty() {
                    continue;
                }
                let held = lbs.iter().any(|lb| {
                    lb.frontend_vips.first() == Some(vip)
                        && lb.port_mappings.first().is_some_and(|pm| {
                            pm.external_port == p.port && pm.protocol == p.hns_protocol()
                        })
                });
                if held {
                    continue;
                }
                let frontend = format!(
                    "{}:{}/{}",
                    crate::node::host(*vip),
                    p.port,
                    proto_name(p.hns_protocol())
                );
                let mut f = n.finding(
                    ProblemKind::ServicePortWithoutLoadBalancer,
                    format!("Service {} port {frontend} has ready endpoints but no load balancer", s.key()),
                    vec![service_ref(s), ObjectRef::new("Frontend", frontend.clone(), "")],
                    format!("every connection to {frontend} from pods and the node fails (no DNAT: the packet goes to the VIP and is dropped)"),
                    "have kube-proxy program it again: it does on a resync (restart kube-proxy; it re-reads HNS at start)".into(),
                );
                f.repair = Some(Repair::ResyncProxy);
                out.push(f);
            }
        }
    }
}
