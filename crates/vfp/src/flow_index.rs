//! The flow table's index: from a key's hash to the slot (and side) of the record holding the
//! key. An open-addressing table of 64-bit words with linear probing: each word holds the
//! upper 32 bits of the key's hash (its tag; its low bits are also the word's home position)
//! and the slot and side. A lookup reads one word — usually one cache line — and goes to the
//! record only when the 32-bit tag agrees, so a hit costs one access to the index and one to
//! the record. (A general hash table keeps its control bytes and its entries apart, and calls
//! the comparison through a function pointer: two accesses and a call before the record.)
//! Removal shifts the following words back (Knuth's Algorithm R), so no tombstones
//! accumulate and lookups never slow down with churn. Memory: 8 bytes per key at a load of
//! 3/8 to 3/4, i.e. 21 to 43 bytes per connection (two keys).

/// The word of an empty position: no slot value is all ones (slots stay below 2^31 - 1).
const EMPTY: u64 = u64::MAX;

/// Entries per position at most: the table doubles beyond 3/4 full. Linear probing reads
/// (1 + 1/(1 - load)) / 2 words on average for a hit: 2.5 at 3/4, 4.5 at 7/8.
const MAX_LOAD: (usize, usize) = (3, 4);

/// The index: words at power-of-two positions, `mask` = positions - 1.
#[derive(Debug, Clone)]
pub(crate) struct FlowIndex {
    words: Vec<u64>,
    mask: usize,
    len: usize,
}

/// The values stored under one tag, in probe order (a loop written out where it is used: no
/// comparison through a closure the compiler might keep out of line).
pub(crate) struct Candidates<'a> {
    words: &'a [u64],
    mask: usize,
    at: usize,
    tag: u32,
}

impl Iterator for Candidates<'_> {
    type Item = u32;

    #[inline(always)]
    fn next(&mut self) -> Option<u32> {
        loop {
            let w = *self.words.get(self.at)?;
            if w == EMPTY {
                return None;
            }
            self.at = (self.at + 1) & self.mask;
            if (w >> 32) as u32 == self.tag {
                return Some(w as u32);
            }
        }
    }
}

/// The part of a 64-bit hash the index keeps.
#[inline(always)]
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32
}

#[inline(always)]
fn word(tag: u32, value: u32) -> u64 {
    u64::from(tag) << 32 | u64::from(value)
}

impl Default for FlowIndex {
    fn default() -> Self {
        FlowIndex::with_positions(8)
    }
}

impl FlowIndex {
    fn with_positions(n: usize) -> FlowIndex {
        let n = n.next_power_of_two().max(8);
        FlowIndex {
            words: vec![EMPTY; n],
            mask: n - 1,
            len: 0,
        }
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.words.capacity() * std::mem::size_of::<u64>()
    }

    /// Makes room for `n` more entries without growing.
    pub fn reserve(&mut self, n: usize) {
        let want = self.len.saturating_add(n);
        if want * MAX_LOAD.1 > self.words.len() * MAX_LOAD.0 {
            self.resize(want);
        }
    }

