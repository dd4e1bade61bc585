//! A cached connection: the headers it entered with and the headers it leaves with, its outer
//! headers, ports, TCP state and counters, laid out so that a packet of either direction on the
//! fast path reads two of its three cache lines.
//!
//! The record is `repr(C)`, 192 bytes, in a 64-byte aligned slot of the flow table:
//! - line 0 (bytes 0-63): last seen, packet and byte counters, both outer headers, the
//!   generations, the protocols and the TCP state;
//! - line 1 (64-127): both ports, the VXLAN entropy, the kind, and each side's MACs, IPv4
//!   addresses and ports as the wire holds them, with the checksum changes of the IPv4 rewrite
//!   each way (`V4Write`), so that the fast path compares a frame's bytes with the key and
//!   writes the new ones without converting or working anything out;
//! - line 2 (128-191): what the fast path never reads: the SNAT ports, and the rest of the
//!   addresses of a connection with an IPv6 address (its four addresses take 64 bytes: the 16
//!   bytes of line 1 that an IPv4 connection's four take, and 48 of line 2).
//!
//! `Headers` keeps every address as a 17-byte `IpAddr`; stored so, the two header sets alone
//! took 104 bytes and the fields the fast path reads spread over all three lines.

use crate::encap::Encap;
use crate::headers::{FlowKey, Headers};
use crate::nat::SnatAlloc;
use crate::tcp_state::{FlowSide, TcpTracker};
use crate::time::Timestamp;
use crate::transform::V4Write;
use crate::wire::MacAddr;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// One side's header fields as the wire holds them: MACs (destination, source), addresses
/// (source, destination: all of an IPv4 connection's; the first 8 of its 64 address bytes for
/// one with an IPv6 address) and ports (source, destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Side {
    macs: [u8; 12],
    addrs: [u8; 8],
    ports: [u8; 4],
}

/// A key of an IPv4 connection with its addresses and ports as the wire holds them (source,
/// then destination): what `FlowRecord` keeps, compared and hashed without building a
/// `FlowKey` (whose addresses are `IpAddr`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireKey {
    pub port: u16,
    pub vni: u32,
    pub proto: u8,
    pub addrs: [u8; 8],
    pub ports: [u8; 4],
}

impl WireKey {
    /// `key` as a wire key; `None` unless both its addresses are IPv4.
    #[inline]
    pub(crate) fn of(key: &FlowKey) -> Option<WireKey> {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (key.src, key.dst) else {
            return None;
        };
        let (s, d) = (s.octets(), d.octets());
        let (sp, dp) = (key.src_port.to_be_bytes(), key.dst_port.to_be_bytes());
        Some(WireKey {
            port: key.port,
            vni: key.vni,
            proto: key.proto,
            addrs: [s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3]],
            ports: [sp[0], sp[1], dp[0], dp[1]],
        })
    }
}

/// `kind` bits 0-3: the address (original source, original destination, final source, final
/// destination) is IPv6. Any of them set: the addresses are held as four 16-byte fields.
const V6: u8 = 0x0f;
/// The connection has a reverse key.
const STATEFUL: u8 = 0x10;
/// An empty slot of the flow table; `new` never makes one.
const VACANT: u8 = 0x20;

/// A cached connection. Its headers (`orig`, `fin`) are fixed when it is made: they are its
/// keys, and the fast path's rewrite is worked out from them once.
#[derive(Clone, PartialEq, Eq)]
#[repr(C)]
pub struct FlowRecord {
    /// When the last packet of either direction was seen.
    pub last_seen: Timestamp,
    /// Packets seen (both directions).
    pub packets: u64,
    /// Bytes seen (both directions).
    pub bytes: u64,
    /// Outer headers added on the forward path (encapsulated towards the underlay).
    pub fin_outer: Option<Arc<Encap>>,
    /// Outer headers for replies, when the forward packet arrived encapsulated (and so its
    /// replies must be encapsulated back); its VNI is part of the forward key.
    pub rev_outer: Option<Arc<Encap>>,
    /// Generations of port_a, port_b and the switch topology when evaluated.
    pub generation: [u32; 3],
    /// IP protocol of `orig` and of `fin`.
    protos: [u8; 2],
    /// TCP flags seen.
    pub tcp: TcpTracker,
    /// Port the connection entered at.
    pub port_a: u16,
    /// Port the forward direction leaves at.
    pub port_b: u16,
    /// Outer UDP source port for encapsulated packets of this flow.
    pub entropy: u16,
    /// Address families, statefulness, vacancy (the constants above).
    kind: u8,
    orig: Side,
    fin: Side,
    /// For an IPv4 connection: the IPv4 and L4 checksum changes of its forward packets'
    /// rewrite, then of its replies' (`V4Write::deltas`).
    deltas: [u16; 4],
    /// Bytes 16-63 of the addresses of a connection with an IPv6 address; zero otherwise.
    wide: [u8; 48],
    /// SNAT ports held by this connection, released when it goes.
    pub snat: [Option<SnatAlloc>; 2],
}

