//! Applies a header transposition to frame bytes in place: the one routine both the fast path
//! and the slow path use, so a cached flow rewrites exactly as its first packet did.
//! Every address or port change patches the checksums that cover it incrementally (RFC 1624).

use crate::encap::{self, Encap};
use crate::frame::Frame;
use crate::headers::Headers;
use crate::parse::{Embedded, L4Kind, Parsed};
use crate::wire::{WireError, checksum, proto};
use std::net::IpAddr;

/// Offsets of the packet proper after any outer headers were removed.
#[derive(Clone, Copy)]
pub(crate) struct Offsets {
    pub eth: usize,
    pub l3: usize,
    pub l4: usize,
}

/// Rewrites the frame from its parsed headers to `target`: strips arrival encapsulation, sets
/// MACs, addresses and ports, then adds `outer` (with UDP source port `entropy`) if given.
#[inline]
pub(crate) fn apply(
    frame: &mut Frame,
    p: &Parsed,
    target: &Headers,
    outer: Option<&Encap>,
    entropy: u16,
) -> Result<(), WireError> {
    let o = strip_outer(frame, p);
    match &p.l4_kind {
        L4Kind::IcmpError(e) => rewrite_icmp_error(frame.bytes_mut(), p, o, e, target)?,
        _ => rewrite(frame.bytes_mut(), p, o, target)?,
    }
    if let Some(e) = outer {
        encap::push(frame, e, entropy)?;
    }
    Ok(())
}

fn strip_outer(frame: &mut Frame, p: &Parsed) -> Offsets {
    let base = p.outer.map_or(0, |o| o.len);
    frame.pull_front(base);
    Offsets {
        eth: p.eth - base,
        l3: p.l3 - base,
        l4: p.l4.saturating_sub(base),
    }
}

/// The one's-complement change of the pseudo-header addresses, shared by the IPv4 header
/// checksum and the L4 checksum.
#[inline(always)]
fn write_addrs(b: &mut [u8], l3: usize, cur: &Headers, t: &Headers) -> Result<u32, WireError> {
    let mut d = 0u32;
    match (cur.src_ip, t.src_ip, cur.dst_ip, t.dst_ip) {
        (IpAddr::V4(os), IpAddr::V4(ns), IpAddr::V4(od), IpAddr::V4(nd)) => {
            if os != ns {
                d += checksum::delta_v4(os.octets(), ns.octets());
                b[l3 + 12..l3 + 16].copy_from_slice(&ns.octets());
            }
            if od != nd {
                d += checksum::delta_v4(od.octets(), nd.octets());
                b[l3 + 16..l3 + 20].copy_from_slice(&nd.octets());
            }
            if d != 0 {
                let c = u16::from_be_bytes([b[l3 + 10], b[l3 + 11]]);
                let c = checksum::apply_delta(c, d);
                b[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            }
        }
        (IpAddr::V6(os), IpAddr::V6(ns), IpAddr::V6(od), IpAddr::V6(nd)) => {
            if os != ns {
                d += checksum::delta(&os.octets(), &ns.octets());
                b[l3 + 8..l3 + 24].copy_from_slice(&ns.octets());
            }
            if od != nd {
                d += checksum::delta(&od.octets(), &nd.octets());
                b[l3 + 24..l3 + 40].copy_from_slice(&nd.octets());
            }
        }
        // Translating between address families (NAT64) is not something VFP layers express.
        _ => return Err(WireError::Unsupported),
    }
    Ok(d)
}

/// Patches a 16-bit checksum field at `off` by `d`. UDP's "no checksum" zero stays zero and a
/// result of zero is sent as all ones (RFC 768).
#[inline(always)]
fn patch(b: &mut [u8], off: usize, d: u32, udp: bool) {
    let c = u16::from_be_bytes([b[off], b[off + 1]]);
    let mut n = checksum::apply_delta(c, d);
    if udp && n == 0 {
        n = 0xffff;
    }
    b[off..off + 2].copy_from_slice(&n.to_be_bytes());
}

#[inline(always)]
fn write_port(b: &mut [u8], off: usize, old: u16, new: u16) -> u32 {
    if old == new {
        return 0;
    }
    b[off..off + 2].copy_from_slice(&new.to_be_bytes());
    checksum::delta16(old, new)
}

#[inline]
fn rewrite(b: &mut [u8], p: &Parsed, o: Offsets, t: &Headers) -> Result<(), WireError> {
    let cur = &p.headers;
    if let (IpAddr::V4(s), IpAddr::V4(d)) = (cur.src_ip, cur.dst_ip) {
        let sum = match p.l4_kind {
            L4Kind::Tcp { .. } => Some(Checksum::Tcp),
            L4Kind::Udp { checksum: true } => Some(Checksum::Udp),
            L4Kind::Udp { checksum: false } => Some(Checksum::None),
            _ => None,
        };
        let (s, d) = (s.octets(), d.octets());
        let addrs = [s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3]];
        let (sp, dp) = (cur.src_port.to_be_bytes(), cur.dst_port.to_be_bytes());
        if let Some(sum) = sum
            && let Some(w) = V4Write::to(addrs, [sp[0], sp[1], dp[0], dp[1]], t)
        {
            return write_v4(b, o, &w, sum);
        }
    }
    rewrite_any(b, p, o, t)
}

