//! VXLAN encapsulation: the outer headers a packet is wrapped in to cross the underlay from one
//! host's provider address (PA) to another's, and the code that adds and removes them.

use crate::frame::Frame;
use crate::wire::{self, EtherType, Ipv6Repr, MacAddr, VxlanRepr, checksum};
use std::fmt;
use std::net::IpAddr;

/// Outer headers of a VXLAN encapsulation (RFC 7348): underlay Ethernet and IP addresses, the
/// UDP destination port and the VNI. The UDP source port is chosen per flow for ECMP entropy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Encap {
    /// VXLAN network identifier (HNS: the VSID / `IsolationId`).
    pub vni: u32,
    /// Underlay source MAC (this host's NIC).
    pub src_mac: MacAddr,
    /// Underlay destination MAC (the remote host, or the next hop towards it).
    pub dst_mac: MacAddr,
    /// This host's provider address.
    pub src_ip: IpAddr,
    /// The remote host's provider address.
    pub dst_ip: IpAddr,
    /// UDP destination port, normally 4789 (HNS `VxlanPort` can change it).
    pub udp_port: u16,
}

impl Encap {
    /// Bytes the outer headers add: Ethernet, IPv4 or IPv6, UDP and VXLAN.
    pub fn overhead(&self) -> usize {
        let ip = if self.src_ip.is_ipv4() { 20 } else { 40 };
        14 + ip + 8 + 8
    }

    /// The outer headers of a reply: addresses swapped, same VNI and port.
    pub fn reversed(&self) -> Encap {
        Encap {
            vni: self.vni,
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            udp_port: self.udp_port,
        }
    }
}

impl fmt::Display for Encap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "vxlan vni {} {} > {} udp/{}",
            self.vni, self.src_ip, self.dst_ip, self.udp_port
        )
    }
}

/// The outer UDP source port for a flow: RFC 7348 §5 recommends a hash of the inner headers in
/// the dynamic range, so that underlay ECMP spreads flows but keeps each one on a path.
pub fn entropy_port(flow_hash: u64) -> u16 {
    49152 + ((flow_hash ^ (flow_hash >> 32)) % 16384) as u16
}

/// Prepends the outer headers to `frame` (which holds the inner Ethernet frame). The outer IPv4
/// header gets a full checksum (20 bytes); the outer UDP checksum is zero over IPv4 (RFC 7348
/// allows it) and computed over IPv6, where zero is not allowed by default. Written field by
/// field rather than through the `Repr`s: this runs once per encapsulated packet.
pub fn push(frame: &mut Frame, e: &Encap, src_port: u16) -> Result<(), wire::WireError> {
    let inner_len = frame.len();
    let udp_len = u16::try_from(16 + inner_len).map_err(|_| wire::WireError::Malformed)?;
    let (ethertype, ip_len) = match (e.src_ip, e.dst_ip) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (EtherType::IPV4, 20),
        (IpAddr::V6(_), IpAddr::V6(_)) => (EtherType::IPV6, 40),
        _ => return Err(wire::WireError::Malformed),
    };
    let n = 14 + ip_len + 16;
    let out = frame.push_front(n);
    out[0..6].copy_from_slice(&e.dst_mac.0);
    out[6..12].copy_from_slice(&e.src_mac.0);
    out[12..14].copy_from_slice(&ethertype.to_be_bytes());
    let ip = &mut out[14..14 + ip_len];
    match (e.src_ip, e.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = udp_len.checked_add(20).ok_or(wire::WireError::Malformed)?;
            ip[..12].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0, 0, 64, wire::proto::UDP, 0, 0]);
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip[12..16].copy_from_slice(&s.octets());
            ip[16..20].copy_from_slice(&d.octets());
            // A fixed length lets the sum unroll.
            let c = checksum::compute(&ip[..20]);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ipv6Repr::simple(s, d, wire::proto::UDP, usize::from(udp_len)).emit(ip)?;
        }
        _ => return Err(wire::WireError::Malformed),
    }
    let u = &mut out[14 + ip_len..];
    u[0..2].copy_from_slice(&src_port.to_be_bytes());
    u[2..4].copy_from_slice(&e.udp_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    u[6..8].fill(0);
    VxlanRepr { vni: e.vni }.emit(&mut u[8..])?;
    if e.src_ip.is_ipv6() {
        let at = 14 + ip_len;
        let seg = &frame.bytes()[at..];
        let c = checksum::l4(e.src_ip, e.dst_ip, wire::proto::UDP, seg);
        let c = if c == 0 { 0xffff } else { c };
        frame.bytes_mut()[at + 6..at + 8].copy_from_slice(&c.to_be_bytes());
    }
    Ok(())
}
