//! The engine's one-pass parse of a frame: where each header starts and the fields the flow key
//! and the layers need. Built on the `wire` views, so it inherits their bounds checks.

use crate::encap::Encap;
use crate::headers::{FlowKey, Headers};
use crate::tcp_state::TcpMark;
use crate::wire::{
    self, EtherType, EthernetFrame, Icmpv4Packet, Icmpv6Packet, Ipv4Packet, Ipv6Packet, MacAddr,
    TcpFlags, TcpPacket, UdpPacket, VxlanPacket, WireError, icmpv4, icmpv6, proto,
};
use std::net::{IpAddr, Ipv4Addr};

/// What follows the IP header, as far as the engine cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum L4Kind {
    /// TCP with its flags.
    Tcp { flags: u8 },
    /// UDP; `checksum` is false when the (IPv4) checksum field is zero.
    Udp { checksum: bool },
    /// ICMP or ICMPv6 echo request/reply; the identifier is in both ports.
    IcmpEcho,
    /// An ICMP error embedding the offending packet's headers (boxed: errors are rare, and
    /// keeping `Parsed` small keeps the fast path from copying it around).
    IcmpError(Box<Embedded>),
    /// Neighbour discovery (ICMPv6 133-137), handled at layer 2.
    NeighborDiscovery { msg_type: u8 },
    /// Another ICMP message.
    IcmpOther,
    /// No L4 header the engine reads: a later fragment or another protocol.
    Opaque,
}

/// The packet embedded in an ICMP error: its IP header offset and the fields NAT rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Embedded {
    /// Offset of the embedded IP header in the frame.
    pub l3: usize,
    /// Offset of the embedded L4 header (its first 8 bytes at least are present).
    pub l4: usize,
    /// True if the L4 header is absent (the error quotes fewer than 8 bytes of it).
    pub truncated: bool,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

/// Where a fragment of a fragmented datagram stands: its datagram's identification, and
/// whether it is a later fragment (no L4 header) or the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fragment {
    pub ident: u32,
    pub later: bool,
}

/// Outer VXLAN headers of a frame addressed to one of this switch's provider addresses: only
/// what the fast path needs; `arrival_encap` reads the addresses when the slow path wants them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OuterInfo {
    /// Bytes of outer headers before the inner Ethernet frame.
    pub len: usize,
    /// The VXLAN network identifier.
    pub vni: u32,
}

/// The kind of frame, by EtherType.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// IPv4 or IPv6.
    Ip,
    /// ARP.
    Arp,
    /// Anything else; forwarded at layer 2 only.
    Other,
}

/// A parsed frame: offsets into the frame bytes and the fields the engine uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub outer: Option<OuterInfo>,
    /// Offset of the (inner) Ethernet header.
    pub eth: usize,
    pub kind: Kind,
    /// Offset of the IP header (Kind::Ip) or ARP packet (Kind::Arp).
    pub l3: usize,
    /// Offset of the L4 header; meaningful unless `l4_kind` is `Opaque`.
    pub l4: usize,
    pub l4_kind: L4Kind,
    pub headers: Headers,
    /// Set for fragments of a fragmented datagram.
    pub fragment: Option<Fragment>,
}

impl Parsed {
    /// The VNI of an encapsulated frame, 0 otherwise.
    #[inline(always)]
    pub fn vni(&self) -> u32 {
        self.outer.map_or(0, |o| o.vni)
    }

    /// The flow key of this packet entering at `port`. An ICMP error belongs to the connection
    /// of the packet it quotes, travelling the other way (the error goes back to its sender).
    #[inline(always)]
    pub fn flow_key(&self, port: u16) -> FlowKey {
        match &self.l4_kind {
            L4Kind::IcmpError(e) => FlowKey {
                port,
                vni: self.vni(),
                proto: e.proto,
                src: e.dst,
                dst: e.src,
                src_port: e.dst_port,
                dst_port: e.src_port,
            },
            _ => FlowKey::of(port, self.vni(), &self.headers),
        }
    }

