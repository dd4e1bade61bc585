//! The lookup structure of a layer group: rules bucketed by (destination prefix, protocol,
//! destination port), so that finding the best rule costs a few hash probes per prefix length
//! present instead of a scan over every rule. Load balancer rules (VIP/32, protocol, port) land
//! in exact buckets; routes are found longest prefix first (their priority is derived from the
//! prefix length); ACLs without a destination fall into the wildcard bucket, in priority order,
//! prefiltered by direction (one index per direction) and protocol.

use crate::direction::Direction;
use crate::headers::Headers;
use crate::rule::{Priority, StoredRule};
use hashbrown::HashMap;
use std::net::IpAddr;

const ANY_PROTO: u16 = 256;
const ANY_PORT: u32 = 65536;
/// Above this many protocols or ports, a rule is filed under "any" rather than once per value.
const MAX_FANOUT: usize = 16;

/// A bucket: the masked destination prefix, and a protocol and port or "any".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BucketKey {
    addr: u128,
    v6: bool,
    len: u8,
    proto: u16,
    port: u32,
}

/// One prefix length in use, with how many buckets of each specificity it has:
/// [protocol and port, protocol only, any].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    v6: bool,
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

/// The buckets a rule is filed under.
fn keys(r: &StoredRule) -> Vec<BucketKey> {
    let c = &r.rule.conditions;
    let nets: Vec<(u128, bool, u8)> = match &c.dst {
        Some(ns) => ns
            .iter()
            .map(|n| {
                let (a, v6) = bits(n.addr());
                (mask(a, v6, n.prefix_len()), v6, n.prefix_len())
            })
            .collect(),
        None => vec![(0, false, 0), (0, true, 0)],
    };
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
    let mut out = Vec::with_capacity(nets.len() * protos.len() * ports.len());
    for &(addr, v6, len) in &nets {
        for &proto in &protos {
            for &port in &ports {
                let k = BucketKey {
                    addr,
                    v6,
                    len,
                    proto,
                    port,
                };
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
    }
    out
}

impl RuleIndex {
    /// Files a rule under its buckets.
    pub(crate) fn insert(&mut self, slot: u32, r: &StoredRule) {
        let (prio, seq) = r.rank();
        for k in keys(r) {
            if !self.buckets.contains_key(&k) {
                self.count(&k, 1);
            }
            let bucket = self.buckets.entry(k).or_default();
            let at = bucket.partition_point(|e| (e.0, e.1) < (prio, seq));
            bucket.insert(at, (prio, seq, slot));
        }
    }

    /// Removes a rule from its buckets.
    pub(crate) fn remove(&mut self, slot: u32, r: &StoredRule) {
        for k in keys(r) {
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
            .position(|s| s.v6 == k.v6 && s.len == k.len)
        {
            Some(p) => {
                let s = &mut self.shapes[p];
                s.counts[i] = s.counts[i].saturating_add_signed(delta);
                if s.counts == [0; 3] {
                    self.shapes.remove(p);
                }
            }
            None if delta > 0 => {
                let mut counts = [0; 3];
                counts[i] = 1;
                let at = self.shapes.partition_point(|s| s.len > k.len);
                self.shapes.insert(
                    at,
                    Shape {
                        v6: k.v6,
                        len: k.len,
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
        let (addr, v6) = bits(h.dst_ip);
        let mut best: Option<(Priority, u64, u32)> = None;
        for s in self.shapes.iter().filter(|s| s.v6 == v6) {
            let m = mask(addr, v6, s.len);
            let probes = [
                (u16::from(h.proto), u32::from(h.dst_port)),
                (u16::from(h.proto), ANY_PORT),
                (ANY_PROTO, ANY_PORT),
            ];
            for (i, (proto, port)) in probes.into_iter().enumerate() {
                if s.counts[i] == 0 {
                    continue;
                }
                let k = BucketKey {
                    addr: m,
                    v6,
                    len: s.len,
                    proto,
                    port,
                };
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