/// `rewrite` for any packet, field by field in network byte order (the IPv4 TCP/UDP case has
/// its own, `V4Write` and `write_v4`, which the test `the_ipv4_rewrite_writes_what_the_general_one_does`
/// holds to this one).
fn rewrite_any(b: &mut [u8], p: &Parsed, o: Offsets, t: &Headers) -> Result<(), WireError> {
    let cur = &p.headers;
    b[o.eth..o.eth + 6].copy_from_slice(&t.dst_mac.0);
    b[o.eth + 6..o.eth + 12].copy_from_slice(&t.src_mac.0);
    let d = write_addrs(b, o.l3, cur, t)?;
    let l4 = o.l4;
    match p.l4_kind {
        L4Kind::Tcp { .. } => {
            let d = d
                + write_port(b, l4, cur.src_port, t.src_port)
                + write_port(b, l4 + 2, cur.dst_port, t.dst_port);
            if d != 0 {
                patch(b, l4 + 16, d, false);
            }
        }
        L4Kind::Udp { checksum } => {
            let d = d
                + write_port(b, l4, cur.src_port, t.src_port)
                + write_port(b, l4 + 2, cur.dst_port, t.dst_port);
            if checksum && d != 0 {
                patch(b, l4 + 6, d, true);
            }
        }
        L4Kind::IcmpEcho => {
            let di = write_port(b, l4 + 4, cur.src_port, t.src_port);
            // ICMPv4 has no pseudo-header; ICMPv6 does.
            let d = if cur.proto == proto::ICMPV6 {
                d + di
            } else {
                di
            };
            if d != 0 {
                patch(b, l4 + 2, d, false);
            }
        }
        L4Kind::NeighborDiscovery { .. } | L4Kind::IcmpOther
            if cur.proto == proto::ICMPV6 && d != 0 =>
        {
            patch(b, l4 + 2, d, false);
        }
        _ => {}
    }
    Ok(())
}

/// Which L4 checksum covers the addresses and ports a rewrite changes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checksum {
    /// TCP's, at offset 16.
    Tcp,
    /// UDP's, at offset 6.
    Udp,
    /// A UDP datagram sent without a checksum (zero), which stays without.
    None,
}

/// An IPv4 TCP/UDP rewrite as it is written: the new destination and source MACs, source and
/// destination addresses, and source and destination ports, each as the wire holds them, and
/// the changes to the IPv4 header checksum and the L4 checksum (`V4Write::to`). A flow record
/// keeps what makes one for each direction of its connection, so that the fast path writes it
/// without working it out again; the general path makes one per packet (`rewrite`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct V4Write {
    pub macs: [u8; 12],
    pub addrs: [u8; 8],
    pub ports: [u8; 4],
    /// The IPv4 header checksum's change (the addresses) and the L4 checksum's (addresses
    /// and ports), folded to 16 bits, in machine byte order: the one's complement sum is
    /// independent of byte order (RFC 1071 §2(B)), so the bytes written are the same as by
    /// big-endian arithmetic, without swapping every value.
    pub deltas: [u16; 2],
}

/// The one's-complement change of replacing the 16-bit words of `old` with those of `new`
/// (machine byte order), or 0 if they are the same: an unchanged field adds nothing, as in
/// `rewrite_any`, so that a checksum is patched exactly when something it covers changed.
#[inline(always)]
fn field_delta<const N: usize>(old: &[u8; N], new: &[u8; N]) -> u32 {
    if old == new {
        return 0;
    }
    let mut d = 0;
    for i in (0..N).step_by(2) {
        let word = |b: &[u8; N]| u16::from_ne_bytes([b[i], b[i + 1]]);
        d += checksum::delta16(word(old), word(new));
    }
    d
}

