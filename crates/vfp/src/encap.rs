//! VXLAN encapsulation: the outer headers a packet is wrapped in to cross the underlay from one
//! host's provider address (PA) to another's, and the code that adds and removes them.

use crate::frame::Frame;
use crate::wire::{
    self, EtherType, EthernetRepr, Ipv4Repr, Ipv6Repr, MacAddr, VxlanRepr, checksum,
};
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
/// header gets a full checksum (20 bytes, cheaper than tracking); the outer UDP checksum is zero
/// over IPv4 (RFC 7348 allows it) and computed over IPv6, where zero is not allowed by default.
pub fn push(frame: &mut Frame, e: &Encap, src_port: u16) -> Result<(), wire::WireError> {
    let inner_len = frame.len();
    let udp_len = 8 + 8 + inner_len;
    let n = e.overhead();
    let (ethertype, ip_len) = match (e.src_ip, e.dst_ip) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (EtherType::IPV4, 20),
        (IpAddr::V6(_), IpAddr::V6(_)) => (EtherType::IPV6, 40),
        _ => return Err(wire::WireError::Malformed),
    };
    let out = frame.push_front(n);
    EthernetRepr {
        src: e.src_mac,
        dst: e.dst_mac,
        vlan_tci: None,
        ethertype,
    }
    .emit(out)?;
    match (e.src_ip, e.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut r = Ipv4Repr::simple(s, d, wire::proto::UDP, udp_len);
            r.dont_frag = false;
            r.emit(&mut out[14..])?
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ipv6Repr::simple(s, d, wire::proto::UDP, udp_len).emit(&mut out[14..])?
        }
        _ => return Err(wire::WireError::Malformed),
    }
    let u = 14 + ip_len;
    let len16 = u16::try_from(udp_len).map_err(|_| wire::WireError::Malformed)?;
    out[u..u + 2].copy_from_slice(&src_port.to_be_bytes());
    out[u + 2..u + 4].copy_from_slice(&e.udp_port.to_be_bytes());
    out[u + 4..u + 6].copy_from_slice(&len16.to_be_bytes());
    out[u + 6..u + 8].fill(0);
    VxlanRepr { vni: e.vni }.emit(&mut out[u + 8..])?;
    if e.src_ip.is_ipv6() {
        let seg = &frame.bytes()[u..];
        let c = checksum::l4(e.src_ip, e.dst_ip, wire::proto::UDP, seg);
        let c = if c == 0 { 0xffff } else { c };
        frame.bytes_mut()[u + 6..u + 8].copy_from_slice(&c.to_be_bytes());
    }
    Ok(())
}
