//! VXLAN encapsulation: the outer headers a packet is wrapped in to cross the underlay from one
//! host's provider address (PA) to another's, and the code that adds and removes them.

use crate::frame::Frame;
use crate::wire::{self, EtherType, Ipv6Repr, MacAddr, VxlanRepr, checksum};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

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
/// header gets a full checksum; the outer UDP checksum is zero over IPv4 (RFC 7348 allows it)
/// and computed over IPv6, where zero is not allowed by default. Written field by field rather
/// than through the `Repr`s: this runs once per encapsulated packet.
pub fn push(frame: &mut Frame, e: &Encap, src_port: u16) -> Result<(), wire::WireError> {
    let inner_len = frame.len();
    let udp_len = u16::try_from(16 + inner_len).map_err(|_| wire::WireError::Malformed)?;
    if e.vni > 0x00ff_ffff {
        return Err(wire::WireError::Malformed);
    }
    match (e.src_ip, e.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = udp_len.checked_add(20).ok_or(wire::WireError::Malformed)?;
            let out = frame
                .push_front(OUTER_V4)
                .first_chunk_mut::<OUTER_V4>()
                .ok_or(wire::WireError::Truncated)?;
            *out = outer_v4(e, s.octets(), d.octets(), total, src_port);
            Ok(())
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => push_v6(frame, e, s, d, src_port, udp_len),
        _ => Err(wire::WireError::Malformed),
    }
}

