//! Where a packet goes once its ingress port's layers are done: by destination MAC to a local
//! port; through the switch's router MACs (gateways) by destination IP; encapsulated packets by
//! VNI and inner destination; otherwise to the uplink (external switch) or nowhere (internal).

use crate::disposition::DropReason;
use crate::encap::Encap;
use crate::headers::PacketHeaders;
use crate::port::{Port, PortId};
use crate::wire::MacAddr;
use hashbrown::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

/// The switch's forwarding tables.
#[derive(Debug, Clone, Default)]
pub(crate) struct Forwarding {
    pub uplink: Option<PortId>,
    /// Port MACs, with the port's VNI.
    macs: HashMap<MacAddr, (PortId, u32)>,
    /// Port addresses per VNI, with the port's MAC (for routed delivery).
    ips: HashMap<(u32, IpAddr), (PortId, Option<MacAddr>)>,
    /// Addresses the switch answers ARP / neighbour solicitations for.
    pub owned: HashMap<IpAddr, MacAddr>,
    /// MACs of owned addresses: frames to them are routed by destination IP.
    router_macs: HashSet<MacAddr>,
    /// This host's provider addresses: VXLAN to them is looked into.
    pub provider_addrs: Vec<IpAddr>,
}

/// How the decision was reached, for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ForwardReason {
    /// The destination MAC is a port's.
    DestinationMac,
    /// The destination MAC is a gateway's: routed by destination IP to a port's address.
    Routed,
    /// Encapsulated to this host: the VNI and inner destination name the port.
    Decapsulation,
    /// Encapsulated towards another host.
    Encapsulated,
    /// Nothing local matched; the uplink takes it.
    Default,
}

/// The forwarding decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    To(PortId, ForwardReason),
    Flood,
    Drop(DropReason),
}

impl Forwarding {
    pub(crate) fn add_port(&mut self, p: &Port) {
        let c = p.config();
        if let Some(m) = c.mac {
            self.macs.insert(m, (p.id(), c.vni));
        }
        for ip in &c.ips {
            self.ips.insert((c.vni, *ip), (p.id(), c.mac));
        }
    }

    pub(crate) fn remove_port(&mut self, p: &Port) {
        let c = p.config();
        if let Some(m) = c.mac
            && self.macs.get(&m).is_some_and(|v| v.0 == p.id())
        {
            self.macs.remove(&m);
        }
        for ip in &c.ips {
            if self.ips.get(&(c.vni, *ip)).is_some_and(|v| v.0 == p.id()) {
                self.ips.remove(&(c.vni, *ip));
            }
        }
    }

    pub(crate) fn own(&mut self, ip: IpAddr, mac: MacAddr) {
        self.owned.insert(ip, mac);
        self.router_macs.insert(mac);
    }

    pub(crate) fn disown(&mut self, ip: IpAddr) {
        if let Some(mac) = self.owned.remove(&ip)
            && !self.owned.values().any(|m| *m == mac)
        {
            self.router_macs.remove(&mac);
        }
    }

    /// Decides the egress port for headers `h` that entered at `from` (on VNI `vni`).
    /// `arrived` is the outer header the packet came in with, if it was addressed to a
    /// provider address: while it is still on, the packet is for a local port on that VNI.
    /// Routing rewrites the MACs in `h`.
    pub(crate) fn decide(
        &self,
        from: PortId,
        vni: u32,
        h: &mut PacketHeaders,
        arrived: Option<&Arc<Encap>>,
    ) -> Decision {
        if let Some(outer) = &h.outer {
            if arrived.is_some_and(|a| Arc::ptr_eq(a, outer)) {
                return self.decap_target(outer.vni, h);
            }
            return self.to_uplink(from, ForwardReason::Encapsulated);
        }
        let dst = h.inner.dst_mac;
        if dst.is_group() {
            return Decision::Flood;
        }
        if let Some(&(p, _)) = self.macs.get(&dst) {
            return Decision::To(p, ForwardReason::DestinationMac);
        }
        if self.router_macs.contains(&dst)
            && let Some(&(p, mac)) = self.ips.get(&(vni, h.inner.dst_ip))
        {
            h.inner.src_mac = dst;
            h.inner.dst_mac = mac.unwrap_or(dst);
            return Decision::To(p, ForwardReason::Routed);
        }
        self.to_uplink(from, ForwardReason::Default)
    }

    fn decap_target(&self, vni: u32, h: &PacketHeaders) -> Decision {
        if let Some(&(p, _)) = self.ips.get(&(vni, h.inner.dst_ip)) {
            return Decision::To(p, ForwardReason::Decapsulation);
        }
        match self.macs.get(&h.inner.dst_mac) {
            Some(&(p, port_vni)) if port_vni == vni => {
                Decision::To(p, ForwardReason::Decapsulation)
            }
            _ => Decision::Drop(DropReason::UnknownVni),
        }
    }

    fn to_uplink(&self, from: PortId, why: ForwardReason) -> Decision {
        match self.uplink {
            Some(u) if u != from => Decision::To(u, why),
            _ => Decision::Drop(DropReason::UnknownDestination),
        }
    }

    /// Where a non-IP unicast frame goes: by MAC, else the uplink.
    pub(crate) fn l2(&self, from: PortId, dst: MacAddr) -> Decision {
        if dst.is_group() {
            return Decision::Flood;
        }
        match self.macs.get(&dst) {
            Some(&(p, _)) => Decision::To(p, ForwardReason::DestinationMac),
            None => self.to_uplink(from, ForwardReason::Default),
        }
    }
}
