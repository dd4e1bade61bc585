//! `GET /linux/changes?since=N`: which HNS objects changed after revision `N` of an hnsd, so
//! that an agent can keep what it read once and re-read only what others changed (kube-proxy
//! keeps the network's local endpoints and the network this way instead of listing them each
//! sync). A winnet extension: HCN has no such query.

use hcn::{Guid, Kind};
use serde::{Deserialize, Serialize};

/// The route.
pub const PATH: &str = "/linux/changes";

/// What changed after the asked revision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Changes {
    /// Names this run of hnsd: revisions of another run (hnsd restarted) mean nothing here.
    pub epoch: Guid,
    /// The revision the answer is complete up to: ask with it next time.
    pub revision: u64,
    /// False when hnsd no longer remembers every change since the asked revision (or the
    /// revision is not one of this run): the caller must read what it keeps afresh.
    pub complete: bool,
    /// The objects written or deleted, oldest first; an object may appear more than once.
    pub changes: Vec<Changed>,
}

/// One object written or deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Changed {
    /// The kind as the API paths name it: `networks`, `endpoints`, `namespaces`,
    /// `loadbalancers`, `routes`.
    pub kind: String,
    #[serde(rename = "ID")]
    pub id: Guid,
    pub deleted: bool,
}

impl Changed {
    /// Whether this is an object of `kind`.
    pub fn is(&self, kind: Kind) -> bool {
        self.kind == kind.plural()
    }
}

impl Changes {
    /// Whether these changes follow on from `epoch`/`revision` without a gap.
    pub fn continues(&self, epoch: Guid) -> bool {
        self.complete && self.epoch == epoch
    }
}
