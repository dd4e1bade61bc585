//! The route/encap layer: where a pod's packet goes once its destination is final. The node's
//! own routes (the default route, flannel host-gw's routes to other nodes' pod subnets) become
//! MAC rewrites toward the next hop, so that a translated connection leaves and returns through
//! the same port; Overlay's `RemoteSubnetRoute`s and remote endpoints become VXLAN
//! encapsulation toward the remote provider address; `SDNRoute` policies and SDN route objects
//! send a prefix to the host (`NeedEncap`) or a next hop.

use std::net::IpAddr;
use std::sync::Arc;

use hcn::policy::{NetworkPolicy, SdnRoutePolicySetting};
use hcn::{Endpoint, EndpointPolicy, Network, SdnRoute};
use ipnet::IpNet;
use vfp::layer::ROUTE;
use vfp::wire::MacAddr;
use vfp::{Action, Conditions, Direction, Encap, Origin, Owner, Rule};

use crate::modes::Mode;
use crate::network;
use crate::placement::{Compiled, Target};
use crate::{Compiler, mac};
use hns::state::State;

/// Tie-breaks between routes of the same prefix length: an endpoint's own `SDNRoute` first,
/// then a remote endpoint, then the network's routes, then the host's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Endpoint = 0,
    RemoteEndpoint = 1,
    Network = 2,
    Host = 3,
}

/// Priority of a route to `dst`: longer prefixes first, then by class.
pub fn priority(dst: IpNet, class: Class) -> u16 {
    let max: u16 = if dst.addr().is_ipv4() { 32 } else { 128 };
    (max - u16::from(dst.prefix_len())) * 8 + class as u16
}

/// A route rule for packets leaving a device toward `dst`.
pub fn rule(dst: IpNet, class: Class, action: Action) -> Rule {
    Rule::new(
        priority(dst, class),
        Conditions::any().direction(Direction::Out).dst_net(dst),
        action,
    )
}

/// The host's routes as MAC rewrites toward their next hops: each route, and each next hop
/// itself. `only_specific` leaves out default routes (for the uplink and host ports, where
/// only translated packets to another node's pods need them).
pub fn host_routes(c: &Compiler, only_specific: bool, out: &mut Vec<Rule>) -> Vec<String> {
    let mut unresolved = Vec::new();
    let host = c.facts.host_mac;
    for r in &c.facts.routes {
        if only_specific && r.destination.prefix_len() == 0 {
            continue;
        }
        let Some(m) = c.facts.resolver.mac_of(r.next_hop) else {
            unresolved.push(format!(
                "route to {} via {}: the next hop's MAC is unknown; not programmed",
                r.destination, r.next_hop
            ));
            continue;
        };
        let to = Action::MacRewrite {
            src: Some(host),
            dst: Some(m),
        };
        out.push(rule(r.destination, Class::Host, to.clone()));
        out.push(rule(IpNet::from(r.next_hop), Class::Host, to));
    }
    unresolved
}

/// The node's own rules: its routes on the uplink and host ports, for packets a load balancer
/// or a port mapping sent to another node's pod.
pub fn compile_node(c: &mut Compiler) -> Compiled {
    let mut out = Compiled::default();
    let origin = Origin::new("Node", c.facts.name.clone()).with_source("the host's routes");
    let mut rules = Vec::new();
    for n in host_routes(c, true, &mut rules) {
        out.notice(&origin.owner, n);
    }
    out.place(Target::Uplink, ROUTE, origin.clone(), rules.clone());
    out.place(Target::HostPorts, ROUTE, origin, rules);
    out
}

/// The outer headers of VXLAN from this node toward provider address `pa` on network `net`.
pub fn encap_to(c: &Compiler, net: &Network, vni: u32, pa: IpAddr) -> Result<Arc<Encap>, String> {
    let src = network::provider_address(c, net, pa).ok_or_else(|| {
        format!(
            "no provider address of this node in the family of {pa}; VXLAN to it is not programmed"
        )
    })?;
    let dst_mac = c
        .facts
        .resolver
        .mac_of(pa)
        .or_else(|| {
            c.facts
                .default_gateway(pa)
                .and_then(|g| c.facts.resolver.mac_of(g))
        })
        .ok_or_else(|| {
            format!("the underlay MAC of provider address {pa} is unknown; VXLAN to it is not programmed")
        })?;
    Ok(Arc::new(Encap {
        vni,
        src_mac: c.facts.host_mac,
        dst_mac,
        src_ip: src,
        dst_ip: pa,
        udp_port: network::vxlan_port(net).unwrap_or(vfp::wire::VXLAN_PORT),
    }))
}

/// The `SDNRoute` rules of one setting: `NeedEncap` hands the prefix to the host (the
/// management vNIC), a next hop gets the frame addressed to it, otherwise the route only
/// marks the prefix as reachable as it is.
pub fn sdn_route(c: &Compiler, s: &SdnRoutePolicySetting) -> Result<Option<Rule>, String> {
    let Some(dst) = s.destination_prefix else {
        return Ok(None);
    };
    let action = if s.need_encap {
        Action::MacRewrite {
            src: None,
            dst: Some(c.facts.host_mac),
        }
    } else if let Some(nh) = s.next_hop {
        let m = c
            .facts
            .resolver
            .mac_of(nh)
            .ok_or_else(|| format!("SDNRoute {dst} via {nh}: the next hop's MAC is unknown"))?;
        Action::MacRewrite {
            src: Some(c.facts.host_mac),
            dst: Some(m),
        }
    } else {
        Action::Allow
    };
    Ok(Some(rule(dst, Class::Endpoint, action)))
}

