//! The unified flow table: one record per connection holding the headers it entered with and
//! the headers it leaves with, indexed under two keys — the forward key and the reverse key —
//! so that packets of both directions find the composite transposition with one lookup.
//!
//! Memory: records live in a slab of fixed-size chunks, and the hash index (`flow_index`) stores
//! one 64-bit word per key (a hash tag, the slot and the side); keys are compared against the
//! record itself. That keeps the index at 11 to 21 bytes per key (8-byte words, 3/8 to 3/4 of
//! them in use) instead of repeating a 40-byte key twice per connection.

use crate::flow_index::FlowIndex;
pub use crate::flow_record::FlowRecord;
use crate::flow_record::WireKey;
use crate::headers::{FlowKey, hash_v4};
use crate::tcp_state::FlowSide;

const SIDE_BIT: u32 = 1 << 31;

/// A slab entry, aligned to a cache line so that a record's first two lines (all the fast
/// path reads) are two lines of memory. An empty slot holds a vacant record rather than being
/// an `Option`: the compiler would choose where the `Option` keeps its tag, and a tag in the
/// third line would cost every lookup a line.
#[derive(Debug, Clone)]
#[repr(align(64))]
struct Slot(FlowRecord);

impl Default for Slot {
    fn default() -> Self {
        Slot(FlowRecord::vacant())
    }
}

/// Slots per slab chunk (a power of two; 1024 x 192 bytes = 192 KiB).
const CHUNK: usize = 1024;

/// Records in fixed-size chunks: growing never moves a record (no multi-megabyte copy on the
/// data path) and never leaves more than one chunk unused, where a doubling `Vec` can leave
/// half its capacity idle.
#[derive(Debug, Default)]
struct Slab {
    /// Fixed-size arrays, so that indexing within a chunk needs no length check.
    chunks: Vec<Box<[Slot; CHUNK]>>,
    len: usize,
}

impl Slab {
    #[inline(always)]
    fn get(&self, i: usize) -> Option<&Slot> {
        // Slots past `len` in the last chunk are empty, as a removed one is: no check needed.
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    #[inline(always)]
    fn get_mut(&mut self, i: usize) -> Option<&mut Slot> {
        // As in `get`: a slot past `len` is empty (and only `insert` fills a slot, one it has
        // taken from the free list or `push_empty`).
        self.chunks.get_mut(i / CHUNK)?.get_mut(i % CHUNK)
    }

    /// Appends an empty slot and returns its index.
    fn push_empty(&mut self) -> usize {
        if self.len == self.capacity() {
            let chunk: Box<[Slot; CHUNK]> = vec![Slot::default(); CHUNK]
                .into_boxed_slice()
                .try_into()
                .unwrap_or_else(|_| unreachable!("a vector of CHUNK slots"));
            self.chunks.push(chunk);
        }
        self.len += 1;
        self.len - 1
    }

    fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK
    }

    fn reserve(&mut self, n: usize) {
        self.chunks.reserve(
            (self.len + n)
                .div_ceil(CHUNK)
                .saturating_sub(self.chunks.len()),
        );
    }
}

fn pack(slot: u32, side: FlowSide) -> u32 {
    match side {
        FlowSide::Forward => slot,
        FlowSide::Reverse => slot | SIDE_BIT,
    }
}

fn unpack(v: u32) -> (u32, FlowSide) {
    if v & SIDE_BIT == 0 {
        (v, FlowSide::Forward)
    } else {
        (v & !SIDE_BIT, FlowSide::Reverse)
    }
}

/// The table of cached connections, bounded in size.
#[derive(Debug)]
pub struct FlowTable {
    slab: Slab,
    free: Vec<u32>,
    index: FlowIndex,
    seed: u64,
    limit: usize,
    live: usize,
}

/// The table is at its connection limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

impl FlowTable {
    /// An empty table holding at most `limit` connections (at most 2^31 - 1), hashing with
    /// `seed` (a fixed seed keeps runs repeatable; a random one resists hash flooding).
    pub fn new(limit: usize, seed: u64) -> FlowTable {
        FlowTable {
            slab: Slab::default(),
            free: Vec::new(),
            index: FlowIndex::default(),
            seed,
            limit: limit.min((SIDE_BIT - 1) as usize),
            live: 0,
        }
    }

    /// Connections in the table.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True if no connection is cached.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The connection limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Pre-sizes the table for `n` connections, so that filling it does not rehash.
    pub fn reserve(&mut self, n: usize) {
        self.index.reserve(2 * n);
        self.slab.reserve(n);
    }

    /// Heap bytes held: the slab and the index, capacity included (what the table really
    /// costs, not only what it uses).
    pub fn memory_bytes(&self) -> usize {
        self.slab.capacity() * std::mem::size_of::<Slot>()
            + self.slab.chunks.capacity() * std::mem::size_of::<Box<[Slot; CHUNK]>>()
            + self.free.capacity() * 4
            + self.index.memory_bytes()
    }