impl V4Write {
    /// The rewrite of a packet whose addresses are `addrs` and ports `ports` (source then
    /// destination, as the wire holds them) to the headers `t`; `None` if `t` is not IPv4
    /// (translating between address families is not something VFP layers express).
    #[inline(always)]
    pub(crate) fn to(addrs: [u8; 8], ports: [u8; 4], t: &Headers) -> Option<V4Write> {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (t.src_ip, t.dst_ip) else {
            return None;
        };
        let (s, d) = (s.octets(), d.octets());
        let new_addrs = [s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3]];
        let (sp, dp) = (t.src_port.to_be_bytes(), t.dst_port.to_be_bytes());
        let new_ports = [sp[0], sp[1], dp[0], dp[1]];
        let (dm, sm) = (t.dst_mac.0, t.src_mac.0);
        Some(V4Write {
            macs: [
                dm[0], dm[1], dm[2], dm[3], dm[4], dm[5], sm[0], sm[1], sm[2], sm[3], sm[4], sm[5],
            ],
            addrs: new_addrs,
            ports: new_ports,
            deltas: V4Write::deltas(addrs, ports, new_addrs, new_ports),
        })
    }

    /// `deltas` of a rewrite from addresses `addrs` and ports `ports` to `new_addrs` and
    /// `new_ports` (each source then destination, as the wire holds them).
    #[inline(always)]
    pub(crate) fn deltas(
        addrs: [u8; 8],
        ports: [u8; 4],
        new_addrs: [u8; 8],
        new_ports: [u8; 4],
    ) -> [u16; 2] {
        let half = |a: &[u8; 8], at: usize| [a[at], a[at + 1], a[at + 2], a[at + 3]];
        let da = field_delta(&half(&addrs, 0), &half(&new_addrs, 0))
            + field_delta(&half(&addrs, 4), &half(&new_addrs, 4));
        let dp = field_delta(&[ports[0], ports[1]], &[new_ports[0], new_ports[1]])
            + field_delta(&[ports[2], ports[3]], &[new_ports[2], new_ports[3]]);
        [checksum::fold(da), checksum::fold(da + dp)]
    }
}

/// Writes `w` into the IPv4 TCP/UDP packet at `o` in `b`, which must hold the Ethernet, the
/// IPv4 and the L4 header (`sum` says which L4 checksum covers the change), from fixed-size
/// views of the headers (one bounds check each).
#[inline(always)]
pub(crate) fn write_v4(
    b: &mut [u8],
    o: Offsets,
    w: &V4Write,
    sum: Checksum,
) -> Result<(), WireError> {
    let eth = b
        .get_mut(o.eth..)
        .and_then(|b| b.first_chunk_mut::<12>())
        .ok_or(WireError::Truncated)?;
    *eth = w.macs;
    let ip = b
        .get_mut(o.l3..)
        .and_then(|b| b.first_chunk_mut::<20>())
        .ok_or(WireError::Truncated)?;
    ip[12..20].copy_from_slice(&w.addrs);
    // A zero change leaves a checksum as it is (`patched`), so none is tested for.
    let c = patched(u16::from_ne_bytes([ip[10], ip[11]]), w.deltas[0]);
    ip[10..12].copy_from_slice(&c.to_ne_bytes());
    // The parse checked that TCP's 20-byte and UDP's 8-byte headers are there.
    match sum {
        Checksum::Tcp => l4_write::<18>(b, o.l4, w, Some((16, false))),
        Checksum::Udp => l4_write::<8>(b, o.l4, w, Some((6, true))),
        Checksum::None => l4_write::<8>(b, o.l4, w, None),
    }
}

/// Writes the ports of `w` into the `N`-byte L4 header at `l4` and patches its checksum at
/// `sum` (the offset, and whether it is UDP's).
#[inline(always)]
fn l4_write<const N: usize>(
    b: &mut [u8],
    l4: usize,
    w: &V4Write,
    sum: Option<(usize, bool)>,
) -> Result<(), WireError> {
    let h = b
        .get_mut(l4..)
        .and_then(|b| b.first_chunk_mut::<N>())
        .ok_or(WireError::Truncated)?;
    h[..4].copy_from_slice(&w.ports);
    if let Some((at, udp)) = sum {
        let mut n = patched(u16::from_ne_bytes([h[at], h[at + 1]]), w.deltas[1]);
        // UDP sends a sum of zero as all ones (RFC 768); the same in either byte order. (A
        // zero change leaves a non-zero sum non-zero, so this changes nothing then.)
        if udp && n == 0 {
            n = 0xffff;
        }
        h[at..at + 2].copy_from_slice(&n.to_ne_bytes());
    }
    Ok(())
}

