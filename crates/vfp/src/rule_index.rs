//! The lookup structure of a layer group: rules bucketed by (prefix, protocol, destination
//! port), so that finding the best rule costs a few hash probes per prefix length present
//! instead of a scan over every rule. A rule is filed by the addresses of its remote side where
//! it names them (the source of a packet coming into the port, the destination of one going
//! out), else by the other side's: the local side of a port's rules is mostly the endpoint's
//! own address, the same in every rule, while the remote side tells them apart (a
//! NetworkPolicy's peers, one ACL per address or set). Load balancer rules (VIP/32, protocol,
//! port) land in exact buckets; routes are found longest prefix first; an ACL naming neither
//! side falls into the wildcard bucket of both families, in priority order. One index per
//! direction, prefiltered by protocol and port.

use crate::direction::Direction;
use crate::headers::Headers;
use crate::rule::{Conditions, Priority, StoredRule};
use hashbrown::HashMap;
use std::net::IpAddr;

const ANY_PROTO: u16 = 256;
const ANY_PORT: u32 = 65536;
/// Above this many protocols or ports, a rule is filed under "any" rather than once per value.
const MAX_FANOUT: usize = 16;

/// A prefix a rule is filed under: a masked address of one side of the packet, and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Prefix {
    addr: u128,
    v6: bool,
    /// Whether `addr` is the packet's source (else its destination).
    by_src: bool,
    len: u8,
}

/// A bucket: a prefix (its family, side and length packed into `shape`, see [`shape_bits`], so
/// that the key hashes as few fields as it did before rules were filed by source), and a
/// protocol and port or "any".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BucketKey {
    addr: u128,
    shape: u16,
    proto: u16,
    port: u32,
}

/// A prefix's family, side and length as one number.
fn shape_bits(v6: bool, by_src: bool, len: u8) -> u16 {
    u16::from(len) | u16::from(v6) << 8 | u16::from(by_src) << 9
}

impl BucketKey {
    fn new(p: Prefix, proto: u16, port: u32) -> BucketKey {
        BucketKey {
            addr: p.addr,
            shape: shape_bits(p.v6, p.by_src, p.len),
            proto,
            port,
        }
    }
}

/// One prefix length of one side in use, with how many buckets of each specificity it has:
/// [protocol and port, protocol only, any].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    v6: bool,
    by_src: bool,
    len: u8,
    counts: [u32; 3],
}

/// A bucket entry: the rule's rank (priority, insertion order) and its slot in the group.
type Entry = (Priority, u64, u32);

/// The per-direction rule index of a group.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuleIndex {
    buckets: HashMap<BucketKey, Vec<Entry>>,
    /// Prefix lengths in use, longest first.
    shapes: Vec<Shape>,
}

fn bits(ip: IpAddr) -> (u128, bool) {
    match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), false),
        IpAddr::V6(a) => (u128::from(a), true),
    }
}

fn mask(addr: u128, v6: bool, len: u8) -> u128 {
    let width = if v6 { 128 } else { 32 };
    if len == 0 {
        0
    } else {
        addr & (u128::MAX >> (128 - width) << (width - u32::from(len)))
    }
}

fn specificity(k: &BucketKey) -> usize {
    match (k.proto == ANY_PROTO, k.port == ANY_PORT) {
        (false, false) => 0,
        (false, true) => 1,
        _ => 2,
    }
}

/// The prefixes a rule crossing the port in `dir` is filed under: its remote side's
/// addresses, else its local side's, else every address of both families.
fn prefixes(c: &Conditions, dir: Direction) -> Vec<Prefix> {
    let (remote, local, remote_is_src) = match dir {
        Direction::In => (&c.src, &c.dst, true),
        Direction::Out => (&c.dst, &c.src, false),
    };
    let (nets, by_src) = match (remote, local) {
        (Some(r), _) => (r, remote_is_src),
        (None, Some(l)) => (l, !remote_is_src),
        (None, None) => {
            return [false, true]
                .map(|v6| Prefix {
                    addr: 0,
                    v6,
                    by_src: false,
                    len: 0,
                })
                .to_vec();
        }
    };
    nets.iter()
        .map(|n| {
            let (a, v6) = bits(n.addr());
            Prefix {
                addr: mask(a, v6, n.prefix_len()),
                v6,
                by_src,
                len: n.prefix_len(),
            }
        })
        .collect()
}

