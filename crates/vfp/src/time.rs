//! Time as the engine sees it: a caller-supplied monotonic timestamp. The engine never reads a
//! clock, so that processing is deterministic and tests can step time explicitly.

use std::time::Duration;

/// A point on the caller's monotonic clock, in nanoseconds since an arbitrary origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp `secs` seconds after the origin.
    pub fn from_secs(secs: u64) -> Timestamp {
        Timestamp(secs.saturating_mul(1_000_000_000))
    }

    /// The timestamp `ms` milliseconds after the origin.
    pub fn from_millis(ms: u64) -> Timestamp {
        Timestamp(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the origin.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`; zero if `earlier` is later (a clock that went backwards).
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// This timestamp moved forward by `d`.
    pub fn after(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_nanos().min(u128::from(u64::MAX)) as u64),
        )
    }
}
