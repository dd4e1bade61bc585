//! An IP stack reduced to what routing needs: interfaces with addresses, connected and
//! user-defined routes (flannel host-gw's), ARP and neighbour discovery, forwarding, loopback
//! for its own addresses, and a few listeners that answer (TCP SYN/data, UDP echo, ICMP
//! echo). Every packet delivered to it is kept in its inbox, headers as seen.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use ipnet::IpNet;
use vfp::wire::{ArpOperation, Icmpv6Repr, MacAddr, TcpFlags};

use hns_compiler::HostClaim;
use vfp::packet::{self, L4, Packet, Parsed};

/// An interface of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: MacAddr,
    pub addresses: Vec<IpNet>,
}

/// A route: a destination via a next hop, or on-link through a named interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackRoute {
    pub destination: IpNet,
    pub via: Option<IpAddr>,
    /// The interface, when the route is on-link without a next hop.
    pub dev: Option<String>,
}

/// A program answering UDP datagrams on one port of a stack (a DNS server in a pod): the
/// request's payload in, the reply's payload out (`None`: it sends nothing back).
pub type UdpResponder = Arc<dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync>;

/// The UDP responders of a stack, by port; a port with one answers through it instead of
/// echoing.
#[derive(Clone, Default)]
pub struct UdpResponders(BTreeMap<u16, UdpResponder>);

impl UdpResponders {
    /// Puts `responder` on `port`, replacing any there.
    pub fn insert(&mut self, port: u16, responder: UdpResponder) {
        self.0.insert(port, responder);
    }

    /// The responder on `port`.
    pub fn get(&self, port: u16) -> Option<&UdpResponder> {
        self.0.get(&port)
    }
}

impl fmt::Debug for UdpResponders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// A frame a stack sends, and out of which interface.
pub type Out = (usize, Vec<u8>);

/// A packet a stack received (or dropped), for the harness to look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The interface it came in on (`usize::MAX` for loopback).
    pub iface: usize,
    pub packet: Packet,
}

/// An IP stack: a node's host, a pod, or the external host.
#[derive(Clone, Debug, Default)]
pub struct Stack {
    pub name: String,
    pub interfaces: Vec<Interface>,
    pub routes: Vec<StackRoute>,
    /// Forwards packets not addressed to it (the Windows host with forwarding enabled on its
    /// vNICs; the external router).
    pub forwarding: bool,
    /// TCP ports that answer a SYN with a SYN-ACK (others answer RST) and ACK data.
    pub tcp_listen: BTreeSet<u16>,
    /// UDP ports that echo (the payload with `!` appended).
    pub udp_listen: BTreeSet<u16>,
    /// UDP ports answered by a program (before any echo on the same port).
    pub udp_responders: UdpResponders,
    /// More addresses it accepts as its own (a DSR backend's VIP on its loopback).
    pub extra_addresses: Vec<IpAddr>,
    /// Frontends at its own addresses that it sends into the switch instead of looping back.
    pub claims: BTreeSet<HostClaim>,
    neighbors: HashMap<IpAddr, MacAddr>,
    pending: Vec<(usize, IpAddr, Packet)>,
    /// Every packet delivered to it.
    pub inbox: Vec<Received>,
    /// Why packets were dropped here.
    pub drops: Vec<String>,
}

impl Stack {
    /// A stack with one interface, on-link routes for its prefixes and a default route.
    pub fn new(name: &str) -> Stack {
        Stack {
            name: name.to_string(),
            ..Stack::default()
        }
    }

