//! A HostComputeNetwork on the switch: the gateway the switch answers its pods with, the
//! provider address and `RemoteSubnetRoute`s of an Overlay network, the routes its pods'
//! packets follow, the gateway vNIC of a NAT network, and the limitations of its mode.

use std::net::IpAddr;

use hcn::policy::NetworkPolicy;
use hcn::{NamespaceType, Network};
use ipnet::IpNet;
use vfp::layer::{ACL, ROUTE};
use vfp::wire::MacAddr;
use vfp::{Action, Conditions, Origin, PortConfig, Rule};

use crate::limitation;
use crate::modes::Mode;
use crate::placement::{Compiled, Target};
use crate::route::{self, Class};
use crate::{Compiler, PortWant, mac};
use hns::profile::Limitation;
use hns::state::State;

/// The network's `VxlanPort`, if it sets one.
pub fn vxlan_port(net: &Network) -> Option<u16> {
    net.policies.iter().find_map(|p| match p {
        NetworkPolicy::VxlanPort(s) if s.port != 0 => Some(s.port),
        _ => None,
    })
}

/// The VSID of the network's first subnet that has one.
pub fn vsid(net: &Network) -> Option<u32> {
    net.subnets().find_map(hcn::Subnet::vsid)
}

/// Whether the network has the `HostRoute` policy (host <-> local pods on Overlay).
pub fn has_host_route(net: &Network) -> bool {
    net.policies
        .iter()
        .any(|p| matches!(p, NetworkPolicy::HostRoute(_)))
}

/// The network's distributed-router MAC: its `DrMacAddress` policy, else one derived from its
/// ID in the Hyper-V range (HNS generates one per network).
pub fn dr_mac(net: &Network) -> MacAddr {
    net.policies
        .iter()
        .find_map(|p| match p {
            NetworkPolicy::DrMacAddress(s) => Some(mac(s.address)),
            _ => None,
        })
        .unwrap_or_else(|| derived_mac(net, 0xd0))
}

fn derived_mac(net: &Network, tag: u8) -> MacAddr {
    let b = net.id.0.as_bytes();
    MacAddr([0x00, 0x15, 0x5d, tag, b[14], b[15]])
}

/// This node's provider address on `net` in the family of `like`: the network's
/// `ProviderAddress` policy, else the node's address.
pub fn provider_address(c: &Compiler, net: &Network, like: IpAddr) -> Option<IpAddr> {
    net.policies
        .iter()
        .find_map(|p| match p {
            NetworkPolicy::ProviderAddress(s) if s.provider_address.is_ipv4() == like.is_ipv4() => {
                Some(s.provider_address)
            }
            _ => None,
        })
        .or_else(|| c.facts.ip_like(like))
}

/// True when `pa` is this node's.
pub fn is_own_provider_address(c: &Compiler, net: &Network, pa: IpAddr) -> bool {
    provider_address(c, net, pa) == Some(pa) || c.facts.ips().any(|a| a == pa)
}

/// The gateway vNIC of a NAT / ICS / Internal network (the host is the pods' gateway).
pub(crate) fn gateway_port(net: &Network) -> Option<PortWant> {
    let mode = Mode::of(net.network_type)?;
    if !mode.has_gateway_vnic() {
        return None;
    }
    let subnet = net.subnets().find(|s| s.gateway().is_some())?;
    let gw = subnet.gateway()?;
    let prefix = subnet.ip_address_prefix?;
    let name = format!("vEthernet ({})", display_name(net));
    Some(PortWant {
        config: PortConfig::host(&name, derived_mac(net, 0x9a), vec![gw]),
        prefixes: IpNet::new(gw, prefix.prefix_len()).into_iter().collect(),
        mtu: None,
    })
}

fn display_name(net: &Network) -> String {
    if net.name.is_empty() {
        net.id.to_string()
    } else {
        net.name.clone()
    }
}