    /// The hash of a key.
    #[inline(always)]
    pub fn hash(&self, key: &FlowKey) -> u64 {
        key.hash_with(self.seed)
    }

    /// Finds the connection a packet with `key` (hashed to `hash`) belongs to.
    #[inline(always)]
    pub fn find(&self, key: &FlowKey, hash: u64) -> Option<(u32, FlowSide)> {
        self.find_by(hash, |r, side| r.has_key(side, key))
    }

    /// The first candidate of `hash` whose record and side `matches` says is the one. Generic,
    /// and always inlined, so that each caller's comparison runs in this loop (no call).
    #[inline(always)]
    fn find_by(
        &self,
        hash: u64,
        matches: impl Fn(&FlowRecord, FlowSide) -> bool,
    ) -> Option<(u32, FlowSide)> {
        for v in self.index.candidates(hash) {
            let (slot, side) = unpack(v);
            if let Some(Slot(r)) = self.slab.get(slot as usize)
                && matches(r, side)
            {
                return Some((slot, side));
            }
        }
        None
    }

    /// The hash of a wire key (`FlowKey::hash_with` of the same key).
    #[inline]
    fn hash_wire(&self, k: &WireKey) -> u64 {
        let (ports, addrs) = (u32::from_be_bytes(k.ports), u64::from_be_bytes(k.addrs));
        hash_v4(self.seed, k.port, k.vni, k.proto, ports, addrs)
    }

    /// `find` for a wire key hashed to `hash`.
    fn find_wire(&self, k: &WireKey, hash: u64) -> Option<(u32, FlowSide)> {
        self.find_by(hash, |r, side| r.has_wire_key(side, k))
    }

    /// The hash of the key packets of `side` of `rec` arrive with, and the connection that
    /// holds that key now, if any.
    fn hash_and_find(&self, rec: &FlowRecord, side: FlowSide) -> (u64, Option<(u32, FlowSide)>) {
        match rec.wire_key(side) {
            Some(k) => {
                let h = self.hash_wire(&k);
                (h, self.find_wire(&k, h))
            }
            None => {
                let k = rec.key(side);
                let h = self.hash(&k);
                (h, self.find(&k, h))
            }
        }
    }

    /// The hash of a plain IPv4 frame's key (`FlowKey::hash_with` of the key `find_plain`
    /// takes), from its fields as the wire holds them.
    #[inline(always)]
    pub(crate) fn hash_plain(&self, port: u16, proto: u8, addrs: [u8; 8], ports: [u8; 4]) -> u64 {
        let (ports, addrs) = (u32::from_be_bytes(ports), u64::from_be_bytes(addrs));
        hash_v4(self.seed, port, 0, proto, ports, addrs)
    }

    /// `find` for a plain IPv4 frame entering at `port` (VNI 0) with these fields as the wire
    /// holds them (`FlowRecord::arrives_plain`); `hash` from `hash_plain`.
    #[inline(always)]
    pub(crate) fn find_plain(
        &self,
        port: u16,
        proto: u8,
        addrs: [u8; 8],
        ports: [u8; 4],
        hash: u64,
    ) -> Option<(u32, FlowSide)> {
        // `find_by`'s loop written out: through it the fast path ran 3 instructions more per
        // packet (callgrind, 393.3 -> 396.3).
        for v in self.index.candidates(hash) {
            let (slot, side) = unpack(v);
            if let Some(Slot(r)) = self.slab.get(slot as usize)
                && r.arrives_plain(side, port, proto, addrs, ports)
            {
                return Some((slot, side));
            }
        }
        None
    }

    /// The record in `slot`.
    #[inline(always)]
    pub fn get(&self, slot: u32) -> Option<&FlowRecord> {
        let r = &self.slab.get(slot as usize)?.0;
        (!r.is_vacant()).then_some(r)
    }

    /// The record in `slot`, writable (its keys must not change).
    #[inline(always)]
    pub fn get_mut(&mut self, slot: u32) -> Option<&mut FlowRecord> {
        let r = &mut self.slab.get_mut(slot as usize)?.0;
        (!r.is_vacant()).then_some(r)
    }

    /// Installs a connection under its forward key and, if stateful, its reverse key. Records
    /// already holding either key are displaced and returned, so the caller can release what
    /// they hold.
    pub fn insert(&mut self, rec: FlowRecord) -> Result<(u32, Vec<FlowRecord>), TableFull> {
        let mut displaced = Vec::new();
        let sides: &[FlowSide] = if rec.stateful() {
            &[FlowSide::Forward, FlowSide::Reverse]
        } else {
            &[FlowSide::Forward]
        };
        // Each key's hash, worked out once for the displacement and for the index.
        let mut hashes = [0; 2];
        for (&side, h) in sides.iter().zip(&mut hashes) {
            let (hash, holder) = self.hash_and_find(&rec, side);
            *h = hash;
            if let Some((slot, _)) = holder
                && let Some(old) = self.remove(slot)
            {
                displaced.push(old);
            }
        }
        if self.live >= self.limit {
            return Err(TableFull);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => self.slab.push_empty() as u32,
        };
        if let Some(s) = self.slab.get_mut(slot as usize) {
            s.0 = rec;
        }
        for (&side, h) in sides.iter().zip(hashes) {
            self.index.insert(h, pack(slot, side));
        }
        self.live += 1;
        Ok((slot, displaced))
    }

