//! `winnet policy --mode nftables`: the same NetworkPolicies enforced on a Linux node, in one
//! table of the agent's own ([`ruleset::TABLE`]) replaced whole in one transaction when it
//! changes, and removed when the agent stops. Nothing before the source is read whole.

pub mod ruleset;

use std::future::Future;
use std::sync::Arc;

use kubesrc::Source;

use crate::cluster::Cluster;
use crate::metrics::{self, Health};

pub use ruleset::{TABLE, ruleset};

/// Replaces the agent's table with `rules` atomically (made first when absent, so that
/// deleting it cannot fail); the error says what nft said.
pub fn install(rules: &str) -> Result<(), String> {
    nft(&format!(
        "table inet {TABLE}\ndelete table inet {TABLE}\n{rules}"
    ))
}

/// Removes the agent's table, if there is one.
pub fn remove() -> Result<(), String> {
    nft(&format!("table inet {TABLE}\ndelete table inet {TABLE}\n"))
}

fn nft(script: &str) -> Result<(), String> {
    host::nft::apply(script).map_err(|e| format!("nft refused the NetworkPolicy rules: {e}"))
}

/// Installs `cluster`'s table for `node` unless `installed` is it already.
pub fn sync(cluster: &Cluster, node: &str, installed: &mut Option<String>) -> Result<bool, String> {
    let rules = ruleset(cluster, node);
    if installed.as_deref() == Some(rules.as_str()) {
        return Ok(false);
    }
    install(&rules)?;
    *installed = Some(rules);
    Ok(true)
}

/// Runs the nftables mode until `shutdown` completes, then removes its table.
pub async fn run(
    source: Source,
    node: String,
    healthz_bind: Option<std::net::SocketAddr>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), String> {
    tokio::pin!(shutdown);
    let mut objects = kubesrc::watch(&source, crate::agent::kinds()).await?;
    let health = Arc::new(Health::default());
    if let Some(addr) = healthz_bind {
        metrics::serve(addr, Arc::clone(&health));
    }
    let mut cluster = tokio::select! {
        c = crate::agent::first_synced(&mut objects, &health) => c.ok_or("the object source stopped")?,
        _ = &mut shutdown => return Ok(()),
    };
    let mut installed = None;
    let result = loop {
        for p in &cluster.problems {
            tracing::warn!("{p}");
        }
        match sync(&cluster, &node, &mut installed) {
            Ok(true) => tracing::info!(
                policies = cluster.policies.len(),
                "installed the NetworkPolicy table"
            ),
            Ok(false) => {}
            // Kept as it was; the next change tries again.
            Err(e) => tracing::error!("{e}"),
        }
        health.synced();
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            changed = objects.changed() => {
                if changed.is_err() {
                    break Err("the object source stopped".to_string());
                }
                cluster = Cluster::from_objects(&objects.borrow_and_update());
            }
        }
    };
    remove()?;
    result
}