/// The origin of a network's own rules.
pub fn origin(net: &Network) -> Origin {
    Origin::new("Network", net.id.to_string()).with_source(format!(
        "network {} ({})",
        display_name(net),
        net.network_type
    ))
}

/// Compiles a network.
pub fn compile(c: &mut Compiler, state: &State, net: &Network) -> Compiled {
    let mut out = Compiled::default();
    let origin = origin(net);
    let Some(mode) = Mode::of(net.network_type) else {
        out.notice(
            &origin.owner,
            format!(
                "network type {} is not implemented by this switch; its endpoints get ports without rules",
                net.network_type
            ),
        );
        return out;
    };
    gateways(c, state, net, mode, &mut out);
    let mut rules = pod_routes(c, net, mode, &origin, &mut out);
    if mode.encapsulates() {
        if let Some(pa) = c.facts.ips().find(IpAddr::is_ipv4) {
            out.providers.extend(provider_address(c, net, pa));
        }
        let encaps = remote_subnet_routes(c, net, &origin, &mut out);
        rules.extend(encaps.iter().cloned());
        out.place(Target::Uplink, ROUTE, origin.clone(), encaps.clone());
        out.place(Target::HostPorts, ROUTE, origin.clone(), encaps);
        if c.facts
            .profile
            .imposes(Limitation::RemotePodFromNodeOnOverlay)
        {
            refuse_remote_pods_from_host(c, net, &mut out);
        }
        if c.facts.profile.imposes(Limitation::Ipv6OnOverlay) {
            let any_v6 = Conditions::any().dst_net(IpNet::V6(Default::default()));
            out.place(
                Target::Pods(net.id),
                ACL,
                limitation::origin(
                    Limitation::Ipv6OnOverlay,
                    c.facts.profile,
                    "Network",
                    &net.id.to_string(),
                ),
                vec![limitation::refuse(0, any_v6)],
            );
        }
    }
    out.place(Target::Pods(net.id), ROUTE, origin, rules);
    out
}

/// The host's own packets to the remote subnets of an Overlay network meet the limitation in
/// the ACL layer, before the load balancer: a Service VIP the host reaches (translated to the
/// source VIP, then encapsulated) is still carried.
fn refuse_remote_pods_from_host(c: &Compiler, net: &Network, out: &mut Compiled) {
    let refused: Vec<Rule> = net
        .policies
        .iter()
        .filter_map(|p| match p {
            NetworkPolicy::RemoteSubnetRoute(r) => Some(limitation::refuse(
                0,
                Conditions::any()
                    .direction(vfp::Direction::Out)
                    .dst_net(r.destination_prefix),
            )),
            _ => None,
        })
        .collect();
    if refused.is_empty() {
        return;
    }
    let origin = limitation::origin(
        Limitation::RemotePodFromNodeOnOverlay,
        c.facts.profile,
        "Network",
        &net.id.to_string(),
    );
    out.place(Target::HostPorts, ACL, origin, refused);
}

/// The addresses the switch answers for on behalf of the network: its gateways.
fn gateways(c: &Compiler, state: &State, net: &Network, mode: Mode, out: &mut Compiled) {
    for subnet in net.subnets() {
        let (Some(gw), Some(prefix)) = (subnet.gateway(), subnet.ip_address_prefix) else {
            continue;
        };
        let answer = match mode {
            // The host endpoint in the subnet (flannel's cbr0_ep at .2, the pods' gateway by
            // win-bridge's convention) carries off-subnet traffic; without one, the host.
            Mode::L2Bridge | Mode::L2Tunnel => Some(
                host_endpoints(state, net)
                    .find(|(ip, _)| prefix.contains(ip))
                    .map_or(c.facts.host_mac, |(_, m)| m),
            ),
            Mode::Overlay => Some(dr_mac(net)),
            Mode::Nat | Mode::Ics | Mode::Internal => Some(derived_mac(net, 0x9a)),
            Mode::Transparent | Mode::Private => None,
        };
        if let Some(m) = answer {
            out.owned.push((gw, m));
        }
    }
}

