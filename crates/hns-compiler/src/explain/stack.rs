//! The sender's IP stack, as small as a trace needs: which interface and next hop its routes
//! pick for a destination, and the MAC it would address that next hop with.

use std::net::{IpAddr, Ipv6Addr};

use ipnet::IpNet;
use vfp::packet::{self, Parsed};
use vfp::wire::{Icmpv6Repr, MacAddr};
use vfp::{Disposition, PortId, Timestamp};

use super::UNKNOWN_MAC;
use crate::Compiler;

/// A sender's interface on the switch.
#[derive(Clone, Debug)]
pub(super) struct Iface {
    pub(super) port: PortId,
    pub(super) mac: MacAddr,
    pub(super) prefixes: Vec<IpNet>,
}

/// What routing needs of a sender's IP stack: its interfaces and its routes via gateways.
#[derive(Clone, Debug)]
pub(super) struct Stack {
    pub(super) ifaces: Vec<Iface>,
    pub(super) routes: Vec<(IpNet, IpAddr)>,
}

impl Stack {
    /// The interface and next hop for `dst`: the longest prefix, connected before routed.
    pub(super) fn route(&self, dst: IpAddr) -> Option<(&Iface, IpAddr)> {
        let mut best: Option<(u8, usize, IpAddr)> = None;
        let mut consider = |len: u8, iface: usize, hop: IpAddr| {
            if best.is_none_or(|(l, _, _)| len > l) {
                best = Some((len, iface, hop));
            }
        };
        for (i, iface) in self.ifaces.iter().enumerate() {
            for n in iface.prefixes.iter().filter(|n| n.trunc().contains(&dst)) {
                consider(n.prefix_len(), i, dst);
            }
        }
        for (d, via) in self.routes.iter().filter(|(d, _)| d.contains(&dst)) {
            let on_link = self
                .ifaces
                .iter()
                .position(|i| i.prefixes.iter().any(|n| n.trunc().contains(via)));
            if let Some(i) = on_link {
                consider(d.prefix_len(), i, *via);
            }
        }
        best.and_then(|(_, i, hop)| Some((self.ifaces.get(i)?, hop)))
    }

    pub(super) fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .ifaces
            .iter()
            .flat_map(|i| {
                i.prefixes
                    .iter()
                    .map(|n| format!("{} connected", n.trunc()))
            })
            .collect();
        parts.extend(self.routes.iter().map(|(d, via)| format!("{d} via {via}")));
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// How a next hop's MAC was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum How {
    /// The switch answers ARP / neighbour solicitations for the address.
    Owned,
    /// A port of the switch has the address.
    Port,
    /// The host's neighbour table knows it.
    Neighbour,
    /// Nobody knows it.
    Unknown,
}

/// A next hop and its MAC.
#[derive(Clone, Debug)]
pub(super) struct NextHop {
    pub(super) address: IpAddr,
    pub(super) mac: MacAddr,
    pub(super) how: How,
    /// The port that has the address, for [`How::Port`].
    pub(super) port_name: Option<String>,
}

impl NextHop {
    pub(super) fn describe(&self) -> String {
        match self.how {
            How::Owned => "the switch answers ARP for it".into(),
            How::Port => format!(
                "the MAC of port {}, which has the address",
                self.port_name.as_deref().unwrap_or("?")
            ),
            How::Neighbour => "from the host's neighbour table".into(),
            How::Unknown => "unknown".into(),
        }
    }
}

/// The MAC the sender on `iface` would address `hop` with: what the switch answers to its ARP
/// (or neighbour solicitation), else the MAC of the port that has the address, else what the
/// host's neighbour table says.
pub(super) fn resolve_mac(
    c: &mut Compiler,
    iface: &Iface,
    src: IpAddr,
    hop: IpAddr,
    now: Timestamp,
) -> NextHop {
    let found = |mac, how, port_name| NextHop {
        address: hop,
        mac,
        how,
        port_name,
    };
    if let Some(mac) = answered(c, iface, src, hop, now) {
        return found(mac, How::Owned, None);
    }
    let vni = c.switch().port(iface.port).map(|p| p.config().vni);
    let owner = c.switch().ports().find(|p| {
        p.id() != iface.port && Some(p.config().vni) == vni && p.config().ips.contains(&hop)
    });
    if let Some((mac, name)) = owner.and_then(|p| Some((p.config().mac?, p.name().to_string()))) {
        return found(mac, How::Port, Some(name));
    }
    match c.facts().resolver.mac_of(hop) {
        Some(mac) => found(mac, How::Neighbour, None),
        None => found(UNKNOWN_MAC, How::Unknown, None),
    }
}

/// The switch's answer to the sender's ARP request (IPv4) or neighbour solicitation (IPv6)
/// for `hop`, traced so that nothing changes.
pub(super) fn answered(
    c: &mut Compiler,
    iface: &Iface,
    src: IpAddr,
    hop: IpAddr,
    now: Timestamp,
) -> Option<MacAddr> {
    let frame = match (src, hop) {
        (IpAddr::V4(s), IpAddr::V4(h)) => packet::arp_request(iface.mac, s, h),
        (IpAddr::V6(s), IpAddr::V6(h)) => solicitation(iface.mac, s, h),
        _ => return None,
    };
    let t = c.switch_mut().trace(iface.port, &frame, now);
    if !matches!(t.disposition, Disposition::Reply(_)) {
        return None;
    }
    match packet::parse(t.frame.as_deref()?).ok()?.1 {
        Parsed::Arp(a) => Some(a.sender_mac),
        Parsed::Nd(_, Icmpv6Repr::NeighborAdvert { target_mac, .. }) => target_mac,
        _ => None,
    }
}

pub(super) fn solicitation(mac: MacAddr, src: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let group = packet::solicited_node(target);
    let ns = Icmpv6Repr::NeighborSolicit {
        target,
        source_mac: Some(mac),
    };
    packet::nd(mac, src, group, MacAddr::ipv6_multicast(group), &ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_take_the_longest_prefix_and_connected_wins_a_tie() {
        let iface = Iface {
            port: 1,
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            prefixes: vec!["10.244.1.10/24".parse().unwrap()],
        };
        let s = Stack {
            ifaces: vec![iface],
            routes: vec![
                ("0.0.0.0/0".parse().unwrap(), "10.244.1.2".parse().unwrap()),
                (
                    "10.244.1.0/24".parse().unwrap(),
                    "10.244.1.1".parse().unwrap(),
                ),
                ("10.9.0.0/16".parse().unwrap(), "10.3.0.1".parse().unwrap()),
            ],
        };
        let hop = |d: &str| s.route(d.parse().unwrap()).map(|(_, h)| h.to_string());
        assert_eq!(hop("10.244.1.11").as_deref(), Some("10.244.1.11"));
        assert_eq!(hop("10.96.0.10").as_deref(), Some("10.244.1.2"));
        // A route whose gateway is not on-link is not usable; the default route is.
        assert_eq!(hop("10.9.0.1").as_deref(), Some("10.244.1.2"));
    }
}
