//! The change log behind `GET /linux/changes`: each committed batch is one revision, and the
//! objects it wrote or deleted are remembered for the last [`KEEP`] changes, so that an agent
//! that keeps what it read can ask what others changed since instead of listing again.

use std::collections::VecDeque;

use hcn::Guid;
use hns_client::changes::{Changed, Changes};

use crate::state::Change;

/// How many changes are remembered: more than one full sync of 10,000 Services writes (their
/// load balancers and remote endpoints), so an agent that falls behind by one sync still
/// catches up without listing.
pub const KEEP: usize = 65_536;

/// The recent changes of this run of hnsd.
pub struct ChangeLog {
    epoch: Guid,
    revision: u64,
    /// (revision, change), oldest first.
    recent: VecDeque<(u64, Changed)>,
    /// The newest revision some of whose changes were forgotten.
    forgotten: u64,
}

impl Default for ChangeLog {
    fn default() -> Self {
        ChangeLog {
            epoch: Guid::new_v4(),
            revision: 0,
            recent: VecDeque::new(),
            forgotten: 0,
        }
    }
}

impl ChangeLog {
    /// Records one committed batch as the next revision.
    pub fn record(&mut self, batch: &[Change]) {
        self.revision += 1;
        for c in batch {
            let (kind, id, deleted) = match c {
                Change::Put(o) => (o.kind(), o.id(), false),
                Change::Delete(kind, id) => (*kind, *id, true),
            };
            if self.recent.len() == KEEP
                && let Some((rev, _)) = self.recent.pop_front()
            {
                self.forgotten = rev;
            }
            let changed = Changed {
                kind: kind.plural().to_string(),
                id,
                deleted,
            };
            self.recent.push_back((self.revision, changed));
        }
    }

    /// The changes after revision `since`; without it, none (only where the log stands).
    pub fn since(&self, since: Option<u64>) -> Changes {
        let mut answer = Changes {
            epoch: self.epoch,
            revision: self.revision,
            complete: true,
            changes: Vec::new(),
        };
        let Some(since) = since else {
            return answer;
        };
        if since < self.forgotten || since > self.revision {
            answer.complete = false;
            return answer;
        }
        let start = self.recent.partition_point(|(rev, _)| *rev <= since);
        answer.changes = self.recent.range(start..).map(|(_, c)| c.clone()).collect();
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Object;
    use hcn::{Endpoint, Kind};

    fn put(id: Guid) -> Change {
        Change::Put(Object::Endpoint(Endpoint {
            id,
            ..Endpoint::default()
        }))
    }

    #[test]
    fn answers_what_changed_after_a_revision() {
        let mut log = ChangeLog::default();
        let (a, b) = (Guid::new_v4(), Guid::new_v4());
        let start = log.since(None);
        assert_eq!((start.revision, start.complete), (0, true));
        log.record(&[put(a)]);
        log.record(&[put(b), Change::Delete(Kind::Endpoint, a)]);
        let all = log.since(Some(0));
        assert!(all.complete && all.epoch == start.epoch);
        assert_eq!(all.revision, 2);
        let seen: Vec<(Guid, bool)> = all.changes.iter().map(|c| (c.id, c.deleted)).collect();
        assert_eq!(seen, vec![(a, false), (b, false), (a, true)]);
        assert!(all.changes.iter().all(|c| c.is(Kind::Endpoint)));
        let later = log.since(Some(1));
        assert_eq!(later.changes.len(), 2);
        assert!(log.since(Some(2)).changes.is_empty());
    }

    #[test]
    fn a_revision_it_cannot_answer_for_is_incomplete() {
        let mut log = ChangeLog::default();
        // A revision from the future (another run of hnsd) is not this run's.
        assert!(!log.since(Some(7)).complete);
        for _ in 0..KEEP + 1 {
            log.record(&[put(Guid::new_v4())]);
        }
        // The first revision's change was forgotten: revision 0 cannot be answered for.
        assert!(!log.since(Some(0)).complete);
        let from_one = log.since(Some(1));
        assert!(from_one.complete);
        assert_eq!(from_one.changes.len(), KEEP);
    }
}