    /// TCP flags, 0 for other protocols.
    pub fn tcp_flags(&self) -> u8 {
        match self.l4_kind {
            L4Kind::Tcp { flags } => flags,
            _ => 0,
        }
    }
}

/// What the parser needs to know about the switch: which UDP port is VXLAN and which
/// addresses are this host's provider addresses (only VXLAN to those is decapsulated).
pub(crate) struct ParseContext<'a> {
    pub vxlan_port: u16,
    pub provider_addrs: &'a [IpAddr],
}

/// Parses a frame; VXLAN to a provider address is looked through to the inner frame.
#[inline]
pub(crate) fn parse(bytes: &[u8], cx: &ParseContext<'_>) -> Result<Parsed, WireError> {
    let mut p = Parsed::at(0);
    parse_into(bytes, cx, &mut p)?;
    Ok(p)
}

/// `parse` into a caller's `Parsed`, which the fast path keeps on its stack: the struct is
/// filled in place rather than moved through `Result`s.
#[inline]
pub(crate) fn parse_into(
    bytes: &[u8],
    cx: &ParseContext<'_>,
    p: &mut Parsed,
) -> Result<(), WireError> {
    if plain_ipv4(bytes, cx.vxlan_port, p) {
        return Ok(());
    }
    parse_full(bytes, cx, p)
}

/// The parse of any frame, header by header through the checked views.
fn parse_full(bytes: &[u8], cx: &ParseContext<'_>, p: &mut Parsed) -> Result<(), WireError> {
    fill(bytes, p)?;
    if let Some(outer) = vxlan_outer(bytes, p, cx)? {
        *p = Parsed::at(outer.len);
        fill(bytes, p)?;
        p.outer = Some(outer);
    }
    Ok(())
}

/// The frame nearly every packet is, read in one pass: untagged Ethernet, IPv4 (options
/// allowed) that is not a fragment, and TCP, or UDP not to the VXLAN port. The fast path works
/// from this alone; `parse_into` turns it into the same `Parsed` the full parse gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plain {
    pub dst_mac: MacAddr,
    pub src_mac: MacAddr,
    /// Source and destination address, as the wire holds them (the flow record keeps them so,
    /// and compares them as one word).
    pub addrs: [u8; 8],
    pub proto: u8,
    /// Source and destination port, as the wire holds them.
    pub ports: [u8; 4],
    /// Offset of the TCP or UDP header (the IPv4 header is at 14).
    pub l4: usize,
    pub l4_kind: PlainL4,
}

/// The L4 header of a [`Plain`] frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlainL4 {
    Tcp {
        flags: u8,
    },
    /// `checksum` is false when the checksum field is zero (none sent).
    Udp {
        checksum: bool,
    },
}

impl Plain {
    /// The source address.
    #[inline(always)]
    pub fn src(&self) -> Ipv4Addr {
        let [a, b, c, d, ..] = self.addrs;
        Ipv4Addr::new(a, b, c, d)
    }

    /// The destination address.
    #[inline(always)]
    pub fn dst(&self) -> Ipv4Addr {
        let [.., a, b, c, d] = self.addrs;
        Ipv4Addr::new(a, b, c, d)
    }

    /// The source port.
    #[inline(always)]
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.ports[0], self.ports[1]])
    }

    /// The destination port.
    #[inline(always)]
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.ports[2], self.ports[3]])
    }

    /// TCP flags, 0 for UDP.
    #[inline(always)]
    pub fn tcp_flags(&self) -> u8 {
        match self.l4_kind {
            PlainL4::Tcp { flags } => flags,
            PlainL4::Udp { .. } => 0,
        }
    }
}

