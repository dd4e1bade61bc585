//! The NAT layer of an endpoint: `OutBoundNAT` (SNAT to the node's address unless the
//! destination is in `Exceptions`; `Destinations` for loopback DSR), the implicit OutboundNAT
//! of a NAT network, and `PortMapping` (a node port forwarded to the endpoint).

use std::net::IpAddr;
use std::sync::Arc;

use hcn::{Endpoint, EndpointPolicy, Network};
use ipnet::IpNet;
use vfp::layer::NAT;
use vfp::wire::proto;
use vfp::{Action, Backend, Conditions, Direction, LoadBalancer, Origin, Rule};

use crate::limitation;
use crate::modes::Mode;
use crate::placement::{Compiled, Target};
use crate::{Compiler, mac};
use hns::profile::Limitation;

/// Parses an HNS address list entry: an address or a prefix.
pub fn parse_net(s: &str) -> Option<IpNet> {
    let s = s.trim();
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

/// The combined `OutBoundNAT` policies of an endpoint (win-bridge appends one per CIDR).
#[derive(Debug, Default)]
struct Outbound {
    /// An `OutBoundNAT` policy without `Destinations` asked for it (not only a NAT network's
    /// WinNAT).
    explicit: bool,
    /// Everything not excepted is NATed: a policy without `Destinations`, or a NAT network.
    all: bool,
    exceptions: Vec<IpNet>,
    /// NATed whatever the exceptions say. A policy that names destinations (loopback DSR's,
    /// the pod's own address) NATs only toward them.
    destinations: Vec<IpNet>,
    virtual_ip: Option<IpAddr>,
}

fn outbound(ep: &Endpoint, net: &Network, mode: Mode) -> Option<Outbound> {
    let mut o = Outbound {
        all: mode.implicit_outbound_nat(),
        ..Outbound::default()
    };
    let mut any = o.all;
    for p in &ep.policies {
        if let EndpointPolicy::OutBoundNat(s) = p {
            any = true;
            let dests: Vec<IpNet> = s.destinations.iter().filter_map(|e| parse_net(e)).collect();
            if dests.is_empty() {
                o.explicit = true;
                o.all = true;
                o.exceptions
                    .extend(s.exceptions.iter().filter_map(|e| parse_net(e)));
            }
            o.destinations.extend(dests);
            o.virtual_ip = o.virtual_ip.or(s.virtual_ip);
        }
    }
    // Traffic within the network's own subnets is switched, never NATed.
    o.exceptions
        .extend(net.subnets().filter_map(|s| s.ip_address_prefix));
    any.then_some(o)
}

/// The SNAT rules of a local endpoint on its own port: (NAT layer rules owned by the endpoint,
/// limitation rules with their own origin).
pub fn compile_outbound(
    c: &mut Compiler,
    ep: &Endpoint,
    net: &Network,
    mode: Mode,
    out: &mut Compiled,
    origin: &Origin,
) {
    let Some(o) = outbound(ep, net, mode) else {
        return;
    };
    let out_dir = || Conditions::any().direction(Direction::Out);
    let mut rules = Vec::new();
    let mut refused = Vec::new();
    // The limitation is VFP's OutboundNAT policy's; a NAT network's WinNAT carries ICMP.
    let icmp_refused = o.explicit && c.facts.profile.imposes(Limitation::IcmpThroughOutboundNat);
    let own: Vec<IpNet> = c.facts.ips().map(IpNet::from).collect();
    for ip in ep.ips().collect::<Vec<_>>() {
        let Some(snat_ip) = o
            .virtual_ip
            .filter(|v| v.is_ipv4() == ip.is_ipv4())
            .or_else(|| c.facts.ip_like(ip))
        else {
            out.notice(
                &origin.owner,
                format!("OutBoundNAT: the node has no address of the family of {ip}"),
            );
            continue;
        };
        let pool = c.pool(snat_ip);
        let family = |n: &&IpNet| n.addr().is_ipv4() == ip.is_ipv4();
        // Loopback DSR: a connection the load balancer sent back to this pod leaves with the
        // node's address as source, so its replies come back through the switch.
        let dests: Vec<IpNet> = o.destinations.iter().filter(family).copied().collect();
        if !dests.is_empty() {
            let mut cond = out_dir().src_ip(ip);
            cond.dst = Some(dests);
            rules.push(Rule::new(100, cond, Action::Snat { pool }));
        }
        if !o.all {
            continue;
        }
        // The node itself is not behind the NAT: its own addresses are reached as they are.
        let to_node: Vec<IpNet> = own.iter().filter(family).copied().collect();
        if !to_node.is_empty() {
            let mut cond = out_dir().src_ip(ip);
            cond.dst = Some(to_node);
            rules.push(Rule::new(200, cond, Action::Allow));
        }
        let exceptions: Vec<IpNet> = o.exceptions.iter().filter(family).copied().collect();
        if !exceptions.is_empty() {
            let mut cond = out_dir().src_ip(ip);
            cond.dst = Some(exceptions);
            rules.push(Rule::new(300, cond, Action::Allow));
        }
        if icmp_refused {
            let icmp = if ip.is_ipv4() {
                proto::ICMP
            } else {
                proto::ICMPV6
            };
            refused.push(limitation::refuse(400, out_dir().src_ip(ip).protocol(icmp)));
        }
        rules.push(Rule::new(500, out_dir().src_ip(ip), Action::Snat { pool }));
    }
    out.place(Target::Endpoint(ep.id), NAT, origin.clone(), rules);
    out.place(
        Target::Endpoint(ep.id),
        NAT,
        limitation::origin(
            Limitation::IcmpThroughOutboundNat,
            c.facts.profile,
            "OutBoundNAT of Endpoint",
            &ep.id.to_string(),
        ),
        refused,
    );
}

/// `PortMapping` policies: the node's address (or the mapping's VIP) and external port are
/// forwarded to the endpoint's internal port, from the physical network (and from the host
/// with `LocalRoutedVip`).
pub fn compile_port_mappings(c: &Compiler, ep: &Endpoint, out: &mut Compiled, origin: &Origin) {
    let Some(ep_ip) = ep.ips().next() else {
        return;
    };
    let mut uplink = Vec::new();
    let mut host = Vec::new();
    for p in &ep.policies {
        let EndpointPolicy::PortMapping(pm) = p else {
            continue;
        };
        let frontends: Vec<IpNet> = match pm.vip {
            Some(v) => vec![IpNet::from(v)],
            None => c
                .facts
                .ips()
                .filter(|a| a.is_ipv4() == ep_ip.is_ipv4())
                .map(IpNet::from)
                .collect(),
        };
        if frontends.is_empty() {
            continue;
        }
        let backend = Backend {
            ip: ep_ip,
            port: (pm.internal_port != 0).then_some(pm.internal_port),
            mac: ep.mac_address.map(mac),
        };
        let action = Action::LoadBalance(Arc::new(LoadBalancer::new(vec![backend])));
        let mut cond = Conditions::any().direction(Direction::Out);
        cond.dst = Some(frontends);
        if let Ok(p) = u8::try_from(pm.protocol)
            && p != 0
        {
            cond = cond.protocol(p);
        }
        if pm.external_port != 0 {
            cond = cond.dst_port(pm.external_port);
        }
        let rule = Rule::new(50, cond, action);
        // NatFlags LocalRoutedVip (1): the host reaches the mapping too.
        if pm.flags & 1 != 0 {
            host.push(rule.clone());
        }
        uplink.push(rule);
    }
    out.place(Target::Uplink, NAT, origin.clone(), uplink);
    out.place(Target::HostPorts, NAT, origin.clone(), host);
}
