//! Lowest-free allocation in O(log n): HNS IPAM hands out the lowest free address of a subnet
//! and the lowest free MAC of a pool; scanning from the start each time made a create O(n).

use std::collections::BTreeSet;

/// Which numbers of `first..=last` are free, kept so that the lowest free one is found without
/// a scan. Invariant: every number below `next` is in use (or reserved) unless it is in
/// `holes`, and `next` itself is not in use.
#[derive(Clone, Debug)]
pub(super) struct LowestFree {
    first: u128,
    last: u128,
    next: u128,
    holes: BTreeSet<u128>,
}

impl LowestFree {
    /// An allocator over `first..=last`; `in_use` says which numbers are taken already.
    pub(super) fn new(first: u128, last: u128, in_use: impl Fn(u128) -> bool) -> LowestFree {
        let mut pool = LowestFree {
            first,
            last,
            next: first,
            holes: BTreeSet::new(),
        };
        pool.advance(in_use);
        pool
    }

    /// The lowest free number that is not in `also_taken` (numbers planned in the same write
    /// but not yet applied); O(len of `also_taken`) steps.
    pub(super) fn lowest_except(
        &self,
        also_taken: &[u128],
        in_use: impl Fn(u128) -> bool,
    ) -> Option<u128> {
        let holes = self.holes.iter().copied();
        holes
            .chain(self.next..=self.last)
            .find(|n| !also_taken.contains(n) && !in_use(*n))
    }

    /// `n` is now in use (`in_use` already says so).
    pub(super) fn taken(&mut self, n: u128, in_use: impl Fn(u128) -> bool) {
        self.holes.remove(&n);
        if n == self.next {
            self.advance(in_use);
        }
    }

    /// `n` is free again.
    pub(super) fn freed(&mut self, n: u128) {
        if (self.first..self.next).contains(&n) {
            self.holes.insert(n);
        }
    }

    fn advance(&mut self, in_use: impl Fn(u128) -> bool) {
        while self.next <= self.last && in_use(self.next) {
            self.next += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Op {
        /// Take the lowest free number, as HNS IPAM does.
        Allocate,
        /// Take a given number, as a create with an explicit address does.
        Take(u128),
        Free(u128),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Allocate),
            1 => (0u128..40).prop_map(Op::Take),
            2 => (0u128..40).prop_map(Op::Free),
        ]
    }

    proptest! {
        /// The allocator agrees with a scan from the start after any mix of operations.
        #[test]
        fn agrees_with_a_scan(
            initially in proptest::collection::btree_set(0u128..40, 0..20),
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let (first, last) = (2u128, 37u128);
            let mut used: BTreeSet<u128> = initially;
            let mut pool = LowestFree::new(first, last, |n| used.contains(&n));
            for op in ops {
                let scan = (first..=last).find(|n| !used.contains(n));
                let lowest = pool.lowest_except(&[], |n| used.contains(&n));
                prop_assert_eq!(lowest, scan);
                let also: Vec<u128> = scan.into_iter().collect();
                let second = (first..=last).find(|n| !used.contains(n) && !also.contains(n));
                prop_assert_eq!(pool.lowest_except(&also, |n| used.contains(&n)), second);
                match op {
                    Op::Allocate => if let Some(n) = lowest {
                        used.insert(n);
                        pool.taken(n, |m| used.contains(&m));
                    },
                    Op::Take(n) => if used.insert(n) {
                        pool.taken(n, |m| used.contains(&m));
                    },
                    Op::Free(n) => if used.remove(&n) {
                        pool.freed(n);
                    },
                }
            }
        }
    }
}