/// The wire's MACs of `h`: destination, then source.
fn wire_macs(h: &Headers) -> [u8; 12] {
    let mut m = [0; 12];
    m[..6].copy_from_slice(&h.dst_mac.0);
    m[6..].copy_from_slice(&h.src_mac.0);
    m
}

/// The wire's ports of `h`: source, then destination, big-endian.
fn wire_ports(h: &Headers) -> [u8; 4] {
    let (s, d) = (h.src_port.to_be_bytes(), h.dst_port.to_be_bytes());
    [s[0], s[1], d[0], d[1]]
}

/// Source and destination address swapped (the halves of the 8 bytes).
#[inline(always)]
fn swap_addrs(a: [u8; 8]) -> [u8; 8] {
    u64::from_ne_bytes(a).rotate_left(32).to_ne_bytes()
}

/// Source and destination port swapped.
#[inline(always)]
fn swap_ports(p: [u8; 4]) -> [u8; 4] {
    u32::from_ne_bytes(p).rotate_left(16).to_ne_bytes()
}

/// Destination and source MAC swapped.
#[inline(always)]
fn swap_macs(m: [u8; 12]) -> [u8; 12] {
    let mut s = [0; 12];
    s[..6].copy_from_slice(&m[6..]);
    s[6..].copy_from_slice(&m[..6]);
    s
}

/// The VNI of outer headers `o` (0: none, for a packet that arrived plain).
#[inline(always)]
fn vni(o: &Option<Arc<Encap>>) -> u32 {
    o.as_ref().map_or(0, |o| o.vni)
}

impl FlowRecord {
    /// A connection whose first packet entered with `orig` and left with `fin`: stateful, not
    /// yet seen, every other field zero or empty (set them before inserting it).
    pub fn new(orig: Headers, fin: Headers) -> FlowRecord {
        let addrs = [orig.src_ip, orig.dst_ip, fin.src_ip, fin.dst_ip];
        let v6 = (0..4).fold(0u8, |k, i| k | u8::from(addrs[i].is_ipv6()) << i);
        // The four addresses: four bytes apart when all are IPv4, sixteen otherwise; the first
        // 8 bytes in `orig`, the next 8 in `fin`, the rest in `wide`.
        let mut block = [0u8; 64];
        for (i, a) in addrs.iter().enumerate() {
            let at = if v6 == 0 { 4 * i } else { 16 * i };
            match a {
                IpAddr::V4(a) => block[at..at + 4].copy_from_slice(&a.octets()),
                IpAddr::V6(a) => block[at..at + 16].copy_from_slice(&a.octets()),
            }
        }
        let (head, wide) = block.split_at(16);
        let (mut oa, mut fa, mut w) = ([0u8; 8], [0u8; 8], [0u8; 48]);
        oa.copy_from_slice(&head[..8]);
        fa.copy_from_slice(&head[8..]);
        w.copy_from_slice(wide);
        let mut r = FlowRecord {
            protos: [orig.proto, fin.proto],
            kind: v6 | STATEFUL,
            orig: Side {
                macs: wire_macs(&orig),
                addrs: oa,
                ports: wire_ports(&orig),
            },
            fin: Side {
                macs: wire_macs(&fin),
                addrs: fa,
                ports: wire_ports(&fin),
            },
            wide: w,
            ..FlowRecord::vacant()
        };
        if v6 == 0 {
            // A forward packet arrives with `orig`'s addresses and ports and leaves with
            // `fin`'s; a reply arrives with `fin`'s reversed and leaves with `orig`'s reversed.
            let (o, f) = (r.orig, r.fin);
            let fwd = V4Write::deltas(o.addrs, o.ports, f.addrs, f.ports);
            let (ra, rp) = (swap_addrs(f.addrs), swap_ports(f.ports));
            let rev = V4Write::deltas(ra, rp, swap_addrs(o.addrs), swap_ports(o.ports));
            r.deltas = [fwd[0], fwd[1], rev[0], rev[1]];
        }
        r
    }