/// An endpoint's `SDNRoute` policies.
pub fn endpoint_sdn_routes(c: &Compiler, ep: &Endpoint, notes: &mut Vec<String>) -> Vec<Rule> {
    ep.policies
        .iter()
        .filter_map(|p| match p {
            EndpointPolicy::SdnRoute(s) => Some(s),
            _ => None,
        })
        .filter_map(|s| match sdn_route(c, s) {
            Ok(r) => r,
            Err(e) => {
                notes.push(e);
                None
            }
        })
        .collect()
}

/// A HostComputeRoute: its settings on each of its endpoints' ports.
pub fn compile_sdn_route(c: &mut Compiler, state: &State, r: &SdnRoute) -> Compiled {
    let mut out = Compiled::default();
    let origin = Origin::new("Route", r.id.to_string());
    let mut rules = Vec::new();
    for s in &r.setting {
        match sdn_route(c, s) {
            Ok(Some(rule)) => rules.push(rule),
            Ok(None) => {}
            Err(e) => out.notice(&origin.owner, e),
        }
    }
    for ep in &r.host_compute_endpoints {
        if state.endpoint(*ep).is_some_and(|e| !e.is_remote()) {
            out.place(Target::Endpoint(*ep), ROUTE, origin.clone(), rules.clone());
        }
    }
    out
}

/// The DR MAC that the remote node hosting `ip` (behind `pa`) answers its pods' gateway with:
/// from the network's `RemoteSubnetRoute` for that node.
pub fn remote_dr_mac(net: &Network, ip: IpAddr, pa: IpAddr) -> Option<MacAddr> {
    let routes = net.policies.iter().filter_map(|p| match p {
        NetworkPolicy::RemoteSubnetRoute(r) => Some(r),
        _ => None,
    });
    let mut by_pa = None;
    for r in routes {
        if r.destination_prefix.contains(&ip) {
            return Some(mac(r.distributed_router_mac_address));
        }
        if r.provider_address == pa {
            by_pa = Some(mac(r.distributed_router_mac_address));
        }
    }
    by_pa
}

/// True when one of the network's `RemoteSubnetRoute`s sends `ip` to `pa`.
fn covered_by_subnet_route(net: &Network, ip: IpAddr, pa: IpAddr) -> bool {
    net.policies.iter().any(|p| match p {
        NetworkPolicy::RemoteSubnetRoute(r) => {
            r.provider_address == pa && r.destination_prefix.contains(&ip)
        }
        _ => false,
    })
}

/// A remote endpoint (`Flags` 1) with a `ProviderAddress`: its addresses are encapsulated
/// toward that PA, from pods of its network and from the uplink and host (load-balanced
/// traffic). A remote endpoint behind this node's own PA (kube-proxy's ClusterIP placeholder)
/// needs nothing, nor does an address a `RemoteSubnetRoute` to the same PA already covers
/// (kube-proxy's remote pods, thousands of them: the subnet route encapsulates them alike).
pub fn compile_remote_endpoint(c: &Compiler, net: &Network, ep: &Endpoint) -> Compiled {
    let mut out = Compiled::default();
    let origin = Origin::new("Endpoint", ep.id.to_string()).with_source(format!(
        "remote endpoint {}",
        if ep.name.is_empty() { "" } else { &ep.name }
    ));
    let owner = Owner::new("Endpoint", ep.id.to_string());
    if Mode::of(net.network_type) != Some(Mode::Overlay) {
        return out;
    }
    let Some(pa) = ep.policies.iter().find_map(|p| match p {
        EndpointPolicy::ProviderAddress(s) => Some(s.provider_address),
        _ => None,
    }) else {
        return out;
    };
    if network::is_own_provider_address(c, net, pa) {
        return out;
    }
    let mut rules = Vec::new();
    for ip in ep.ips() {
        if covered_by_subnet_route(net, ip, pa) {
            continue;
        }
        let vni = net
            .subnet_for(ip)
            .and_then(hcn::Subnet::vsid)
            .or_else(|| network::vsid(net))
            .unwrap_or(0);
        let outer = match encap_to(c, net, vni, pa) {
            Ok(o) => o,
            Err(e) => {
                out.notice(&owner, e);
                continue;
            }
        };
        let inner_dst_mac = remote_dr_mac(net, ip, pa).or(ep.mac_address.map(mac));
        rules.push(rule(
            IpNet::from(ip),
            Class::RemoteEndpoint,
            Action::Encap {
                outer,
                inner_dst_mac,
            },
        ));
    }
    out.place(Target::Pods(net.id), ROUTE, origin.clone(), rules.clone());
    out.place(Target::Uplink, ROUTE, origin.clone(), rules.clone());
    out.place(Target::HostPorts, ROUTE, origin, rules);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longer_prefixes_win_and_classes_break_ties() {
        let p = |s: &str, c| priority(s.parse().unwrap(), c);
        assert!(p("10.244.2.7/32", Class::Host) < p("10.244.2.0/24", Class::Endpoint));
        assert!(p("10.244.2.0/24", Class::Endpoint) < p("10.244.2.0/24", Class::Network));
        assert!(p("10.244.2.0/24", Class::Network) < p("0.0.0.0/0", Class::Endpoint));
        assert!(p("fd00::1/128", Class::Host) < p("fd00::/64", Class::Endpoint));
    }
}