/// `checksum::apply_delta` for a delta folded to 16 bits: `!check + delta` is at most 0x1fffe,
/// which one fold brings to 16 bits (0xfffe + 1 at most). The result equals patching by the
/// unfolded delta (both are the sum modulo 0xffff, zero only for a zero sum), and a zero delta
/// gives `check` back.
#[inline(always)]
fn patched(check: u16, delta: u16) -> u16 {
    let s = u32::from(!check) + u32::from(delta);
    !(((s & 0xffff) + (s >> 16)) as u16)
}

/// Rewrites an ICMP error travelling like a packet with headers `t`: the outer destination
/// (and the source, if the error came from the flow's peer), and the quoted packet, which
/// travelled the other way, with the reverse of `t`. Checksums of the quoted headers are
/// patched; the outer IPv4 and ICMP checksums are recomputed, as errors are rare and small.
fn rewrite_icmp_error(
    b: &mut [u8],
    p: &Parsed,
    o: Offsets,
    e: &Embedded,
    t: &Headers,
) -> Result<(), WireError> {
    let cur = &p.headers;
    let base = p.l4 - o.l4;
    let (el3, el4) = (e.l3 - base, e.l4 - base);
    b[o.eth..o.eth + 6].copy_from_slice(&t.dst_mac.0);
    b[o.eth + 6..o.eth + 12].copy_from_slice(&t.src_mac.0);
    let mut outer_t = *cur;
    outer_t.dst_ip = t.dst_ip;
    if cur.src_ip == e.dst {
        outer_t.src_ip = t.src_ip;
    }
    write_addrs(b, o.l3, cur, &outer_t)?;
    let quoted = Headers {
        src_ip: e.src,
        dst_ip: e.dst,
        src_port: e.src_port,
        dst_port: e.dst_port,
        proto: e.proto,
        ..*cur
    };
    let mut qt = quoted;
    (qt.src_ip, qt.dst_ip) = (t.dst_ip, t.src_ip);
    (qt.src_port, qt.dst_port) = (t.dst_port, t.src_port);
    let d = write_addrs(b, el3, &quoted, &qt)?;
    if !e.truncated {
        rewrite_quoted_l4(b, el4, e, &quoted, &qt, d);
    }
    let end = ip_end(b, o.l3)?;
    fill_outer_checksums(b, o.l3, o.l4, end, &outer_t);
    Ok(())
}

/// Patches the quoted L4 header's ports and, where the quote includes it, its checksum.
fn rewrite_quoted_l4(b: &mut [u8], l4: usize, e: &Embedded, q: &Headers, t: &Headers, d: u32) {
    let avail = b.len().saturating_sub(l4);
    match e.proto {
        proto::UDP | proto::TCP => {
            let d = d
                + write_port(b, l4, q.src_port, t.src_port)
                + write_port(b, l4 + 2, q.dst_port, t.dst_port);
            let (off, udp) = if e.proto == proto::UDP {
                (6, true)
            } else {
                (16, false)
            };
            let has_sum = avail >= off + 2 && (!udp || b[l4 + 6..l4 + 8] != [0, 0]);
            if d != 0 && has_sum {
                patch(b, l4 + off, d, udp);
            }
        }
        proto::ICMP | proto::ICMPV6 => {
            let di = write_port(b, l4 + 4, q.src_port, t.src_port);
            let d = if e.proto == proto::ICMPV6 { d + di } else { di };
            if d != 0 {
                patch(b, l4 + 2, d, false);
            }
        }
        _ => {}
    }
}

/// Where the IP datagram starting at `l3` ends (its length field; the frame may be padded).
fn ip_end(b: &[u8], l3: usize) -> Result<usize, WireError> {
    let end = match b.get(l3).map(|v| v >> 4) {
        Some(4) => l3 + usize::from(u16::from_be_bytes([b[l3 + 2], b[l3 + 3]])),
        Some(6) => l3 + 40 + usize::from(u16::from_be_bytes([b[l3 + 4], b[l3 + 5]])),
        _ => return Err(WireError::Malformed),
    };
    if end > b.len() {
        return Err(WireError::Truncated);
    }
    Ok(end)
}

