//! Services, EndpointSlices and Nodes from a kube API server (the shared `kubesrc` watcher).

use std::path::Path;

use kubesrc::Kinds;
use tokio::sync::watch;

use super::Snapshot;

/// Connects with the kubeconfig at `path` and watches; snapshots flow on the returned channel.
pub async fn watch(path: &Path) -> Result<watch::Receiver<Snapshot>, String> {
    let objects = kubesrc::kube::watch(path, Kinds::default()).await?;
    Ok(super::follow(objects))
}
