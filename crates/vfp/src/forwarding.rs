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
    /// Port MACs, with each port's VNI: one MAC may be on several virtual networks (two
    /// Overlay networks with the same subnet give a pod the same MAC), and a frame goes to the
    /// port on its own VNI first.
    macs: HashMap<MacAddr, Vec<(PortId, u32)>>,
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
            let on = self.macs.entry(m).or_default();
            on.retain(|&(_, vni)| vni != c.vni);
            on.push((p.id(), c.vni));
        }
        for ip in &c.ips {
            self.ips.insert((c.vni, *ip), (p.id(), c.mac));
        }
    }

    pub(crate) fn remove_port(&mut self, p: &Port) {
        let c = p.config();
        if let Some(m) = c.mac
            && let Some(on) = self.macs.get_mut(&m)
        {
            on.retain(|&(id, _)| id != p.id());
            if on.is_empty() {
                self.macs.remove(&m);
            }
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

    /// The port with MAC `mac`: the one on `vni` if there is one, else the first.
    fn port_of(&self, mac: MacAddr, vni: u32) -> Option<(PortId, u32)> {
        let on = self.macs.get(&mac)?;
        on.iter()
            .find(|&&(_, v)| v == vni)
            .or_else(|| on.first())
            .copied()
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
            return self.to_uplink(from, ForwardReason::Encapsulated, true);
        }
        let dst = h.inner.dst_mac;
        if dst.is_group() {
            return Decision::Flood;
        }
        if let Some((p, _)) = self.port_of(dst, vni) {
            return Decision::To(p, ForwardReason::DestinationMac);
        }
        if self.router_macs.contains(&dst)
            && let Some(&(p, mac)) = self.ips.get(&(vni, h.inner.dst_ip))
        {
            h.inner.src_mac = dst;
            h.inner.dst_mac = mac.unwrap_or(dst);
            return Decision::To(p, ForwardReason::Routed);
        }
        // A rewritten packet may go back out of the uplink it came in on (a NodePort whose
        // backend is on another node); an unchanged one is caught as a hairpin by the caller.
        self.to_uplink(from, ForwardReason::Default, true)
    }

    fn decap_target(&self, vni: u32, h: &PacketHeaders) -> Decision {
        if let Some(&(p, _)) = self.ips.get(&(vni, h.inner.dst_ip)) {
            return Decision::To(p, ForwardReason::Decapsulation);
        }
        match self.port_of(h.inner.dst_mac, vni) {
            Some((p, port_vni)) if port_vni == vni => Decision::To(p, ForwardReason::Decapsulation),
            _ => Decision::Drop(DropReason::UnknownVni),
        }
    }

    fn to_uplink(&self, from: PortId, why: ForwardReason, hairpin: bool) -> Decision {
        match self.uplink {
            Some(u) if u != from || hairpin => Decision::To(u, why),
            _ => Decision::Drop(DropReason::UnknownDestination),
        }
    }

    /// Where a non-IP unicast frame from a port on `vni` goes: by MAC, else the uplink.
    pub(crate) fn l2(&self, from: PortId, vni: u32, dst: MacAddr) -> Decision {
        if dst.is_group() {
            return Decision::Flood;
        }
        match self.port_of(dst, vni) {
            Some((p, _)) => Decision::To(p, ForwardReason::DestinationMac),
            None => self.to_uplink(from, ForwardReason::Default, false),
        }
    }
}