fn fill_outer_checksums(b: &mut [u8], l3: usize, l4: usize, end: usize, h: &Headers) {
    if h.src_ip.is_ipv4() {
        let hl = usize::from(b[l3] & 0x0f) * 4;
        b[l3 + 10..l3 + 12].fill(0);
        let c = checksum::compute(&b[l3..l3 + hl]);
        b[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
    b[l4 + 2..l4 + 4].fill(0);
    let c = if h.proto == proto::ICMPV6 {
        checksum::l4(h.src_ip, h.dst_ip, proto::ICMPV6, &b[l4..end])
    } else {
        checksum::compute(&b[l4..end])
    };
    b[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{L4, Packet};
    use crate::parse::{ParseContext, parse};
    use crate::wire::MacAddr;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn headers(addrs: [u32; 2], ports: [u16; 2], proto: u8, macs: [[u8; 6]; 2]) -> Headers {
        Headers {
            src_mac: MacAddr(macs[0]),
            dst_mac: MacAddr(macs[1]),
            src_ip: IpAddr::V4(Ipv4Addr::from(addrs[0])),
            dst_ip: IpAddr::V4(Ipv4Addr::from(addrs[1])),
            proto,
            src_port: ports[0],
            dst_port: ports[1],
        }
    }

    #[test]
    fn a_udp_sum_patched_to_zero_is_sent_as_all_ones() {
        // A checksum of 0x1234 and a change of 0x1234: !0x1234 + 0x1234 = 0xffff, which
        // patches to zero.
        let w = V4Write {
            macs: [0; 12],
            addrs: [0; 8],
            ports: [0; 4],
            deltas: [0, 0x1234],
        };
        for (udp, want) in [(true, 0xffff), (false, 0)] {
            let mut h = [0u8; 8];
            h[6..8].copy_from_slice(&0x1234u16.to_ne_bytes());
            l4_write::<8>(&mut h, 0, &w, Some((6, udp))).expect("an 8-byte header");
            assert_eq!(u16::from_ne_bytes([h[6], h[7]]), want, "udp {udp}");
        }
    }

    proptest! {
        /// Every address and port (unchanged, changed, 0 and 0xffff words), TCP and UDP with
        /// and without a checksum: the same bytes, checksums included, both ways.
        #[test]
        fn the_ipv4_rewrite_writes_what_the_general_one_does(
            from in any::<([u32; 2], [u16; 2])>(),
            to in any::<([u32; 2], [u16; 2])>(),
            keep in any::<[bool; 4]>(),
            edge in proptest::option::of(prop_oneof![Just(0u32), Just(0xffff_ffff), Just(0xffff)]),
            kind in 0u8..3,
            payload in proptest::collection::vec(any::<u8>(), 0..40),
            sums in proptest::option::of(prop_oneof![
                any::<[u16; 2]>(),
                Just([0xffff, 0xffff]),
                Just([0, 0]),
                Just([0xffff, 0]),
                Just([0, 0xffff]),
            ]),
        ) {
            let (mut to_addrs, mut to_ports) = to;
            for i in 0..2 {
                if keep[i] { to_addrs[i] = from.0[i]; }
                if keep[2 + i] { to_ports[i] = from.1[i]; }
            }
            if let Some(e) = edge {
                to_addrs[1] = e;
            }
            let (src_port, dst_port) = (from.1[0], from.1[1]);
            let l4 = if kind == 0 {
                L4::Tcp { src_port, dst_port, flags: 0x10, seq: 7, ack: 9, payload }
            } else {
                L4::Udp { src_port, dst_port, payload }
            };
            let src = IpAddr::V4(Ipv4Addr::from(from.0[0]));
            let dst = IpAddr::V4(Ipv4Addr::from(from.0[1]));
            let mut frame = Packet::new(src, dst, l4)
                .frame(MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]))
                .expect("an IPv4 frame");
            if kind == 2 {
                // UDP without a checksum.
                frame[40..42].fill(0);
            }
            if let Some([ip, l4]) = sums {
                // Checksums as a corrupted (or crafted) frame may carry them, 0 and 0xffff
                // included: both rewrites patch whatever is there.
                frame[24..26].copy_from_slice(&ip.to_be_bytes());
                let at = if kind == 0 { 34 + 16 } else { 34 + 6 };
                if kind != 2 {
                    frame[at..at + 2].copy_from_slice(&l4.to_be_bytes());
                }
            }
            let cx = ParseContext { vxlan_port: 1, provider_addrs: &[] };
            let p = parse(&frame, &cx).expect("a frame the parse reads");
            let proto = p.headers.proto;
            let t = headers(to_addrs, to_ports, proto, [[2, 0, 0, 0, 0, 3], [2, 0, 0, 0, 0, 4]]);
            let o = Offsets { eth: p.eth, l3: p.l3, l4: p.l4 };
            let (mut a, mut b) = (frame.clone(), frame.clone());
            rewrite(&mut a, &p, o, &t).expect("rewritten");
            rewrite_any(&mut b, &p, o, &t).expect("rewritten");
            prop_assert_eq!(a, b);
        }
    }
}