    /// An empty slot's content.
    pub(crate) fn vacant() -> FlowRecord {
        FlowRecord {
            last_seen: Timestamp(0),
            packets: 0,
            bytes: 0,
            fin_outer: None,
            rev_outer: None,
            generation: [0; 3],
            protos: [0; 2],
            tcp: TcpTracker::default(),
            port_a: 0,
            port_b: 0,
            entropy: 0,
            kind: VACANT,
            orig: Side::default(),
            fin: Side::default(),
            deltas: [0; 4],
            wide: [0; 48],
            snat: [None, None],
        }
    }

    /// True for an empty slot's content.
    #[inline(always)]
    pub(crate) fn is_vacant(&self) -> bool {
        self.kind & VACANT != 0
    }

    /// Address `i`: original source, original destination, final source, final destination.
    #[inline]
    fn addr(&self, i: usize) -> IpAddr {
        let half = |i: usize| {
            if i < 2 {
                &self.orig.addrs
            } else {
                &self.fin.addrs
            }
        };
        if self.kind & V6 == 0 {
            let a = half(i);
            let at = (i % 2) * 4;
            return IpAddr::V4(Ipv4Addr::new(a[at], a[at + 1], a[at + 2], a[at + 3]));
        }
        // Sixteen bytes each: the first in `orig.addrs` and `fin.addrs`, the rest in `wide`.
        let mut a = [0u8; 16];
        if i == 0 {
            a[..8].copy_from_slice(&self.orig.addrs);
            a[8..].copy_from_slice(&self.fin.addrs);
        } else {
            a.copy_from_slice(&self.wide[16 * (i - 1)..16 * i]);
        }
        if self.kind & (1 << i) != 0 {
            IpAddr::V6(Ipv6Addr::from(a))
        } else {
            IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
        }
    }

    /// Source and destination port of `s`.
    #[inline]
    fn ports(s: &Side) -> (u16, u16) {
        (
            u16::from_be_bytes([s.ports[0], s.ports[1]]),
            u16::from_be_bytes([s.ports[2], s.ports[3]]),
        )
    }

    fn headers(&self, s: &Side, proto: u8, first: usize) -> Headers {
        let mac = |at: usize| {
            let mut m = [0; 6];
            m.copy_from_slice(&s.macs[at..at + 6]);
            MacAddr(m)
        };
        let (src_port, dst_port) = FlowRecord::ports(s);
        Headers {
            dst_mac: mac(0),
            src_mac: mac(6),
            src_ip: self.addr(first),
            dst_ip: self.addr(first + 1),
            proto,
            src_port,
            dst_port,
        }
    }

    /// The first packet's headers as it entered the switch at `port_a`.
    pub fn orig(&self) -> Headers {
        self.headers(&self.orig, self.protos[0], 0)
    }

    /// Its headers as it left at `port_b`, after every layer on the way.
    pub fn fin(&self) -> Headers {
        self.headers(&self.fin, self.protos[1], 2)
    }

    /// The connection's IP protocol (its first packet's).
    #[inline(always)]
    pub fn proto(&self) -> u8 {
        self.protos[0]
    }

    /// False for connections decided by a stateless rule: no reverse key.
    pub fn stateful(&self) -> bool {
        self.kind & STATEFUL != 0
    }

    /// Makes the connection stateful or not (before it is inserted: it decides its keys).
    pub fn set_stateful(&mut self, stateful: bool) {
        if stateful {
            self.kind |= STATEFUL;
        } else {
            self.kind &= !STATEFUL;
        }
    }

    /// What packets of `side` become: their headers, their outer headers, and the port they
    /// leave by.
    pub fn target(&self, side: FlowSide) -> (Headers, Option<&Arc<Encap>>, u16) {
        match side {
            FlowSide::Forward => (self.fin(), self.fin_outer.as_ref(), self.port_b),
            FlowSide::Reverse => (self.orig().reversed(), self.rev_outer.as_ref(), self.port_a),
        }
    }

