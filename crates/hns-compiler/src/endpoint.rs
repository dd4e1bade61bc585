//! A HostComputeEndpoint on the switch. A local endpoint is a port (a pod vNIC, or a host vNIC
//! when its namespace is the host's) on its network's virtual network (the VSID on Overlay),
//! with its mode's MAC rewrite, Overlay's decapsulation, and its policies: ACL, OutBoundNAT,
//! SDNRoute, PortMapping, EncapOverhead, ProviderAddress. A remote endpoint (`Flags` 1) is an
//! encapsulation toward its provider address.
//!
//! A local endpoint with the host's MAC (kube-proxy's source-VIP endpoint on Overlay) is an
//! address of the host, not a vNIC: it gets no port; replies to it follow their connections.

use hcn::{Endpoint, EndpointPolicy};
use ipnet::IpNet;
use vfp::layer::{MAC, ROUTE};
use vfp::{Action, Conditions, Direction, Origin, PortConfig, Rule};

use crate::modes::{self, Mode};
use crate::placement::{Compiled, Target};
use crate::{Compiler, PortWant, acl, mac, nat, network, route};
use hns::state::State;

/// The Ethernet MTU pods get without an `EncapOverhead` policy.
pub const BASE_MTU: u16 = hcn::policy::EncapOverheadPolicySetting::BASE_MTU;

/// The origin of an endpoint's own rules.
pub fn origin(ep: &Endpoint) -> Origin {
    let o = Origin::new("Endpoint", ep.id.to_string());
    if ep.name.is_empty() {
        o
    } else {
        o.with_source(format!("endpoint {}", ep.name))
    }
}

/// The port a local endpoint needs, or `None` (remote, or the host's own address).
pub(crate) fn port_config(c: &Compiler, state: &State, ep: &Endpoint) -> Option<PortWant> {
    if ep.is_remote() {
        return None;
    }
    let m = mac(ep.mac_address?);
    if m == c.facts.host_mac {
        return None;
    }
    let net = state.network(ep.host_compute_network)?;
    let ips: Vec<_> = ep.ips().collect();
    let vni = match Mode::of(net.network_type) {
        Some(Mode::Overlay) => ips
            .first()
            .and_then(|ip| net.subnet_for(*ip))
            .and_then(hcn::Subnet::vsid)
            .or_else(|| network::vsid(net))
            .unwrap_or(0),
        _ => 0,
    };
    let name = if ep.name.is_empty() {
        ep.id.to_string()
    } else {
        ep.name.clone()
    };
    let prefixes = ep
        .ip_configurations
        .iter()
        .filter_map(|cfg| {
            let ip = cfg.ip_address?;
            let len = match cfg.prefix_length {
                0 => net.subnet_for(ip)?.ip_address_prefix?.prefix_len(),
                n => n,
            };
            IpNet::new(ip, len).ok()
        })
        .collect();
    let config = if network::is_host_attached(state, ep) {
        PortConfig::host(&name, m, ips)
    } else {
        PortConfig::pod(&name, m, ips)
    };
    let overhead = ep.policies.iter().find_map(|p| match p {
        EndpointPolicy::EncapOverhead(o) => Some(o.overhead),
        _ => None,
    });
    Some(PortWant {
        config: config.on_vni(vni),
        prefixes,
        mtu: overhead.map(|o| BASE_MTU.saturating_sub(o)),
    })
}

/// Compiles an endpoint.
pub fn compile(c: &mut Compiler, state: &State, ep: &Endpoint) -> Compiled {
    let mut out = Compiled::default();
    let Some(net) = state.network(ep.host_compute_network) else {
        return out;
    };
    if ep.is_remote() {
        return route::compile_remote_endpoint(c, net, ep);
    }
    let origin = origin(ep);
    for p in &ep.policies {
        if let EndpointPolicy::ProviderAddress(pa) = p {
            out.providers.push(pa.provider_address);
        }
    }
    let Some(port) = c.endpoint_port(ep.id) else {
        // An address of the host (kube-proxy's source VIP): the switch answers for it with the
        // host's MAC, so that a backend on the same subnet can address its replies.
        if let Some(m) = ep.mac_address.map(mac).filter(|m| *m == c.facts.host_mac) {
            out.owned.extend(ep.ips().map(|ip| (ip, m)));
        }
        return out;
    };
    let host_attached = c
        .switch
        .port(port)
        .is_some_and(|p| p.kind() == vfp::PortKind::HostVnic);
    let mode = Mode::of(net.network_type);
    let ep_mac = ep.mac_address.map(mac);
    if let Some(m) = ep_mac {
        // The switch answers for a host endpoint (the pods' gateway on L2Bridge) and, with
        // Overlay's HostRoute, for the pods the host reaches.
        let host_route = mode == Some(Mode::Overlay) && network::has_host_route(net);
        if host_attached || host_route {
            out.owned.extend(ep.ips().map(|ip| (ip, m)));
        }
    }
    acl::compile(ep, net, c.facts.profile, &mut out);
    let mut notes = Vec::new();
    let mut routes = route::endpoint_sdn_routes(c, ep, &mut notes);
    for n in notes {
        out.notice(&origin.owner, n);
    }
    if host_attached {
        out.place(Target::Endpoint(ep.id), ROUTE, origin, routes);
        return out;
    }
    let Some(mode) = mode else {
        return out;
    };
    if mode.encapsulates() {
        let mut macs = Vec::new();
        for ip in ep.ips() {
            let Some(vni) = net.subnet_for(ip).and_then(hcn::Subnet::vsid) else {
                continue;
            };
            // Arrivals on the endpoint's VNI lose their outer headers at its port, and the
            // inner frame (addressed to this node's DR MAC) is addressed to the pod, from the
            // pod's gateway.
            let c = Conditions::any().direction(Direction::In).vni(vni);
            if !routes.iter().any(|r| r.conditions == c) {
                routes.push(Rule::new(0, c.clone(), Action::Decap));
                let to_pod = Action::MacRewrite {
                    src: Some(network::dr_mac(net)),
                    dst: ep_mac,
                };
                macs.push(Rule::new(0, c, to_pod));
            }
        }
        out.place(Target::Endpoint(ep.id), MAC, origin.clone(), macs);
    }
    out.place(Target::Endpoint(ep.id), ROUTE, origin.clone(), routes);
    nat::compile_outbound(c, ep, net, mode, &mut out, &origin);
    nat::compile_port_mappings(c, ep, &mut out, &origin);
    if let Some(m) = ep_mac {
        let tunnel_to = (mode == Mode::L2Tunnel)
            .then(|| c.facts.ips().find(|a| a.is_ipv4()))
            .flatten()
            .and_then(|a| c.facts.default_gateway(a))
            .and_then(|g| c.facts.resolver.mac_of(g));
        if mode == Mode::L2Tunnel && tunnel_to.is_none() {
            out.notice(
                &origin.owner,
                "L2Tunnel: the router's MAC is unknown; pod packets are not sent to it",
            );
        }
        let rules = modes::mac_rewrite(mode, c.facts.host_mac, m, tunnel_to);
        out.place(Target::Endpoint(ep.id), MAC, origin.clone(), rules);
        if mode == Mode::L2Tunnel {
            // Frames the router sends back for this pod are addressed to it again.
            let back: Vec<Rule> = ep
                .ips()
                .map(|ip| {
                    Rule::new(
                        100,
                        Conditions::any().direction(Direction::Out).dst_ip(ip),
                        Action::MacRewrite {
                            src: None,
                            dst: Some(m),
                        },
                    )
                })
                .collect();
            out.place(Target::Uplink, MAC, origin, back);
        }
    }
    out
}