    /// All addresses it owns.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.interfaces
            .iter()
            .flat_map(|i| i.addresses.iter().map(IpNet::addr))
            .chain(self.extra_addresses.iter().copied())
    }

    /// True when `ip` is one of its addresses.
    pub fn is_local(&self, ip: IpAddr) -> bool {
        self.addresses().any(|a| a == ip)
    }

    /// The first address of the family of `like`.
    pub fn address_like(&self, like: IpAddr) -> Option<IpAddr> {
        self.interfaces
            .iter()
            .flat_map(|i| i.addresses.iter().map(IpNet::addr))
            .find(|a| a.is_ipv4() == like.is_ipv4())
    }

    /// The source address for a packet to `dst`: the outgoing interface's address of the same
    /// family (the first such address of the stack otherwise).
    pub fn source_for(&self, dst: IpAddr) -> Option<IpAddr> {
        if self.is_local(dst) {
            return Some(dst);
        }
        self.route(dst)
            .and_then(|(i, _)| {
                self.interfaces[i]
                    .addresses
                    .iter()
                    .map(IpNet::addr)
                    .find(|a| a.is_ipv4() == dst.is_ipv4())
            })
            .or_else(|| self.address_like(dst))
    }

    /// The frame this stack would send for `p` and out of which interface, if its next hop's
    /// MAC is already known (for traces: nothing is sent, nothing resolved).
    pub fn frame_for(&self, p: &Packet) -> Option<Out> {
        let (iface, nh) = self.route(p.dst)?;
        let mac = *self.neighbors.get(&nh)?;
        let f = p.frame(self.interfaces[iface].mac, mac).ok()?;
        Some((iface, f))
    }

    /// Forgets learned neighbours (after a topology change).
    pub fn flush_neighbors(&mut self) {
        self.neighbors.clear();
    }

    /// Where a packet to `dst` leaves: (interface, next hop).
    pub fn route(&self, dst: IpAddr) -> Option<(usize, IpAddr)> {
        let mut best: Option<(u8, usize, IpAddr)> = None;
        let mut consider = |len: u8, iface: usize, nh: IpAddr| {
            if best.is_none_or(|(l, _, _)| len > l) {
                best = Some((len, iface, nh));
            }
        };
        for (i, iface) in self.interfaces.iter().enumerate() {
            for a in &iface.addresses {
                if a.trunc().contains(&dst) {
                    consider(a.prefix_len(), i, dst);
                }
            }
        }
        for r in &self.routes {
            if !r.destination.contains(&dst) {
                continue;
            }
            let iface = match (&r.dev, r.via) {
                (Some(dev), _) => self.interfaces.iter().position(|i| &i.name == dev),
                (None, Some(via)) => self.on_link(via),
                (None, None) => None,
            };
            if let Some(i) = iface {
                consider(r.destination.prefix_len(), i, r.via.unwrap_or(dst));
            }
        }
        best.map(|(_, i, nh)| (i, nh))
    }

    fn on_link(&self, ip: IpAddr) -> Option<usize> {
        self.interfaces
            .iter()
            .position(|i| i.addresses.iter().any(|a| a.trunc().contains(&ip)))
    }

    /// Sends a packet this stack originates: looped back if for itself, into the switch if a
    /// claimed frontend, else routed.
    pub fn send(&mut self, mut p: Packet) -> Vec<Out> {
        let mut out = Vec::new();
        let claim = HostClaim {
            protocol: p.protocol(),
            address: p.dst,
            port: p.dst_port(),
        };
        if self.claims.contains(&claim)
            && let Some(i) = self
                .interfaces
                .iter()
                .position(|i| i.addresses.iter().any(|a| a.addr() == p.dst))
        {
            let mac = self.interfaces[i].mac;
            if let Ok(f) = p.frame(mac, mac) {
                out.push((i, f));
            }
            return out;
        }
        if self.is_local(p.dst) {
            p.src_mac = MacAddr::ZERO;
            p.dst_mac = MacAddr::ZERO;
            self.deliver(usize::MAX, p, &mut out);
            return out;
        }
        self.emit(p, &mut out);
        out
    }

    /// Takes a frame that arrived on interface `iface`.
    pub fn receive(&mut self, iface: usize, frame: &[u8]) -> Vec<Out> {
        let mut out = Vec::new();
        let Some(my_mac) = self.interfaces.get(iface).map(|i| i.mac) else {
            return out;
        };
        let (eth, parsed) = match packet::parse(frame) {
            Ok(p) => p,
            Err(e) => {
                self.drops.push(format!("unreadable frame: {e}"));
                return out;
            }
        };
        if eth.dst != my_mac && !eth.dst.is_group() {
            return out;
        }
        match parsed {
            Parsed::Arp(a) => self.arp(iface, a, &mut out),
            Parsed::Nd(src, m) => self.nd(iface, eth.src, src, m, &mut out),
            Parsed::Ip(p) => {
                if eth.dst.is_group() {
                    return out;
                }
                if self.is_local(p.dst) {
                    self.deliver(iface, p, &mut out);
                } else if self.forwarding {
                    let mut p = p;
                    if p.ttl <= 1 {
                        self.drops.push(format!("ttl exceeded: {p}"));
                        return out;
                    }
                    p.ttl -= 1;
                    self.emit(p, &mut out);
                } else {
                    self.drops.push(format!("not mine, not forwarding: {p}"));
                }
            }
            Parsed::Other => {}
        }
        out
    }

    fn arp(&mut self, iface: usize, a: vfp::wire::ArpRepr, out: &mut Vec<Out>) {
        let sender = IpAddr::V4(a.sender_ip);
        if !a.sender_ip.is_unspecified() {
            self.neighbors.insert(sender, a.sender_mac);
            self.flush_pending(sender, out);
        }
        let target = IpAddr::V4(a.target_ip);
        let mine = self.interfaces[iface]
            .addresses
            .iter()
            .any(|n| n.addr() == target);
        if a.operation == ArpOperation::Request && mine {
            let mac = self.interfaces[iface].mac;
            out.push((
                iface,
                packet::arp_reply(mac, a.target_ip, a.sender_mac, a.sender_ip),
            ));
        }
    }

    fn nd(
        &mut self,
        iface: usize,
        eth_src: MacAddr,
        src: Ipv6Addr,
        m: Icmpv6Repr,
        out: &mut Vec<Out>,
    ) {
        match m {
            Icmpv6Repr::NeighborSolicit { target, source_mac } => {
                if !src.is_unspecified() {
                    self.neighbors
                        .insert(IpAddr::V6(src), source_mac.unwrap_or(eth_src));
                    self.flush_pending(IpAddr::V6(src), out);
                }
                let mine = self.interfaces[iface]
                    .addresses
                    .iter()
                    .any(|n| n.addr() == IpAddr::V6(target));
                if mine {
                    let mac = self.interfaces[iface].mac;
                    let na = Icmpv6Repr::NeighborAdvert {
                        router: false,
                        solicited: true,
                        override_: true,
                        target,
                        target_mac: Some(mac),
                    };
                    out.push((iface, packet::nd(mac, target, src, eth_src, &na)));
                }
            }
            Icmpv6Repr::NeighborAdvert {
                target, target_mac, ..
            } => {
                let ip = IpAddr::V6(target);
                self.neighbors.insert(ip, target_mac.unwrap_or(eth_src));
                self.flush_pending(ip, out);
            }
            _ => {}
        }
    }

    fn flush_pending(&mut self, ip: IpAddr, out: &mut Vec<Out>) {
        let Some(&mac) = self.neighbors.get(&ip) else {
            return;
        };
        let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(_, nh, _)| *nh == ip);
        self.pending = wait;
        for (iface, _, p) in ready {
            let src = self.interfaces[iface].mac;
            if let Ok(f) = p.frame(src, mac) {
                out.push((iface, f));
            }
        }
    }

    /// Routes and frames a packet, resolving the next hop first if needed.
    fn emit(&mut self, p: Packet, out: &mut Vec<Out>) {
        let Some((iface, nh)) = self.route(p.dst) else {
            self.drops.push(format!("no route: {p}"));
            return;
        };
        let src_mac = self.interfaces[iface].mac;
        if let Some(&mac) = self.neighbors.get(&nh) {
            if let Ok(f) = p.frame(src_mac, mac) {
                out.push((iface, f));
            }
            return;
        }
        let asked = self.pending.iter().any(|(_, n, _)| *n == nh);
        self.pending.push((iface, nh, p));
        if asked {
            return;
        }
        match nh {
            IpAddr::V4(t) => {
                let Some(IpAddr::V4(me)) = self.interfaces[iface]
                    .addresses
                    .iter()
                    .map(IpNet::addr)
                    .find(IpAddr::is_ipv4)
                else {
                    self.drops.push(format!("no IPv4 address to ask for {t}"));
                    return;
                };
                out.push((iface, packet::arp_request(src_mac, me, t)));
            }
            IpAddr::V6(t) => {
                let Some(IpAddr::V6(me)) = self.interfaces[iface]
                    .addresses
                    .iter()
                    .map(IpNet::addr)
                    .find(IpAddr::is_ipv6)
                else {
                    self.drops.push(format!("no IPv6 address to ask for {t}"));
                    return;
                };
                let group = packet::solicited_node(t);
                let ns = Icmpv6Repr::NeighborSolicit {
                    target: t,
                    source_mac: Some(src_mac),
                };
                out.push((
                    iface,
                    packet::nd(src_mac, me, group, MacAddr::ipv6_multicast(group), &ns),
                ));
            }
        }
    }

    /// A packet for this stack: kept, and answered by a listener.
    fn deliver(&mut self, iface: usize, p: Packet, out: &mut Vec<Out>) {
        self.inbox.push(Received {
            iface,
            packet: p.clone(),
        });
        let Some(reply) = self.answer(&p) else {
            return;
        };
        if self.is_local(reply.dst) {
            // To itself: loopback, never on a wire (a DSR backend answering its own client).
            self.deliver(usize::MAX, reply, out);
        } else {
            self.emit(reply, out);
        }
    }

    fn answer(&self, p: &Packet) -> Option<Packet> {
        let l4 = match &p.l4 {
            L4::Tcp {
                src_port,
                dst_port,
                flags,
                seq,
                payload,
                ..
            } => {
                let f = TcpFlags(*flags);
                if f.has(TcpFlags::RST) {
                    return None;
                }
                let listening = self.tcp_listen.contains(dst_port);
                if f.has(TcpFlags::SYN) && !f.has(TcpFlags::ACK) {
                    L4::Tcp {
                        src_port: *dst_port,
                        dst_port: *src_port,
                        flags: if listening {
                            TcpFlags::SYN | TcpFlags::ACK
                        } else {
                            TcpFlags::RST | TcpFlags::ACK
                        },
                        seq: 7000,
                        ack: seq.wrapping_add(1),
                        payload: Vec::new(),
                    }
                } else if !payload.is_empty() && listening {
                    L4::Tcp {
                        src_port: *dst_port,
                        dst_port: *src_port,
                        flags: TcpFlags::ACK,
                        seq: 7001,
                        ack: seq.wrapping_add(payload.len() as u32),
                        payload: Vec::new(),
                    }
                } else {
                    return None;
                }
            }
            L4::Udp {
                src_port,
                dst_port,
                payload,
            } if self.udp_responders.get(*dst_port).is_some() => L4::Udp {
                src_port: *dst_port,
                dst_port: *src_port,
                payload: self
                    .udp_responders
                    .get(*dst_port)
                    .and_then(|r| r(payload))?,
            },
            L4::Udp {
                src_port,
                dst_port,
                payload,
            } if self.udp_listen.contains(dst_port) => L4::Udp {
                src_port: *dst_port,
                dst_port: *src_port,
                payload: [payload.as_slice(), b"!"].concat(),
            },
            L4::Echo {
                request: true,
                ident,
                seq,
                data,
            } => L4::Echo {
                request: false,
                ident: *ident,
                seq: *seq,
                data: data.clone(),
            },
            _ => return None,
        };
        Some(Packet::new(p.dst, p.src, l4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Stack {
        let mut s = Stack::new("h");
        s.interfaces.push(Interface {
            name: "eth0".into(),
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            addresses: vec!["192.168.77.11/24".parse().unwrap()],
        });
        s.interfaces.push(Interface {
            name: "cbr0".into(),
            mac: MacAddr([2, 0, 0, 0, 0, 2]),
            addresses: vec!["10.244.1.2/24".parse().unwrap()],
        });
        s.routes.push(StackRoute {
            destination: "0.0.0.0/0".parse().unwrap(),
            via: Some("192.168.77.1".parse().unwrap()),
            dev: None,
        });
        s.routes.push(StackRoute {
            destination: "10.244.2.0/24".parse().unwrap(),
            via: Some("192.168.77.12".parse().unwrap()),
            dev: None,
        });
        s
    }

    #[test]
    fn routes_take_the_longest_prefix_and_the_source_follows_the_interface() {
        let s = host();
        let ip = |x: &str| x.parse::<IpAddr>().unwrap();
        assert_eq!(s.route(ip("10.244.1.7")), Some((1, ip("10.244.1.7"))));
        assert_eq!(s.route(ip("10.244.2.7")), Some((0, ip("192.168.77.12"))));
        assert_eq!(s.route(ip("8.8.8.8")), Some((0, ip("192.168.77.1"))));
        assert_eq!(s.source_for(ip("10.244.1.7")), Some(ip("10.244.1.2")));
        assert_eq!(s.source_for(ip("8.8.8.8")), Some(ip("192.168.77.11")));
    }

    #[test]
    fn a_packet_waits_for_arp_then_leaves_and_the_answer_comes_back() {
        let mut s = host();
        s.tcp_listen.insert(10250);
        let ip = |x: &str| x.parse::<IpAddr>().unwrap();
        let p = Packet::new(
            ip("192.168.77.11"),
            ip("192.168.77.50"),
            L4::Udp {
                src_port: 1,
                dst_port: 2,
                payload: vec![1],
            },
        );
        let out = s.send(p);
        assert_eq!(out.len(), 1, "an ARP request first");
        let (_, arp) = &out[0];
        assert_eq!(arp[12..14], [0x08, 0x06]);
        let reply = packet::arp_reply(
            MacAddr([2, 0, 0, 0, 0, 0x50]),
            "192.168.77.50".parse().unwrap(),
            MacAddr([2, 0, 0, 0, 0, 1]),
            "192.168.77.11".parse().unwrap(),
        );
        let out = s.receive(0, &reply);
        assert_eq!(out.len(), 1, "the queued packet");
        let (_, parsed) = packet::parse(&out[0].1).unwrap();
        let Parsed::Ip(sent) = parsed else { panic!() };
        assert_eq!(sent.dst_mac, MacAddr([2, 0, 0, 0, 0, 0x50]));
        // A SYN to a listening port is answered; to another port, reset.
        let syn = |port| {
            Packet::new(
                ip("192.168.77.50"),
                ip("192.168.77.11"),
                L4::Tcp {
                    src_port: 5555,
                    dst_port: port,
                    flags: TcpFlags::SYN,
                    seq: 9,
                    ack: 0,
                    payload: vec![],
                },
            )
            .frame(MacAddr([2, 0, 0, 0, 0, 0x50]), MacAddr([2, 0, 0, 0, 0, 1]))
            .unwrap()
        };
        let out = s.receive(0, &syn(10250));
        let (_, Parsed::Ip(a)) = packet::parse(&out[0].1).unwrap() else {
            panic!()
        };
        assert_eq!(a.tcp_flags(), TcpFlags::SYN | TcpFlags::ACK);
        let out = s.receive(0, &syn(1));
        let (_, Parsed::Ip(r)) = packet::parse(&out[0].1).unwrap() else {
            panic!()
        };
        assert_eq!(r.tcp_flags(), TcpFlags::RST | TcpFlags::ACK);
        assert_eq!(s.inbox.len(), 2);
    }
}