    /// The key packets of `side` arrive with.
    pub fn key(&self, side: FlowSide) -> FlowKey {
        match side {
            FlowSide::Forward => {
                let (src_port, dst_port) = FlowRecord::ports(&self.orig);
                FlowKey {
                    port: self.port_a,
                    vni: vni(&self.rev_outer),
                    proto: self.protos[0],
                    src: self.addr(0),
                    dst: self.addr(1),
                    src_port,
                    dst_port,
                }
            }
            FlowSide::Reverse => {
                let (src_port, dst_port) = FlowRecord::ports(&self.fin);
                FlowKey {
                    port: self.port_b,
                    vni: vni(&self.fin_outer),
                    proto: self.protos[1],
                    src: self.addr(3),
                    dst: self.addr(2),
                    src_port: dst_port,
                    dst_port: src_port,
                }
            }
        }
    }

    /// True if packets of `side` arrive with `key` (never for an empty slot). An IPv4 key is
    /// compared as a wire key (`has_wire_key`), where building the record's key would build
    /// its headers.
    pub(crate) fn has_key(&self, side: FlowSide, key: &FlowKey) -> bool {
        if self.is_vacant() {
            return false;
        }
        match WireKey::of(key) {
            Some(k) if self.kind & V6 == 0 => self.has_wire_key(side, &k),
            _ => self.key(side) == *key,
        }
    }

    /// The key packets of `side` arrive with, as a wire key; `None` for a connection with an
    /// IPv6 address.
    pub(crate) fn wire_key(&self, side: FlowSide) -> Option<WireKey> {
        if self.kind & (V6 | VACANT) != 0 {
            return None;
        }
        Some(match side {
            FlowSide::Forward => WireKey {
                port: self.port_a,
                vni: vni(&self.rev_outer),
                proto: self.protos[0],
                addrs: self.orig.addrs,
                ports: self.orig.ports,
            },
            FlowSide::Reverse => WireKey {
                port: self.port_b,
                vni: vni(&self.fin_outer),
                proto: self.protos[1],
                addrs: swap_addrs(self.fin.addrs),
                ports: swap_ports(self.fin.ports),
            },
        })
    }

    /// True if packets of `side` arrive with the wire key `k`.
    #[inline]
    pub(crate) fn has_wire_key(&self, side: FlowSide, k: &WireKey) -> bool {
        self.wire_key(side).as_ref() == Some(k)
    }

    /// True if the frame of a plain IPv4 packet with these fields (`addrs`: source and
    /// destination, `ports` likewise, as the wire holds them), entering at `port`, is a packet
    /// of `side` (VNI 0): compared as a few words, where `has_key` takes a built key. False
    /// for a connection with an IPv6 address and for an empty slot.
    #[inline(always)]
    pub(crate) fn arrives_plain(
        &self,
        side: FlowSide,
        port: u16,
        proto: u8,
        addrs: [u8; 8],
        ports: [u8; 4],
    ) -> bool {
        // Compared field by field here rather than through `wire_key`: composed from a
        // shared helper, the compiler kept a second lookup of the slot after `find_plain`
        // (21 instructions more per packet).
        if self.kind & (V6 | VACANT) != 0 {
            return false;
        }
        match side {
            FlowSide::Forward => {
                self.orig.addrs == addrs
                    && self.orig.ports == ports
                    && self.port_a == port
                    && self.protos[0] == proto
                    && vni(&self.rev_outer) == 0
            }
            FlowSide::Reverse => {
                swap_addrs(self.fin.addrs) == addrs
                    && swap_ports(self.fin.ports) == ports
                    && self.port_b == port
                    && self.protos[1] == proto
                    && vni(&self.fin_outer) == 0
            }
        }
    }

    /// What a packet of `side` of an IPv4 connection (`arrives_plain`) is rewritten to:
    /// what `transform::rewrite` works out for it, kept since the connection was made.
    #[inline(always)]
    pub(crate) fn plain_write(&self, side: FlowSide) -> V4Write {
        match side {
            FlowSide::Forward => V4Write {
                macs: self.fin.macs,
                addrs: self.fin.addrs,
                ports: self.fin.ports,
                deltas: [self.deltas[0], self.deltas[1]],
            },
            FlowSide::Reverse => V4Write {
                macs: swap_macs(self.orig.macs),
                addrs: swap_addrs(self.orig.addrs),
                ports: swap_ports(self.orig.ports),
                deltas: [self.deltas[2], self.deltas[3]],
            },
        }
    }
}

