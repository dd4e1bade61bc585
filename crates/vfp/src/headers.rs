//! The header fields the engine matches on and rewrites, independent of their wire layout.

use crate::encap::Encap;
use crate::wire::{MacAddr, proto};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// The transposable fields of a packet (the inner packet when it is encapsulated): the
/// addresses of layers 2 to 4. For ICMP echo the identifier is carried in both ports, so that a
/// reply's swapped tuple equals the request's and NAT can treat the identifier as a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Headers {
    /// Ethernet source.
    pub src_mac: MacAddr,
    /// Ethernet destination.
    pub dst_mac: MacAddr,
    /// IP source.
    pub src_ip: IpAddr,
    /// IP destination.
    pub dst_ip: IpAddr,
    /// IP protocol (TCP, UDP, ICMP, ...).
    pub proto: u8,
    /// TCP/UDP source port or ICMP echo identifier; 0 when the packet has none.
    pub src_port: u16,
    /// TCP/UDP destination port or ICMP echo identifier; 0 when the packet has none.
    pub dst_port: u16,
}

impl Headers {
    /// An all-zero IPv4 header set, a starting point for tests and builders.
    pub fn empty() -> Headers {
        Headers {
            src_mac: MacAddr::ZERO,
            dst_mac: MacAddr::ZERO,
            src_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            dst_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            proto: 0,
            src_port: 0,
            dst_port: 0,
        }
    }

    /// The same packet seen from the other end: sources and destinations swapped.
    #[inline(always)]
    pub fn reversed(&self) -> Headers {
        Headers {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            proto: self.proto,
            src_port: self.dst_port,
            dst_port: self.src_port,
        }
    }

    /// True when the protocol has ports (or an echo identifier) the engine can rewrite.
    pub fn has_ports(&self) -> bool {
        matches!(
            self.proto,
            proto::TCP | proto::UDP | proto::ICMP | proto::ICMPV6
        )
    }

    /// True for ICMP/ICMPv6, where "ports" are the echo identifier.
    pub fn is_icmp(&self) -> bool {
        matches!(self.proto, proto::ICMP | proto::ICMPV6)
    }
}

impl fmt::Display for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.proto {
            proto::TCP => "tcp".to_string(),
            proto::UDP => "udp".to_string(),
            proto::ICMP => "icmp".to_string(),
            proto::ICMPV6 => "icmpv6".to_string(),
            other => format!("proto {other}"),
        };
        write!(
            f,
            "{} {} > {} {} {}",
            self.src_mac,
            sock(self.src_ip, self.src_port),
            self.dst_mac,
            sock(self.dst_ip, self.dst_port),
            p
        )
    }
}

fn sock(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// A packet's transposable fields plus its encapsulation, as the layers see and change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketHeaders {
    /// The packet proper (the inner packet when encapsulated).
    pub inner: Headers,
    /// The outer VXLAN headers, if the packet is (or is to be) encapsulated.
    pub outer: Option<Arc<Encap>>,
}

impl PacketHeaders {
    /// The VXLAN network identifier, if encapsulated.
    pub fn vni(&self) -> Option<u32> {
        self.outer.as_ref().map(|o| o.vni)
    }
}

impl fmt::Display for PacketHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(o) = &self.outer {
            write!(f, "[{o}] ")?;
        }
        write!(f, "{}", self.inner)
    }
}

/// What identifies a connection at the point where it enters the switch: the port it came in
/// on, the VNI it was encapsulated with (0 if none), and the inner 5-tuple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// The port the packet entered the switch from.
    pub port: u16,
    /// VXLAN network identifier of an encapsulated packet; 0 for plain packets.
    pub vni: u32,
    /// IP protocol.
    pub proto: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port or echo identifier.
    pub src_port: u16,
    /// Destination port or echo identifier.
    pub dst_port: u16,
}

impl FlowKey {
    /// The key of a packet with headers `h` entering at `port` under `vni`.
    #[inline(always)]
    pub fn of(port: u16, vni: u32, h: &Headers) -> FlowKey {
        FlowKey {
            port,
            vni,
            proto: h.proto,
            src: h.src_ip,
            dst: h.dst_ip,
            src_port: h.src_port,
            dst_port: h.dst_port,
        }
    }
}

const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;
const K3: u64 = 0x1656_67b1_9e37_79f9;

/// The high and low halves of a 64 x 64 bit product, folded: the mixing step of foldhash and
/// wyhash.
#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

impl FlowKey {
    /// The key's hash under `seed`: two folded multiplies for IPv4 (a few instructions, where
    /// a general hasher fed field by field costs several times that on every packet); the seed
    /// keeps crafted keys from colliding on purpose, as in foldhash.
    #[inline(always)]
    pub fn hash_with(&self, seed: u64) -> u64 {
        let ports = u32::from(self.src_port) << 16 | u32::from(self.dst_port);
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let addrs = u64::from(u32::from(s)) << 32 | u64::from(u32::from(d));
                hash_v4(seed, self.port, self.vni, self.proto, ports, addrs)
            }
            (s, d) => {
                let h = head(seed, self.port, self.vni, self.proto, ports);
                let (s, d) = (v6_bits(s), v6_bits(d));
                let h = folded_multiply(h ^ (s >> 64) as u64, K3 ^ s as u64);
                folded_multiply(h ^ (d >> 64) as u64 ^ K1, K3 ^ d as u64)
            }
        }
    }
}

/// The hash of the non-address fields; `ports` is the source port above the destination port,
/// as the wire's four bytes read big-endian.
#[inline(always)]
fn head(seed: u64, port: u16, vni: u32, proto: u8, ports: u32) -> u64 {
    let w0 = u64::from(port) | u64::from(proto) << 16 | u64::from(ports) << 24;
    folded_multiply(w0 ^ seed ^ K1, u64::from(vni) ^ K2)
}

/// `FlowKey::hash_with` of an IPv4 key, from the ports and addresses as the wire's bytes read
/// big-endian (`addrs`: source above destination), so that the fast path hashes a frame's
/// bytes without building the key. A plain key (VNI 0) takes one folded multiply of its two
/// words (as foldhash hashes 16 bytes), one the packet's critical path waits for before the
/// index can be read; a VNI is mixed in with a second.
#[inline(always)]
pub(crate) fn hash_v4(seed: u64, port: u16, vni: u32, proto: u8, ports: u32, addrs: u64) -> u64 {
    let w0 = u64::from(port) | u64::from(proto) << 16 | u64::from(ports) << 24;
    let h = folded_multiply(w0 ^ seed ^ K1, addrs ^ K2);
    if vni == 0 {
        h
    } else {
        folded_multiply(h ^ u64::from(vni), K3)
    }
}

fn v6_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)) | 1 << 127,
        IpAddr::V6(v) => u128::from(v),
    }
}
