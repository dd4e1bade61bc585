//! Services, EndpointSlices and Nodes from a kube API server (the shared `kubesrc` watcher).

use std::path::Path;
use std::time::Duration;

use kubesrc::Kinds;
use tokio::sync::watch;

use super::Snapshot;

/// How long a burst of events may settle before the proxy syncs.
const SETTLE: Duration = Duration::from_millis(100);

/// Connects with the kubeconfig at `path` and watches; snapshots flow on the returned channel.
pub async fn watch(path: &Path) -> Result<watch::Receiver<Snapshot>, String> {
    let objects = kubesrc::kube::watch(path, Kinds::default(), SETTLE).await?;
    Ok(super::follow(objects))
}