/// Reads a [`Plain`] frame with one length check per header instead of the views' checks
/// field by field; `None` for any other frame, which the full parse then reads (the property
/// test `plain_reads_as_the_full_parse` holds the two together).
#[inline(always)]
pub(crate) fn plain(bytes: &[u8], vxlan_port: u16) -> Option<Plain> {
    let h = bytes.first_chunk::<34>()?;
    // Constant indexes into the 34-byte array: no bounds checks.
    if h[12..14] != [8, 0] || h[14] >> 4 != 4 {
        return None;
    }
    let hl = usize::from(h[14] & 0x0f) * 4;
    let end = 14 + usize::from(u16::from_be_bytes([h[16], h[17]]));
    // More fragments, or an offset: a fragment.
    let fragment = u16::from_be_bytes([h[20], h[21]]) & 0x3fff != 0;
    if hl < 20 || end < 14 + hl || fragment {
        return None;
    }
    let l4 = 14 + hl;
    let seg = bytes.get(l4..end)?;
    let proto = h[23];
    let (ports, l4_kind) = match proto {
        proto::TCP => {
            let t = seg.first_chunk::<20>()?;
            let thl = usize::from(t[12] >> 4) * 4;
            if thl < 20 || thl > seg.len() {
                return None;
            }
            (*t.first_chunk::<4>()?, PlainL4::Tcp { flags: t[13] })
        }
        proto::UDP => {
            let u = seg.first_chunk::<8>()?;
            let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
            if len < 8 || len > seg.len() || u16::from_be_bytes([u[2], u[3]]) == vxlan_port {
                return None;
            }
            let checksum = u[6..8] != [0, 0];
            (*u.first_chunk::<4>()?, PlainL4::Udp { checksum })
        }
        _ => return None,
    };
    Some(Plain {
        dst_mac: MacAddr([h[0], h[1], h[2], h[3], h[4], h[5]]),
        src_mac: MacAddr([h[6], h[7], h[8], h[9], h[10], h[11]]),
        addrs: *h[26..].first_chunk::<8>()?,
        proto,
        ports,
        l4,
        l4_kind,
    })
}

/// Fills `p` (made by `Parsed::at(0)`) from a [`Plain`] frame as `fill` would; false, leaving
/// `p` as it was, for any other frame.
#[inline(always)]
fn plain_ipv4(bytes: &[u8], vxlan_port: u16, p: &mut Parsed) -> bool {
    let Some(x) = plain(bytes, vxlan_port) else {
        return false;
    };
    p.headers = Headers {
        dst_mac: x.dst_mac,
        src_mac: x.src_mac,
        src_ip: IpAddr::V4(x.src()),
        dst_ip: IpAddr::V4(x.dst()),
        proto: x.proto,
        src_port: x.src_port(),
        dst_port: x.dst_port(),
    };
    p.kind = Kind::Ip;
    p.l3 = 14;
    p.l4 = x.l4;
    p.l4_kind = match x.l4_kind {
        PlainL4::Tcp { flags } => L4Kind::Tcp { flags },
        PlainL4::Udp { checksum } => L4Kind::Udp { checksum },
    };
    true
}

/// Recognises VXLAN addressed to a provider address and reads its outer headers.
#[inline]
fn vxlan_outer(
    bytes: &[u8],
    p: &Parsed,
    cx: &ParseContext<'_>,
) -> Result<Option<OuterInfo>, WireError> {
    let is_vxlan = matches!(p.l4_kind, L4Kind::Udp { .. }) && p.headers.dst_port == cx.vxlan_port;
    if !is_vxlan || !cx.provider_addrs.contains(&p.headers.dst_ip) {
        return Ok(None);
    }
    let vx = VxlanPacket::new_checked(&bytes[p.l4 + 8..])?;
    Ok(Some(OuterInfo {
        len: p.l4 + 16,
        vni: vx.vni(),
    }))
}

/// Where a TCP segment stands in its sender's sequence space (`None` for anything else). Read
/// only for a SYN or a FIN, so not in `Parsed`.
pub(crate) fn tcp_mark(bytes: &[u8], p: &Parsed) -> Option<TcpMark> {
    if !matches!(p.l4_kind, L4Kind::Tcp { .. }) {
        return None;
    }
    let ip = bytes.get(p.l3..)?;
    let end = match p.headers.src_ip {
        IpAddr::V4(_) => p.l3 + Ipv4Packet::new_checked(ip).ok()?.total_len(),
        IpAddr::V6(_) => {
            p.l3 + wire::ipv6::HEADER_LEN + Ipv6Packet::new_checked(ip).ok()?.payload_len()
        }
    };
    let t = TcpPacket::new_checked(bytes.get(p.l4..end)?).ok()?;
    let flags = t.flags();
    let len = t.payload().len() as u32
        + u32::from(flags.has(TcpFlags::SYN))
        + u32::from(flags.has(TcpFlags::FIN));
    Some(TcpMark {
        seq: t.seq(),
        end: t.seq().wrapping_add(len),
        tsval: t.timestamp().map(|(v, _)| v),
    })
}