/// The buckets a rule is filed under in the index of direction `dir`.
fn keys(r: &StoredRule, dir: Direction) -> Vec<BucketKey> {
    let c = &r.rule.conditions;
    let prefixes = prefixes(c, dir);
    let protos: Vec<u16> = match &c.protocols {
        Some(ps) if !ps.is_empty() && ps.len() <= MAX_FANOUT => {
            ps.iter().map(|&p| u16::from(p)).collect()
        }
        _ => vec![ANY_PROTO],
    };
    let ports: Vec<u32> = match &c.dst_ports {
        Some(rs) if protos[0] != ANY_PROTO && !rs.is_empty() && rs.len() <= MAX_FANOUT => rs
            .iter()
            .map(|r| r.single().map_or(ANY_PORT, u32::from))
            .collect(),
        _ => vec![ANY_PORT],
    };
    let ports = if ports.contains(&ANY_PORT) {
        vec![ANY_PORT]
    } else {
        ports
    };
    let mut out = Vec::with_capacity(prefixes.len() * protos.len() * ports.len());
    for &prefix in &prefixes {
        for &proto in &protos {
            for &port in &ports {
                let k = BucketKey::new(prefix, proto, port);
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
    }
    out
}

impl RuleIndex {
    /// Files a rule under its buckets (this is the index of direction `dir`).
    pub(crate) fn insert(&mut self, slot: u32, r: &StoredRule, dir: Direction) {
        let (prio, seq) = r.rank();
        for k in keys(r, dir) {
            if !self.buckets.contains_key(&k) {
                self.count(&k, 1);
            }
            let bucket = self.buckets.entry(k).or_default();
            let at = bucket.partition_point(|e| (e.0, e.1) < (prio, seq));
            bucket.insert(at, (prio, seq, slot));
        }
    }

    /// Removes a rule from its buckets (this is the index of direction `dir`).
    pub(crate) fn remove(&mut self, slot: u32, r: &StoredRule, dir: Direction) {
        for k in keys(r, dir) {
            let Some(bucket) = self.buckets.get_mut(&k) else {
                continue;
            };
            bucket.retain(|e| e.2 != slot);
            if bucket.is_empty() {
                self.buckets.remove(&k);
                self.count(&k, -1);
            }
        }
    }

    fn count(&mut self, k: &BucketKey, delta: i32) {
        let i = specificity(k);
        match self
            .shapes
            .iter()
            .position(|s| shape_bits(s.v6, s.by_src, s.len) == k.shape)
        {
            Some(at) => {
                let s = &mut self.shapes[at];
                s.counts[i] = s.counts[i].saturating_add_signed(delta);
                if s.counts == [0; 3] {
                    self.shapes.remove(at);
                }
            }
            None if delta > 0 => {
                let mut counts = [0; 3];
                counts[i] = 1;
                let len = k.shape as u8;
                let at = self.shapes.partition_point(|s| s.len > len);
                self.shapes.insert(
                    at,
                    Shape {
                        v6: k.shape & 1 << 8 != 0,
                        by_src: k.shape & 1 << 9 != 0,
                        len,
                        counts,
                    },
                );
            }
            None => {}
        }
    }

    /// The slot of the best-ranked rule matching the packet, if any.
    pub(crate) fn lookup(
        &self,
        h: &Headers,
        vni: Option<u32>,
        dir: Direction,
        rules: &[Option<StoredRule>],
    ) -> Option<u32> {
        let (dst, v6) = bits(h.dst_ip);
        let (src, _) = bits(h.src_ip);
        let mut best: Option<(Priority, u64, u32)> = None;
        for s in self.shapes.iter().filter(|s| s.v6 == v6) {
            let addr = if s.by_src { src } else { dst };
            let prefix = Prefix {
                addr: mask(addr, v6, s.len),
                v6,
                by_src: s.by_src,
                len: s.len,
            };
            let probes = [
                (u16::from(h.proto), u32::from(h.dst_port)),
                (u16::from(h.proto), ANY_PORT),
                (ANY_PROTO, ANY_PORT),
            ];
            for (i, (proto, port)) in probes.into_iter().enumerate() {
                if s.counts[i] == 0 {
                    continue;
                }
                let k = BucketKey::new(prefix, proto, port);
                let Some(bucket) = self.buckets.get(&k) else {
                    continue;
                };
                for &(prio, seq, slot) in bucket {
                    if best.is_some_and(|b| (b.0, b.1) <= (prio, seq)) {
                        break;
                    }
                    let hit = rules
                        .get(slot as usize)
                        .and_then(Option::as_ref)
                        .is_some_and(|r| r.rule.conditions.matches(h, vni, dir));
                    if hit {
                        best = Some((prio, seq, slot));
                        break;
                    }
                }
            }
        }
        best.map(|b| b.2)
    }
}

#[cfg(test)]
mod tests {
    use crate::action::Action;
    use crate::direction::Direction;
    use crate::headers::Headers;
    use crate::layer::{Layer, Verdict};
    use crate::rule::{Conditions, Origin, PortRange, Rule};
    use ipnet::IpNet;
    use proptest::collection::vec;
    use proptest::option::of;
    use proptest::prelude::*;
    use std::net::{IpAddr, Ipv6Addr};

    /// Addresses from a few of each family, so that rules and packets meet often.
    fn addr(v6: bool, i: u16) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i))
        } else {
            IpAddr::from([10, 0, 0, i as u8])
        }
    }

    /// A network around one of those addresses: the whole family, a few addresses, or one.
    fn net_s() -> impl Strategy<Value = IpNet> {
        (any::<bool>(), 0u16..8, 0u8..4).prop_map(|(v6, i, shape)| {
            let max = if v6 { 128 } else { 32 };
            let len = [0, max - 2, max - 1, max][usize::from(shape)];
            IpNet::new(addr(v6, i), len)
                .expect("a prefix length of the family")
                .trunc()
        })
    }

    fn ports_s() -> impl Strategy<Value = Option<Vec<PortRange>>> {
        of(vec(
            (80u16..84, 0u16..2).prop_map(|(first, more)| PortRange {
                first,
                last: first + more,
            }),
            0..3,
        ))
    }

    fn rule_s() -> impl Strategy<Value = Rule> {
        let dir = of(prop_oneof![Just(Direction::In), Just(Direction::Out)]);
        let protos = of(vec(prop_oneof![Just(6u8), Just(17u8)], 0..3));
        let nets = || of(vec(net_s(), 0..3));
        let action = prop_oneof![Just(Action::Allow), Just(Action::Block)];
        (
            0u16..6,
            dir,
            protos,
            nets(),
            nets(),
            ports_s(),
            ports_s(),
            action,
        )
            .prop_map(
                |(prio, direction, protocols, src, dst, src_ports, dst_ports, action)| {
                    let c = Conditions {
                        direction,
                        protocols,
                        src,
                        dst,
                        src_ports,
                        dst_ports,
                        ..Conditions::any()
                    };
                    Rule::new(prio, c, action)
                },
            )
    }

    fn packet_s() -> impl Strategy<Value = Headers> {
        let proto = prop_oneof![Just(6u8), Just(17u8), Just(1u8)];
        (any::<bool>(), 0u16..8, 0u16..8, proto, 79u16..86, 79u16..86).prop_map(
            |(v6, s, d, proto, src_port, dst_port)| Headers {
                src_ip: addr(v6, s),
                dst_ip: addr(v6, d),
                proto,
                src_port,
                dst_port,
                ..Headers::empty()
            },
        )
    }

    proptest! {
        /// The index decides as the ordered walk does: of the rules matching the packet, the
        /// best priority, ties to the first added; after owners' rules are replaced too.
        #[test]
        fn the_index_decides_as_the_ordered_walk(
            sets in vec((0u8..4, vec(rule_s(), 0..12)), 1..8),
            packets in vec(packet_s(), 1..40),
        ) {
            let mut layer = Layer::new("acl");
            for (owner, rules) in sets {
                layer.set_rules(Origin::new("ACL", owner.to_string()), rules);
            }
            for h in &packets {
                for dir in [Direction::In, Direction::Out] {
                    let walk = layer.groups()[0]
                        .rules()
                        .filter(|r| r.rule.conditions.matches(h, None, dir))
                        .map(|r| r.rank())
                        .min();
                    let found = match layer.lookup(h, None, dir) {
                        Verdict::Rule { group, slot } => layer.rule(group, slot).map(|r| r.rank()),
                        Verdict::Default(_) => None,
                    };
                    prop_assert_eq!(found, walk, "{:?} {:?}", dir, h);
                }
            }
        }
    }
}
