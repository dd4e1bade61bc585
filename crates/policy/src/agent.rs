//! The agent's loop: the shared source's objects -> [`Cluster`] -> plan -> reconciler, once
//! the source has been read whole (nothing is programmed or removed before: an unreadable
//! source is not "no policies"), then on every change, and again soon while a local pod waits
//! for its endpoint or an HNS call failed.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hns_client::Client;
use ipnet::IpNet;
use kubesrc::{Kinds, Objects, Source};
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::metrics::{self, Health};
use crate::planner::{NodeContext, Plan, plan};
use crate::problem::Style;
use crate::reconciler::{Reconciler, SyncReport};

/// How soon a sync that left something pending is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// What `winnet policy` is started with.
#[derive(Clone, Debug)]
pub struct Config {
    pub style: Style,
    /// The node whose pods are programmed (`--node`).
    pub node: String,
    /// The HNS network of the pods.
    pub network_name: String,
    pub hns_socket: PathBuf,
    pub source: Source,
    /// The node's addresses (calico's node -> endpoint Allow).
    pub host_addresses: Vec<IpNet>,
    pub healthz_bind: Option<SocketAddr>,
}

/// The kinds the agent watches.
pub fn kinds() -> Kinds {
    Kinds {
        namespaces: true,
        pods: true,
        network_policies: true,
    }
}

/// One agent: its plan inputs and what it last did.
pub struct Agent {
    reconciler: Reconciler,
    context: NodeContext,
    style: Style,
    health: Arc<Health>,
    reported: BTreeSet<String>,
}

impl Agent {
    pub fn new(client: Arc<Client>, config: &Config) -> Agent {
        Agent {
            reconciler: Reconciler::new(client, &config.network_name, config.style),
            context: NodeContext {
                node: config.node.clone(),
                host_addresses: config.host_addresses.clone(),
            },
            style: config.style,
            health: Arc::new(Health::default()),
            reported: BTreeSet::new(),
        }
    }

    pub fn health(&self) -> Arc<Health> {
        Arc::clone(&self.health)
    }

    /// Plans `cluster` and applies it; logs each new problem once.
    pub async fn sync(&mut self, cluster: &Cluster) -> (Plan, SyncReport) {
        let started = Instant::now();
        let plan = plan(cluster, &self.context, self.style);
        // Each local pod once, by the address its endpoint is found by (a dual-stack
        // endpoint's IPv6 address must not read as a second pod with no ACLs).
        let local: BTreeMap<IpAddr, String> = plan
            .endpoints
            .iter()
            .map(|(ip, e)| (*ip, e.pod.clone()))
            .collect();
        let report = self.reconciler.sync(&plan, &local).await;
        let m = &self.health.metrics;
        m.sync_duration.observe(started.elapsed().as_secs_f64());
        m.acl_rules
            .set(i64::try_from(plan.rule_count()).unwrap_or(i64::MAX));
        m.set_skipped(&plan.problems);
        m.endpoint_updates.inc_by(report.endpoints_updated as u64);
        m.hns_calls.inc_by(report.hns_calls as u64);
        m.sync_errors.inc_by(report.errors.len() as u64);
        m.syncs.inc();
        let lines = plan
            .problems
            .iter()
            .map(ToString::to_string)
            .chain(cluster.problems.iter().cloned())
            .chain(report.errors.iter().cloned());
        for line in lines {
            if self.reported.insert(line.clone()) {
                tracing::warn!("{line}");
            }
        }
        if report.endpoints_updated + report.sets_added + report.sets_removed > 0 {
            tracing::info!(
                updated = report.endpoints_updated,
                unchanged = report.endpoints_unchanged,
                sets_added = report.sets_added,
                sets_removed = report.sets_removed,
                took_ms = started.elapsed().as_millis() as u64,
                "synced endpoint ACLs"
            );
        }
        self.health.synced();
        (plan, report)
    }
}

/// Runs the agent until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), String> {
    tokio::pin!(shutdown);
    let mut objects = kubesrc::watch(&config.source, kinds()).await?;
    let client = Arc::new(Client::new(&config.hns_socket));
    check_hns(&client, config.style).await?;
    let mut agent = Agent::new(client, &config);
    if let Some(addr) = config.healthz_bind {
        metrics::serve(addr, agent.health());
    }
    let health = agent.health();
    let mut cluster = tokio::select! {
        c = first_synced(&mut objects, &health) => c.ok_or("the object source stopped")?,
        _ = &mut shutdown => return Ok(()),
    };
    let mut retry = agent.sync(&cluster).await.1.needs_retry();
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            changed = objects.changed() => {
                changed.map_err(|_| "the object source stopped")?;
                cluster = Cluster::from_objects(&objects.borrow_and_update());
                set_source(&health, &cluster);
                retry = agent.sync(&cluster).await.1.needs_retry();
            }
            _ = tokio::time::sleep(RETRY), if retry => {
                retry = agent.sync(&cluster).await.1.needs_retry();
            }
        }
    }
}

/// What the style needs of HNS: npm names SetPolicy sets (HNS 13.0 and later).
pub async fn check_hns(client: &Client, style: Style) -> Result<(), String> {
    let features = client
        .get_supported_features()
        .await
        .map_err(|e| format!("asking HNS what it supports: {e}"))?;
    if style == Style::Npm && !features.set_policy {
        let v = client
            .get_version()
            .await
            .map_err(|e| format!("asking HNS its version: {e}"))?;
        return Err(format!(
            "--style npm needs SetPolicy (HNS 13.0 and later); this HNS is {}.{}: use --style calico",
            v.major, v.minor
        ));
    }
    Ok(())
}

fn set_source(health: &Health, cluster: &Cluster) {
    let n = i64::try_from(cluster.source_errors.len()).unwrap_or(i64::MAX);
    health.metrics.source_errors.set(n);
}

/// Waits for the source's first whole read; says once why it waits.
pub async fn first_synced(
    objects: &mut watch::Receiver<Arc<Objects>>,
    health: &Health,
) -> Option<Cluster> {
    let mut said = false;
    loop {
        let cluster = Cluster::from_objects(&objects.borrow_and_update());
        set_source(health, &cluster);
        if cluster.synced {
            return Some(cluster);
        }
        if !said && !cluster.source_errors.is_empty() {
            tracing::warn!(
                errors = ?cluster.source_errors,
                "the Kubernetes objects cannot be read yet; no ACL is programmed or removed until they are"
            );
            said = true;
        }
        objects.changed().await.ok()?;
    }
}