/// The place of a SYN opening a connection (no ACK) in its sequence space, for anything else
/// `None`.
pub(crate) fn opening_syn(bytes: &[u8], p: &Parsed) -> Option<TcpMark> {
    let f = TcpFlags(p.tcp_flags());
    if f.has(TcpFlags::SYN) && !f.has(TcpFlags::ACK) {
        tcp_mark(bytes, p)
    } else {
        None
    }
}

/// The outer headers of an encapsulated frame as they arrived (for the connection's record, so
/// that replies can be encapsulated back the same way).
pub(crate) fn arrival_encap(bytes: &[u8], p: &Parsed) -> Option<Encap> {
    let o = p.outer?;
    let outer = parse_at(bytes, 0).ok()?;
    let h = &outer.headers;
    Some(Encap {
        vni: o.vni,
        src_mac: h.src_mac,
        dst_mac: h.dst_mac,
        src_ip: h.src_ip,
        dst_ip: h.dst_ip,
        udp_port: h.dst_port,
    })
}

impl Parsed {
    /// An empty parse of a frame whose Ethernet header starts at `eth`.
    pub(crate) fn at(eth: usize) -> Parsed {
        Parsed {
            outer: None,
            eth,
            kind: Kind::Other,
            l3: eth,
            l4: 0,
            l4_kind: L4Kind::Opaque,
            headers: Headers::empty(),
            fragment: None,
        }
    }
}

/// Parses the Ethernet frame starting at `eth`.
fn parse_at(bytes: &[u8], eth: usize) -> Result<Parsed, WireError> {
    let mut p = Parsed::at(eth);
    fill(bytes, &mut p)?;
    Ok(p)
}

/// Fills `p` (created by `Parsed::at`) from the Ethernet frame at `p.eth`.
#[inline]
fn fill(bytes: &[u8], p: &mut Parsed) -> Result<(), WireError> {
    let f = EthernetFrame::new_checked(&bytes[p.eth..])?;
    p.headers.src_mac = f.src();
    p.headers.dst_mac = f.dst();
    p.l3 = p.eth + f.header_len();
    match f.ethertype() {
        EtherType::IPV4 => parse_ipv4(bytes, p),
        EtherType::IPV6 => parse_ipv6(bytes, p),
        EtherType::ARP => {
            p.kind = Kind::Arp;
            Ok(())
        }
        _ => Ok(()),
    }
}

#[inline]
fn parse_ipv4(bytes: &[u8], p: &mut Parsed) -> Result<(), WireError> {
    let ip = Ipv4Packet::new_checked(&bytes[p.l3..])?;
    p.kind = Kind::Ip;
    p.headers.src_ip = IpAddr::V4(ip.src());
    p.headers.dst_ip = IpAddr::V4(ip.dst());
    p.headers.proto = ip.protocol();
    if ip.more_frags() || ip.is_later_fragment() {
        p.fragment = Some(Fragment {
            ident: u32::from(ip.ident()),
            later: ip.is_later_fragment(),
        });
    }
    if ip.is_later_fragment() {
        return Ok(());
    }
    p.l4 = p.l3 + ip.header_len();
    let end = p.l3 + ip.total_len();
    parse_l4(&bytes[..end], p)
}