    /// Removes a connection and both its keys.
    pub fn remove(&mut self, slot: u32) -> Option<FlowRecord> {
        let s = self.slab.get_mut(slot as usize)?;
        if s.0.is_vacant() {
            return None;
        }
        let rec = std::mem::replace(&mut s.0, FlowRecord::vacant());
        for side in [FlowSide::Forward, FlowSide::Reverse] {
            let h = match rec.wire_key(side) {
                Some(k) => self.hash_wire(&k),
                None => self.hash(&rec.key(side)),
            };
            self.index.remove(h, pack(slot, side));
        }
        self.free.push(slot);
        self.live -= 1;
        Some(rec)
    }

    /// Slots of every live connection.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.slab.len)
            .filter(|&i| self.slab.get(i).is_some_and(|s| !s.0.is_vacant()))
            .map(|i| i as u32)
    }

    /// Bytes one record takes in the slab (its cache-line aligned slot).
    pub fn record_bytes() -> usize {
        std::mem::size_of::<Slot>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::Headers;
    use crate::wire::proto;

    fn rec(n: u16) -> FlowRecord {
        let orig = Headers {
            src_ip: "10.0.0.1".parse().unwrap(),
            dst_ip: "10.96.0.1".parse().unwrap(),
            proto: proto::TCP,
            src_port: n,
            dst_port: 80,
            ..Headers::empty()
        };
        let mut fin = orig;
        fin.dst_ip = "10.1.0.5".parse().unwrap();
        fin.dst_port = 8080;
        let mut r = FlowRecord::new(orig, fin);
        r.port_a = 1;
        r.port_b = 2;
        r
    }

    fn find(t: &FlowTable, k: FlowKey) -> Option<(u32, FlowSide)> {
        t.find(&k, t.hash(&k))
    }

    #[test]
    fn both_directions_find_the_record_until_removed() {
        let mut t = FlowTable::new(10, 1);
        let r = rec(1000);
        let (fk, rk) = (r.key(FlowSide::Forward), r.key(FlowSide::Reverse));
        assert_eq!(rk.src_port, 8080);
        assert_eq!(rk.port, 2);
        let (slot, displaced) = t.insert(r).unwrap();
        assert!(displaced.is_empty());
        assert_eq!(find(&t, fk), Some((slot, FlowSide::Forward)));
        assert_eq!(find(&t, rk), Some((slot, FlowSide::Reverse)));
        assert!(t.remove(slot).is_some());
        assert_eq!(find(&t, fk), None);
        assert_eq!(find(&t, rk), None);
        assert!(t.is_empty());
    }

    #[test]
    fn limit_refuses_and_duplicate_keys_displace() {
        let mut t = FlowTable::new(2, 1);
        t.insert(rec(1)).unwrap();
        t.insert(rec(2)).unwrap();
        assert_eq!(t.insert(rec(3)).unwrap_err(), TableFull);
        let (_, displaced) = t.insert(rec(2)).unwrap();
        assert_eq!(displaced.len(), 1);
        assert_eq!(t.len(), 2);
        let mut stateless = rec(9);
        stateless.set_stateful(false);
        t.remove(0);
        t.insert(stateless.clone()).unwrap();
        assert!(find(&t, stateless.key(FlowSide::Reverse)).is_none());
    }

    #[test]
    fn a_wire_key_hashes_as_its_flow_key() {
        let t = FlowTable::new(10, 0x5eed);
        for n in [0u16, 1, 80, 40_000, u16::MAX] {
            let mut r = rec(n);
            r.rev_outer = Some(std::sync::Arc::new(crate::encap::Encap {
                vni: u32::from(n) << 4,
                src_mac: crate::wire::MacAddr([2, 0, 0, 0, 0, 1]),
                dst_mac: crate::wire::MacAddr([2, 0, 0, 0, 0, 2]),
                src_ip: "192.168.1.5".parse().unwrap(),
                dst_ip: "192.168.1.2".parse().unwrap(),
                udp_port: 4789,
            }));
            for side in [FlowSide::Forward, FlowSide::Reverse] {
                let k = r.wire_key(side).unwrap();
                assert_eq!(t.hash_wire(&k), t.hash(&r.key(side)), "{side:?} of {n}");
                assert_eq!(Some(k), WireKey::of(&r.key(side)));
                assert!(r.has_wire_key(side, &k));
            }
        }
    }

    #[test]
    fn record_fits_the_memory_budget_and_the_slab_never_moves_records() {
        // DESIGN.md §6: <= 256 bytes per cached flow; the index adds 2 x 8 bytes / its load.
        assert_eq!(std::mem::size_of::<Slot>(), 192);
    }
}