/// Addresses and MACs of the local endpoints of `net` attached to the host.
pub fn host_endpoints<'a>(
    state: &'a State,
    net: &'a Network,
) -> impl Iterator<Item = (IpAddr, MacAddr)> + 'a {
    state
        .endpoints()
        .filter(move |e| e.host_compute_network == net.id && !e.is_remote())
        .filter(|e| is_host_attached(state, e))
        .flat_map(|e| {
            let m = e.mac_address.map(mac);
            e.ips().filter_map(move |ip| m.map(|m| (ip, m)))
        })
}

/// True when the endpoint is in a host namespace (a host vNIC rather than a pod's).
pub fn is_host_attached(state: &State, ep: &hcn::Endpoint) -> bool {
    state
        .namespace(ep.host_compute_namespace)
        .and_then(|ns| ns.namespace_type)
        .is_some_and(|t| matches!(t, NamespaceType::Host | NamespaceType::HostDefault))
}

/// Where the network's pods' packets go, by destination, once NAT is done.
fn pod_routes(
    c: &Compiler,
    net: &Network,
    mode: Mode,
    origin: &Origin,
    out: &mut Compiled,
) -> Vec<Rule> {
    let mut rules = Vec::new();
    let local: Vec<IpNet> = net.subnets().filter_map(|s| s.ip_address_prefix).collect();
    for p in &local {
        rules.push(route::rule(*p, Class::Network, Action::Allow));
    }
    if mode.local_only() {
        // Pods reach each other and, on ICS / Internal, the host's gateway vNIC; the rest is
        // beyond this switch.
        for any in [IpNet::V4(Default::default()), IpNet::V6(Default::default())] {
            rules.push(route::rule(any, Class::Network, Action::Block));
        }
        return rules;
    }
    let host = c.facts.host_mac;
    for ip in c.facts.ips() {
        let to_host = match mode {
            // Off-subnet: the pod addressed it to its gateway, the host endpoint.
            Mode::L2Bridge | Mode::L2Tunnel => Some(Action::Allow),
            Mode::Overlay if has_host_route(net) => Some(Action::MacRewrite {
                src: None,
                dst: Some(host),
            }),
            Mode::Overlay => Some(Action::Block),
            Mode::Nat => Some(Action::MacRewrite {
                src: None,
                dst: Some(host),
            }),
            _ => None,
        };
        if let Some(a) = to_host {
            rules.push(route::rule(IpNet::from(ip), Class::Network, a));
        }
    }
    if mode.routes_through_host() {
        for n in route::host_routes(c, false, &mut rules) {
            out.notice(&origin.owner, n);
        }
    }
    rules
}

/// An Overlay network's `RemoteSubnetRoute`s: each remote node's pod subnet encapsulated with
/// the VSID toward its PA, the inner frame addressed to its DR MAC.
fn remote_subnet_routes(
    c: &Compiler,
    net: &Network,
    origin: &Origin,
    out: &mut Compiled,
) -> Vec<Rule> {
    let mut rules = Vec::new();
    for p in &net.policies {
        let NetworkPolicy::RemoteSubnetRoute(r) = p else {
            continue;
        };
        let vni = match u32::from(r.isolation_id) {
            0 => vsid(net).unwrap_or(0),
            v => v,
        };
        match route::encap_to(c, net, vni, r.provider_address) {
            Ok(outer) => rules.push(route::rule(
                r.destination_prefix,
                Class::Network,
                Action::Encap {
                    outer,
                    inner_dst_mac: Some(mac(r.distributed_router_mac_address)),
                },
            )),
            Err(e) => out.notice(
                &origin.owner,
                format!("RemoteSubnetRoute {}: {e}", r.destination_prefix),
            ),
        }
    }
    rules
}