#[inline]
fn parse_ipv6(bytes: &[u8], p: &mut Parsed) -> Result<(), WireError> {
    let ip = Ipv6Packet::new_checked(&bytes[p.l3..])?;
    p.kind = Kind::Ip;
    p.headers.src_ip = IpAddr::V6(ip.src());
    p.headers.dst_ip = IpAddr::V6(ip.dst());
    let ul = ip.upper_layer()?;
    p.headers.proto = ul.protocol;
    p.fragment = ul.fragment_id.map(|ident| Fragment {
        ident,
        later: ul.later_fragment,
    });
    if ul.later_fragment {
        return Ok(());
    }
    p.l4 = p.l3 + ul.offset;
    let end = p.l3 + wire::ipv6::HEADER_LEN + ip.payload_len();
    parse_l4(&bytes[..end], p)
}

/// Reads ports, flags or the ICMP kind. `bytes` ends where the IP datagram ends.
#[inline]
fn parse_l4(bytes: &[u8], p: &mut Parsed) -> Result<(), WireError> {
    let seg = &bytes[p.l4..];
    let h = &mut p.headers;
    p.l4_kind = match h.proto {
        proto::TCP => {
            let t = TcpPacket::new_checked(seg)?;
            (h.src_port, h.dst_port) = (t.src_port(), t.dst_port());
            L4Kind::Tcp { flags: t.flags().0 }
        }
        // The first fragment of a datagram holds only part of what the UDP length counts.
        proto::UDP if p.fragment.is_some() => {
            wire::need(seg, wire::udp::HEADER_LEN)?;
            (h.src_port, h.dst_port) = (wire::be16(seg, 0), wire::be16(seg, 2));
            L4Kind::Udp {
                checksum: wire::be16(seg, 6) != 0,
            }
        }
        proto::UDP => {
            let u = UdpPacket::new_checked(seg)?;
            (h.src_port, h.dst_port) = (u.src_port(), u.dst_port());
            L4Kind::Udp {
                checksum: u.checksum() != 0,
            }
        }
        proto::ICMP => {
            let i = Icmpv4Packet::new_checked(seg)?;
            match i.msg_type() {
                icmpv4::ECHO_REQUEST | icmpv4::ECHO_REPLY => {
                    (h.src_port, h.dst_port) = (i.echo_ident(), i.echo_ident());
                    L4Kind::IcmpEcho
                }
                t if icmpv4::is_error(t) => embedded(bytes, p.l4 + 8)?,
                _ => L4Kind::IcmpOther,
            }
        }
        proto::ICMPV6 => {
            let i = Icmpv6Packet::new_checked(seg)?;
            match i.msg_type() {
                icmpv6::ECHO_REQUEST | icmpv6::ECHO_REPLY => {
                    (h.src_port, h.dst_port) = (i.echo_ident(), i.echo_ident());
                    L4Kind::IcmpEcho
                }
                t if icmpv6::is_error(t) => embedded(bytes, p.l4 + 8)?,
                t if icmpv6::is_neighbor_discovery(t) => L4Kind::NeighborDiscovery { msg_type: t },
                _ => L4Kind::IcmpOther,
            }
        }
        _ => L4Kind::Opaque,
    };
    Ok(())
}