/// `push` over IPv6 (kept out of line: the IPv4 case is the one inlined into the fast path).
#[inline(never)]
fn push_v6(
    frame: &mut Frame,
    e: &Encap,
    s: Ipv6Addr,
    d: Ipv6Addr,
    src_port: u16,
    udp_len: u16,
) -> Result<(), wire::WireError> {
    let out = frame.push_front(14 + 40 + 16);
    out[0..6].copy_from_slice(&e.dst_mac.0);
    out[6..12].copy_from_slice(&e.src_mac.0);
    out[12..14].copy_from_slice(&EtherType::IPV6.to_be_bytes());
    Ipv6Repr::simple(s, d, wire::proto::UDP, usize::from(udp_len)).emit(&mut out[14..54])?;
    udp_vxlan(&mut out[54..70], e, src_port, udp_len)?;
    let seg = &frame.bytes()[54..];
    let c = checksum::l4(e.src_ip, e.dst_ip, wire::proto::UDP, seg);
    let c = if c == 0 { 0xffff } else { c };
    frame.data_mut()[60..62].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// Bytes of outer headers over IPv4: Ethernet, IPv4 without options, UDP, VXLAN.
const OUTER_V4: usize = 14 + 20 + 8 + 8;

/// The words of the outer IPv4 header its checksum covers, but its total length, summed in
/// machine byte order: the one's complement sum does not depend on it (RFC 1071 §2(B)), and
/// the addresses are then used as their bytes stand. Version/IHL 0x45, TTL 64 and protocol UDP
/// are the header's only other nonzero words.
#[inline(always)]
fn outer_v4_sum(s: [u8; 4], d: [u8; 4]) -> u32 {
    let (s32, d32) = (u32::from_ne_bytes(s), u32::from_ne_bytes(d));
    u32::from(u16::from_ne_bytes([0x45, 0]))
        + u32::from(u16::from_ne_bytes([64, wire::proto::UDP]))
        + (s32 >> 16)
        + (s32 & 0xffff)
        + (d32 >> 16)
        + (d32 & 0xffff)
}

/// Writes the fields of the outer headers over IPv4 that change from packet to packet: the IP
/// total length and checksum (from `sum`, see `outer_v4_sum`), the UDP source port and length.
#[inline(always)]
fn outer_v4_lengths(h: &mut [u8; OUTER_V4], sum: u32, total: u16, src_port: u16) {
    let c = checksum::finish(sum + u32::from(u16::from_ne_bytes(total.to_be_bytes())));
    h[16..18].copy_from_slice(&total.to_be_bytes());
    h[24..26].copy_from_slice(&c.to_ne_bytes());
    h[34..36].copy_from_slice(&src_port.to_be_bytes());
    h[38..40].copy_from_slice(&(total - 20).to_be_bytes());
}

/// The outer headers over IPv4, built as one array (written to the frame at once).
#[inline(always)]
fn outer_v4(e: &Encap, s: [u8; 4], d: [u8; 4], total: u16, src_port: u16) -> [u8; OUTER_V4] {
    let mut h = [0u8; OUTER_V4];
    h[0..6].copy_from_slice(&e.dst_mac.0);
    h[6..12].copy_from_slice(&e.src_mac.0);
    h[12..14].copy_from_slice(&EtherType::IPV4.to_be_bytes());
    h[14] = 0x45;
    h[22] = 64;
    h[23] = wire::proto::UDP;
    h[26..30].copy_from_slice(&s);
    h[30..34].copy_from_slice(&d);
    // UDP (its checksum zero), then VXLAN: the I flag, and the VNI in the top 24 bits of the
    // second word.
    h[36..38].copy_from_slice(&e.udp_port.to_be_bytes());
    h[42] = 0x08;
    h[46..50].copy_from_slice(&(e.vni << 8).to_be_bytes());
    outer_v4_lengths(&mut h, outer_v4_sum(s, d), total, src_port);
    h
}

/// Outer IPv4 headers built for the tunnels in use, so that an encapsulated packet on the fast
/// path copies 50 bytes and fills in its lengths, rather than building the headers field by
/// field. Direct-mapped by the `Encap`'s address; each entry holds the `Encap` (an `Arc`
/// clone), so that address cannot be reused by another one while it is cached.
#[derive(Debug)]
pub(crate) struct OuterCache {
    entries: Vec<Option<Outer>>,
}

/// One cached tunnel: its `Encap`, its outer headers (lengths, checksum and source port not
/// yet filled in) and the sum of its IPv4 header (see `outer_v4_sum`).
#[derive(Debug)]
struct Outer {
    encap: std::sync::Arc<Encap>,
    bytes: [u8; OUTER_V4],
    sum: u32,
}

/// Entries in the cache: more than the remote hosts a node sends to at once in most clusters,
/// 4.5 KiB.
const OUTER_CACHE: usize = 64;

impl Default for OuterCache {
    fn default() -> Self {
        OuterCache {
            entries: (0..OUTER_CACHE).map(|_| None).collect(),
        }
    }
}

impl OuterCache {
    /// `push` for an IPv4 tunnel, from the cached outer headers of `e` (built on first use).
    /// The bytes are those `push` writes (the test `cached_outer_headers_are_pushs`).
    #[inline(always)]
    pub(crate) fn push(
        &mut self,
        frame: &mut Frame,
        e: &std::sync::Arc<Encap>,
        src_port: u16,
    ) -> Result<(), wire::WireError> {
        let at = (std::sync::Arc::as_ptr(e) as usize >> 6) % OUTER_CACHE;
        let Some(entry) = self.entries.get_mut(at) else {
            return push(frame, e, src_port);
        };
        let outer = match entry {
            Some(o) if std::sync::Arc::ptr_eq(&o.encap, e) => o,
            _ => match Outer::of(e) {
                Some(o) => entry.insert(o),
                None => return push(frame, e, src_port),
            },
        };
        // The total fits 16 bits with the 36 bytes of IPv4, UDP and VXLAN headers added.
        let total = u16::try_from(frame.len() + 36).map_err(|_| wire::WireError::Malformed)?;
        let h = frame
            .push_front_array::<OUTER_V4>()
            .ok_or(wire::WireError::Truncated)?;
        *h = outer.bytes;
        outer_v4_lengths(h, outer.sum, total, src_port);
        Ok(())
    }
}

impl Outer {
    /// The entry for `e`; `None` for a tunnel over IPv6 or with a VNI over 24 bits, which
    /// `push` handles (or refuses) itself.
    fn of(e: &std::sync::Arc<Encap>) -> Option<Outer> {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (e.src_ip, e.dst_ip) else {
            return None;
        };
        if e.vni > 0x00ff_ffff {
            return None;
        }
        let (s, d) = (s.octets(), d.octets());
        Some(Outer {
            encap: e.clone(),
            bytes: outer_v4(e, s, d, 20, 0),
            sum: outer_v4_sum(s, d),
        })
    }
}

/// The UDP header (checksum zero, filled later over IPv6) and the VXLAN header.
fn udp_vxlan(u: &mut [u8], e: &Encap, src_port: u16, udp_len: u16) -> Result<(), wire::WireError> {
    wire::need(u, 16)?;
    u[0..2].copy_from_slice(&src_port.to_be_bytes());
    u[2..4].copy_from_slice(&e.udp_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    u[6..8].fill(0);
    VxlanRepr { vni: e.vni }.emit(&mut u[8..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Ipv4Packet, Ipv4Repr, UdpPacket, VxlanPacket};

    #[test]
    fn outer_ipv4_headers_read_back_with_a_valid_checksum() {
        let e = Encap {
            vni: 0x00ab_cdef,
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src_ip: "192.168.1.5".parse().unwrap(),
            dst_ip: "192.168.255.254".parse().unwrap(),
            udp_port: 4789,
        };
        for inner in [0usize, 1, 54, 1500] {
            let mut f = Frame::new(&vec![0x5a; inner]);
            push(&mut f, &e, 50_000).unwrap();
            let b = f.bytes();
            assert_eq!(b.len(), inner + e.overhead());
            assert_eq!(&b[0..6], &e.dst_mac.0);
            assert_eq!(&b[6..12], &e.src_mac.0);
            let ip = Ipv4Packet::new_checked(&b[14..]).unwrap();
            let r = Ipv4Repr::parse(&ip).expect("a valid header checksum");
            assert_eq!(
                (r.ttl, r.protocol, r.dont_frag),
                (64, wire::proto::UDP, false)
            );
            assert_eq!(IpAddr::V4(r.src), e.src_ip);
            assert_eq!(IpAddr::V4(r.dst), e.dst_ip);
            assert_eq!(r.payload_len, 16 + inner);
            let u = UdpPacket::new_checked(ip.payload()).unwrap();
            assert_eq!(
                (u.src_port(), u.dst_port(), u.checksum()),
                (50_000, 4789, 0)
            );
            let v = VxlanPacket::new_checked(u.payload()).unwrap();
            assert_eq!(v.vni(), e.vni);
            assert!(v.payload().iter().all(|&x| x == 0x5a));
        }
        let too_big = Encap { vni: 1 << 24, ..e };
        assert!(push(&mut Frame::new(&[0; 54]), &too_big, 1).is_err());
    }

    #[test]
    fn cached_outer_headers_are_pushs() {
        let mut cache = OuterCache::default();
        let encaps: Vec<std::sync::Arc<Encap>> = (0..200u32)
            .map(|i| {
                std::sync::Arc::new(Encap {
                    vni: i * 77_777 % 0x0100_0000,
                    src_mac: MacAddr([2, 0, 0, 0, (i >> 8) as u8, i as u8]),
                    dst_mac: MacAddr([2, 0, 0, 1, 0, i as u8]),
                    src_ip: IpAddr::from([192, 168, (i >> 8) as u8, i as u8]),
                    dst_ip: IpAddr::from([10, (i * 7) as u8, 255, (i * 13) as u8]),
                    udp_port: 4789 + (i % 3) as u16,
                })
            })
            .collect();
        // Twice round, so that entries are both built and found, and evicted by others.
        for round in 0..2 {
            for (i, e) in encaps.iter().enumerate() {
                let inner = vec![0xa5; (i * 37 + round) % 1500];
                let (mut a, mut b) = (Frame::new(&inner), Frame::new(&inner));
                let port = 49_152 + (i as u16) * 61;
                push(&mut a, e, port).unwrap();
                cache.push(&mut b, e, port).unwrap();
                assert_eq!(a.bytes(), b.bytes(), "tunnel {i}, round {round}");
            }
        }
        // Too long to encapsulate: refused alike.
        let huge = vec![0; 65_500];
        assert!(push(&mut Frame::new(&huge), &encaps[0], 1).is_err());
        assert!(cache.push(&mut Frame::new(&huge), &encaps[0], 1).is_err());
    }
}