    /// The values stored under `hash` (nearly always one), in probe order: each must be checked
    /// against its record, as another key may share the tag.
    #[inline(always)]
    pub fn candidates(&self, hash: u64) -> Candidates<'_> {
        let tag = tag(hash);
        Candidates {
            words: &self.words,
            mask: self.mask,
            at: tag as usize & self.mask,
            tag,
        }
    }

    /// The first of `candidates(hash)` for which `is` holds.
    #[cfg(test)]
    pub fn find(&self, hash: u64, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        self.candidates(hash).find(|&v| is(v))
    }

    /// Adds `value` under `hash` (the caller has made sure it is not there).
    pub fn insert(&mut self, hash: u64, value: u32) {
        self.reserve(1);
        self.place(word(tag(hash), value));
        self.len += 1;
    }

    /// Puts a word at the first free position from its home (there is one: the table is never
    /// full).
    fn place(&mut self, w: u64) {
        let mut i = (w >> 32) as usize & self.mask;
        while let Some(slot) = self.words.get_mut(i) {
            if *slot == EMPTY {
                *slot = w;
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Removes `value` stored under `hash`; false if it was not there.
    pub fn remove(&mut self, hash: u64, value: u32) -> bool {
        let w = word(tag(hash), value);
        let mut i = tag(hash) as usize & self.mask;
        loop {
            match self.words.get(i) {
                Some(&x) if x == w => break,
                Some(&x) if x != EMPTY => i = (i + 1) & self.mask,
                _ => return false,
            }
        }
        self.len -= 1;
        // Algorithm R: empty position `i`, then move back any later word of the run whose home
        // is not cyclically in (i, j], so that every word stays reachable from its home.
        loop {
            self.words[i] = EMPTY;
            let mut j = i;
            loop {
                j = (j + 1) & self.mask;
                let x = self.words[j];
                if x == EMPTY {
                    return true;
                }
                let home = (x >> 32) as usize & self.mask;
                let stays = if i <= j {
                    i < home && home <= j
                } else {
                    i < home || home <= j
                };
                if !stays {
                    self.words[i] = x;
                    i = j;
                    break;
                }
            }
        }
    }

    /// Grows to hold `n` entries within the load limit; words are placed again from their
    /// tags, without the records.
    fn resize(&mut self, n: usize) {
        let positions = (n * MAX_LOAD.1).div_ceil(MAX_LOAD.0);
        let old = std::mem::replace(self, FlowIndex::with_positions(positions));
        self.len = old.len;
        for w in old.words.into_iter().filter(|&w| w != EMPTY) {
            self.place(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Hashes whose tags fall on few home positions, so that long runs form and are cut by
    /// removals: half near the start of the table, half (sharing seven tags) near its end, so
    /// that their runs wrap round.
    fn hash(k: u16) -> u64 {
        let tag = if k.is_multiple_of(2) {
            0xffff_fff8 | u32::from(k % 7)
        } else {
            u32::from(k % 7) | u32::from(k) << 16
        };
        u64::from(tag) << 32 | 0x1234
    }

    proptest! {
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((any::<bool>(), 0u16..300), 1..400)) {
            let mut index = FlowIndex::default();
            let mut model: HashMap<u16, u32> = HashMap::new();
            for (insert, k) in ops {
                let v = u32::from(k) * 3;
                if insert && !model.contains_key(&k) {
                    index.insert(hash(k), v);
                    model.insert(k, v);
                } else if !insert {
                    prop_assert_eq!(index.remove(hash(k), v), model.remove(&k).is_some());
                }
                prop_assert_eq!(index.len(), model.len());
            }
            for k in 0u16..300 {
                let found = index.find(hash(k), |v| v == u32::from(k) * 3);
                prop_assert_eq!(found, model.get(&k).copied());
            }
        }
    }

    #[test]
    fn a_run_wrapping_round_the_end_survives_removals() {
        let mut index = FlowIndex::default();
        // Eight positions; homes 6, 6, 7, 6 run over the end into 0 and 1.
        let h = |home: u64, k: u64| (home | k << 8) << 32;
        for (k, home) in [(1, 6), (2, 6), (3, 7), (4, 6)] {
            index.insert(h(home, k), k as u32);
        }
        assert!(index.remove(h(6, 1), 1));
        assert!(!index.remove(h(6, 1), 1));
        for (k, home) in [(2, 6), (3, 7), (4, 6)] {
            assert_eq!(index.find(h(home, k), |v| v == k as u32), Some(k as u32));
        }
        // The same tag, another value: the comparison tells them apart.
        index.insert(h(6, 2), 9);
        assert_eq!(index.find(h(6, 2), |v| v == 9), Some(9));
        assert_eq!(index.find(h(6, 2), |v| v == 2), Some(2));
    }

    #[test]
    fn grows_past_the_load_limit_and_keeps_every_entry() {
        let mut index = FlowIndex::default();
        for k in 0..10_000u64 {
            index.insert(k.wrapping_mul(0x9e37_79b9_7f4a_7c15), k as u32);
        }
        assert_eq!(index.len(), 10_000);
        assert!(index.memory_bytes() <= 16_384 * 8 * 2);
        for k in 0..10_000u64 {
            let h = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            assert_eq!(index.find(h, |v| v == k as u32), Some(k as u32));
        }
    }
}