/// Reads the packet quoted by an ICMP error. The quote is usually cut short, so the embedded IP
/// header is read field by field rather than through `new_checked` (whose total length check
/// would fail); only the bytes actually present are used.
fn embedded(bytes: &[u8], l3: usize) -> Result<L4Kind, WireError> {
    let b = bytes.get(l3..).ok_or(WireError::Truncated)?;
    wire::need(b, 1)?;
    let (src, dst, proto, hl) = match b[0] >> 4 {
        4 => {
            wire::need(b, 20)?;
            let hl = usize::from(b[0] & 0x0f) * 4;
            if hl < 20 {
                return Err(WireError::Malformed);
            }
            let s: [u8; 4] = [b[12], b[13], b[14], b[15]];
            let d: [u8; 4] = [b[16], b[17], b[18], b[19]];
            (IpAddr::from(s), IpAddr::from(d), b[9], hl)
        }
        6 => {
            wire::need(b, 40)?;
            let s = wire::ipv6::addr_at(b, 8);
            let d = wire::ipv6::addr_at(b, 24);
            (IpAddr::V6(s), IpAddr::V6(d), b[6], 40)
        }
        _ => return Err(WireError::Malformed),
    };
    let l4 = l3 + hl;
    let quote = bytes.get(l4..).unwrap_or(&[]);
    let truncated = quote.len() < 8;
    let (mut src_port, mut dst_port) = (0, 0);
    if !truncated {
        match proto {
            proto::TCP | proto::UDP => {
                src_port = wire::be16(quote, 0);
                dst_port = wire::be16(quote, 2);
            }
            proto::ICMP | proto::ICMPV6 => {
                src_port = wire::be16(quote, 4);
                dst_port = src_port;
            }
            _ => {}
        }
    }
    Ok(L4Kind::IcmpError(Box::new(Embedded {
        l3,
        l4,
        truncated,
        src,
        dst,
        proto,
        src_port,
        dst_port,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A TCP or UDP frame with an IPv4 header of `hl` bytes and 6 bytes of payload, then bytes
    /// overwritten at chosen places and the frame cut short or padded by `extra` bytes: every
    /// check of the plain reading gets exercised.
    fn frame(hl: usize, tcp: bool, pokes: &[(usize, u8)], extra: isize) -> Vec<u8> {
        let l4_len = if tcp { 20 } else { 8 };
        let total = hl + l4_len + 6;
        let mut b = vec![0u8; 14 + total];
        b[..12].copy_from_slice(&[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2]);
        b[12..14].copy_from_slice(&[8, 0]);
        b[14] = 0x40 | (hl / 4) as u8;
        b[16..18].copy_from_slice(&(total as u16).to_be_bytes());
        b[23] = if tcp { proto::TCP } else { proto::UDP };
        b[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        let l4 = 14 + hl;
        b[l4..l4 + 4].copy_from_slice(&[0x30, 0x39, 0, 80]);
        if tcp {
            b[l4 + 12] = 0x50;
            b[l4 + 13] = 0x12;
        } else {
            b[l4 + 4..l4 + 6].copy_from_slice(&14u16.to_be_bytes());
            b[l4 + 6] = 0xab;
        }
        for &(at, v) in pokes {
            let n = b.len();
            b[at % n] = v;
        }
        let len = (b.len() as isize + extra).max(1) as usize;
        b.resize(len, 0);
        b
    }

    proptest! {
        #[test]
        fn plain_reads_as_the_full_parse(
            hl in (5usize..=15).prop_map(|w| w * 4),
            tcp in any::<bool>(),
            pokes in proptest::collection::vec(
                (0usize..80, prop_oneof![any::<u8>(), Just(0u8), Just(0x45u8), Just(0xffu8)]),
                0..4,
            ),
            extra in -30isize..30,
            to_vxlan_port in any::<bool>(),
        ) {
            let b = frame(hl, tcp, &pokes, extra);
            // The frame's destination port is 80: as the VXLAN port, UDP to it is declined.
            let vxlan_port = if to_vxlan_port { 80 } else { wire::VXLAN_PORT };
            let provider = [IpAddr::from([10, 0, 0, 2])];
            let cx = ParseContext { vxlan_port, provider_addrs: &provider };
            let mut plain = Parsed::at(0);
            if plain_ipv4(&b, vxlan_port, &mut plain) {
                let mut full = Parsed::at(0);
                prop_assert_eq!(parse_full(&b, &cx, &mut full), Ok(()));
                prop_assert_eq!(plain, full);
            } else {
                prop_assert_eq!(plain, Parsed::at(0), "declined and left untouched");
            }
        }
    }

    #[test]
    fn plain_takes_the_common_frames_and_declines_vxlan() {
        for tcp in [true, false] {
            for hl in [20, 24, 60] {
                for extra in [0, 18] {
                    let b = frame(hl, tcp, &[], extra);
                    assert!(plain_ipv4(&b, wire::VXLAN_PORT, &mut Parsed::at(0)));
                }
            }
        }
        assert!(!plain_ipv4(
            &frame(20, false, &[], 0),
            80,
            &mut Parsed::at(0)
        ));
        assert!(plain_ipv4(&frame(20, true, &[], 0), 80, &mut Parsed::at(0)));
    }
}
