//! Services, EndpointSlices and Nodes from a folder of manifests (the shared `kubesrc` reader).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubesrc::Objects;
use tokio::sync::watch;

use super::Snapshot;

/// How often the folder is checked for changes.
pub const POLL: Duration = Duration::from_millis(500);

/// Reads every manifest in `dir` into a snapshot.
pub fn load(dir: &Path) -> Snapshot {
    Snapshot::from_objects(&kubesrc::manifests::load(dir))
}

/// Parses one file's documents into `snap`.
pub fn load_text(text: &str, origin: &str, snap: &mut Snapshot) {
    let mut objects = Objects::default();
    kubesrc::manifests::load_text(text, origin, &mut objects);
    snap.absorb(&objects);
}

/// Watches `dir`: sends a snapshot now and after every change, until the receiver goes.
pub fn watch(dir: PathBuf) -> watch::Receiver<Snapshot> {
    super::follow(kubesrc::manifests::watch(dir, POLL))
}