impl fmt::Debug for FlowRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_vacant() {
            return f.write_str("FlowRecord(vacant)");
        }
        f.debug_struct("FlowRecord")
            .field("orig", &self.orig())
            .field("fin", &self.fin())
            .field("fin_outer", &self.fin_outer)
            .field("rev_outer", &self.rev_outer)
            .field("port_a", &self.port_a)
            .field("port_b", &self.port_b)
            .field("generation", &self.generation)
            .field("last_seen", &self.last_seen)
            .field("tcp", &self.tcp)
            .field("stateful", &self.stateful())
            .field("entropy", &self.entropy)
            .field("snat", &self.snat)
            .field("packets", &self.packets)
            .field("bytes", &self.bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::proto;
    use proptest::prelude::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_fast_paths_fields_fill_the_first_two_lines_and_the_rest_the_third() {
        assert_eq!(size_of::<FlowRecord>(), 192);
        assert_eq!(size_of::<TcpTracker>(), 10);
        // Line 0 and line 1: everything a packet on the fast path reads or writes.
        assert_eq!(offset_of!(FlowRecord, tcp) + size_of::<TcpTracker>(), 64);
        assert_eq!(offset_of!(FlowRecord, port_a), 64);
        assert_eq!(offset_of!(FlowRecord, deltas) + 8, 128);
        // Line 2: the rest.
        assert_eq!(offset_of!(FlowRecord, wide), 128);
        assert!(offset_of!(FlowRecord, snat) >= 128);
    }

    fn ip(a: u128, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::from(a))
        } else {
            IpAddr::V4(Ipv4Addr::from(a as u32))
        }
    }

    fn headers(a: [u128; 2], v6: [bool; 2], ports: [u16; 2], proto: u8, macs: [u8; 2]) -> Headers {
        Headers {
            src_mac: MacAddr([2, 0, 0, 0, 0, macs[0]]),
            dst_mac: MacAddr([2, 0, 0, 0, 1, macs[1]]),
            src_ip: ip(a[0], v6[0]),
            dst_ip: ip(a[1], v6[1]),
            proto,
            src_port: ports[0],
            dst_port: ports[1],
        }
    }

    proptest! {
        /// Whatever the families (IPv4, IPv6, mixed), the record gives back the headers it was
        /// made with, and its keys are theirs.
        #[test]
        fn gives_back_the_headers_it_was_made_with(
            addrs in any::<[u128; 4]>(),
            v6 in any::<[bool; 4]>(),
            ports in any::<[u16; 4]>(),
            protos in any::<[u8; 2]>(),
            macs in any::<[u8; 4]>(),
            stateful in any::<bool>(),
        ) {
            let orig = headers([addrs[0], addrs[1]], [v6[0], v6[1]], [ports[0], ports[1]], protos[0], [macs[0], macs[1]]);
            let fin = headers([addrs[2], addrs[3]], [v6[2], v6[3]], [ports[2], ports[3]], protos[1], [macs[2], macs[3]]);
            let mut r = FlowRecord::new(orig, fin);
            r.set_stateful(stateful);
            r.port_a = 3;
            r.port_b = 4;
            prop_assert_eq!(r.orig(), orig);
            prop_assert_eq!(r.fin(), fin);
            prop_assert_eq!(r.stateful(), stateful);
            prop_assert!(!r.is_vacant());
            prop_assert_eq!(r.key(FlowSide::Forward), FlowKey::of(3, 0, &orig));
            prop_assert_eq!(r.key(FlowSide::Reverse), FlowKey::of(4, 0, &fin.reversed()));
            // `has_key` (which compares an IPv4 key in place) takes exactly the record's keys.
            for side in [FlowSide::Forward, FlowSide::Reverse] {
                let k = r.key(side);
                prop_assert!(r.has_key(side, &k));
                let flip = |a: IpAddr| match a {
                    IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) ^ 1)),
                    IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) ^ 1)),
                };
                for other in [
                    FlowKey { vni: 1, ..k },
                    FlowKey { port: k.port ^ 1, ..k },
                    FlowKey { proto: k.proto ^ 1, ..k },
                    FlowKey { src_port: k.src_port ^ 1, ..k },
                    FlowKey { dst_port: k.dst_port ^ 1, ..k },
                    FlowKey { src: flip(k.src), ..k },
                    FlowKey { dst: flip(k.dst), ..k },
                ] {
                    prop_assert!(!r.has_key(side, &other), "{:?} has {:?}", side, other);
                }
            }
            let plain = !v6.contains(&true);
            // The plain comparison agrees with the key's, for IPv4 connections only.
            for (side, h, port) in [(FlowSide::Forward, orig, 3), (FlowSide::Reverse, fin.reversed(), 4)] {
                let (mut a, mut p) = ([0u8; 8], [0u8; 4]);
                if let (IpAddr::V4(s), IpAddr::V4(d)) = (h.src_ip, h.dst_ip) {
                    a[..4].copy_from_slice(&s.octets());
                    a[4..].copy_from_slice(&d.octets());
                }
                p[..2].copy_from_slice(&h.src_port.to_be_bytes());
                p[2..].copy_from_slice(&h.dst_port.to_be_bytes());
                prop_assert_eq!(r.arrives_plain(side, port, h.proto, a, p), plain);
                prop_assert!(!r.arrives_plain(side, port ^ 1, h.proto, a, p));
                prop_assert!(!r.arrives_plain(side, port, h.proto ^ 1, a, p));
                a[7] ^= 1;
                prop_assert!(!r.arrives_plain(side, port, h.proto, a, p));
                a[7] ^= 1;
                p[3] ^= 1;
                prop_assert!(!r.arrives_plain(side, port, h.proto, a, p));
            }
        }
    }

    #[test]
    fn the_plain_rewrite_is_the_general_one_kept() {
        let orig = headers(
            [0x0a00_0001, 0x0a60_0001],
            [false; 2],
            [40_000, 80],
            proto::TCP,
            [1, 2],
        );
        let fin = headers(
            [0x0a00_0001, 0x0af4_0203],
            [false; 2],
            [40_000, 8080],
            proto::TCP,
            [3, 4],
        );
        let r = FlowRecord::new(orig, fin);
        let wire = |h: &Headers| match (h.src_ip, h.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut a = [0u8; 8];
                a[..4].copy_from_slice(&s.octets());
                a[4..].copy_from_slice(&d.octets());
                (a, wire_ports(h))
            }
            _ => unreachable!("IPv4 headers"),
        };
        let (a, p) = wire(&orig);
        assert_eq!(
            Some(r.plain_write(FlowSide::Forward)),
            V4Write::to(a, p, &fin)
        );
        let (a, p) = wire(&fin.reversed());
        assert_eq!(
            Some(r.plain_write(FlowSide::Reverse)),
            V4Write::to(a, p, &orig.reversed())
        );
        // A side that arrives encapsulated (its key has the VNI) is not a plain frame's; a
        // VNI of 0 is.
        let (a, p) = wire(&orig);
        let (ra, rp) = wire(&fin.reversed());
        for (vni, plain) in [(4096, false), (0, true)] {
            let outer = Some(Arc::new(Encap {
                vni,
                src_mac: MacAddr([2, 0, 0, 0, 2, 1]),
                dst_mac: MacAddr([2, 0, 0, 0, 2, 2]),
                src_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 5)),
                dst_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2)),
                udp_port: 4789,
            }));
            let mut e = r.clone();
            e.rev_outer = outer.clone();
            assert_eq!(
                e.arrives_plain(FlowSide::Forward, 0, proto::TCP, a, p),
                plain
            );
            assert!(e.arrives_plain(FlowSide::Reverse, 0, proto::TCP, ra, rp));
            let mut e = r.clone();
            e.fin_outer = outer;
            assert_eq!(
                e.arrives_plain(FlowSide::Reverse, 0, proto::TCP, ra, rp),
                plain
            );
            assert!(e.arrives_plain(FlowSide::Forward, 0, proto::TCP, a, p));
        }
        assert!(FlowRecord::vacant().is_vacant());
        assert!(!FlowRecord::vacant().has_key(
            FlowSide::Forward,
            &FlowRecord::vacant().key(FlowSide::Forward)
        ));
    }
}
