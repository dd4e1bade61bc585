//! kube-proxy's `nftables` mode, for the Linux nodes of a mixed cluster
//! (`winnet proxy --proxy-mode nftables`): the same Services and EndpointSlices the Windows
//! proxier reads, rendered as kube-proxy's nftables tables ([`ruleset`]) and installed in one
//! transaction whenever they change ([`nft`]); the health check node ports and `/healthz` are
//! the shared health servers'.

pub mod nft;
pub mod ruleset;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::health::{self, Health, ServiceHealth};
use crate::proxier::{ProxyError, SourceConfig};
use crate::source::{self, Snapshot};

pub use ruleset::{LinuxNode, TABLE};

/// What the nftables proxier is started with.
#[derive(Clone, Debug)]
pub struct Config {
    pub node: LinuxNode,
    pub source: SourceConfig,
    pub healthz_bind: Option<SocketAddr>,
    pub metrics_bind: Option<SocketAddr>,
}

/// Runs the nftables proxier until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
    tokio::pin!(shutdown);
    let mut snapshots = match &config.source {
        SourceConfig::Manifests(dir) => source::manifests::watch(dir.clone()),
        SourceConfig::Kubeconfig(path) => source::kube::watch(path)
            .await
            .map_err(ProxyError::Startup)?,
    };
    let health = Arc::new(Health::default());
    if let Some(addr) = config.healthz_bind {
        health::serve(addr, Arc::clone(&health), false);
    }
    if let Some(addr) = config.metrics_bind {
        health::serve(addr, Arc::clone(&health), true);
    }
    let mut checks = ServiceHealth::default();
    checks.listen();
    let mut installed: Option<String> = None;
    // The tables are replaced whole: nothing is installed before the source is read whole.
    tokio::select! {
        s = source::first_synced(&mut snapshots, |s| health.metrics.set_source(s)) => {
            s.ok_or_else(crate::proxier::stopped)?
        }
        _ = &mut shutdown => return Ok(()),
    };
    loop {
        let snapshot = snapshots.borrow_and_update().clone();
        health.metrics.set_source(&snapshot);
        sync(
            &config.node,
            &snapshot,
            &mut installed,
            &health,
            &mut checks,
        )
        .await;
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            changed = snapshots.changed() => {
                if changed.is_err() {
                    return Err(crate::proxier::stopped());
                }
            }
        }
    }
}

/// Installs the ruleset of `snapshot` unless it is what is installed, and updates the health
/// checks.
async fn sync(
    node: &LinuxNode,
    snapshot: &Snapshot,
    installed: &mut Option<String>,
    health: &Health,
    checks: &mut ServiceHealth,
) {
    for p in &snapshot.problems {
        tracing::warn!("{p}");
    }
    let rules = ruleset::ruleset(snapshot, node);
    if installed.as_deref() != Some(rules.as_str()) {
        let text = rules.clone();
        let done = tokio::task::spawn_blocking(move || nft::replace(&text))
            .await
            .unwrap_or_else(|e| Err(format!("nft: {e}")));
        match done {
            Ok(()) => {
                tracing::info!(
                    services = snapshot.services.len(),
                    "installed the nftables rules"
                );
                *installed = Some(rules);
            }
            Err(e) => {
                // Kept as it was; the next change tries again.
                tracing::error!("{e}");
                return;
            }
        }
    }
    checks.update(&local_endpoints(node, snapshot));
    health.synced();
}

/// Health check node port -> (Service, this node's ready endpoints), for the Services with
/// externalTrafficPolicy Local that have one.
fn local_endpoints(
    node: &LinuxNode,
    snapshot: &Snapshot,
) -> HashMap<u16, (crate::model::ServiceKey, usize)> {
    let by_service = snapshot.slices_by_service();
    snapshot
        .services
        .values()
        .filter(|s| s.external_policy_local)
        .filter_map(|s| {
            let port = s.health_check_node_port?;
            let local = by_service
                .get(&s.key)
                .into_iter()
                .flatten()
                .flat_map(|slice| &slice.endpoints)
                .filter(|e| e.ready && e.node_name.as_deref() == Some(node.hostname.as_str()))
                .count();
            Some((port, (s.key.clone(), local)))
        })
        .collect()
}
