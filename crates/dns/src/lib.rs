//! The cluster DNS (`winnet dns`): answers for the cluster zone with the CoreDNS `kubernetes`
//! plugin's semantics as kubeadm configures it (`pods insecure`, `ttl 30`, reverse zones with
//! fallthrough), from an immutable view of the Kubernetes objects swapped in on each change;
//! every other name is forwarded to upstream servers through a cache.
//!
//! [`run`] is `winnet dns`; [`start`] serves on sockets the caller bound, from an object
//! channel the caller feeds (tests, an in-memory cluster).

pub mod answer;
pub mod cluster;
pub mod entry;
pub mod forward;
pub mod handler;
pub mod metrics;
pub mod names;
pub mod server;
pub mod shards;
pub mod wire;
pub mod zone;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kubesrc::{Kinds, Objects, Source};
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::handler::Handler;
use crate::metrics::Metrics;
pub use crate::server::Sockets;
use crate::zone::Zone;

/// How often a manifest folder is checked (a change must show within 100 ms; a check is a
/// `stat` per file, and only changed files are read).
pub const MANIFEST_POLL: Duration = Duration::from_millis(10);

/// How long a burst of kube watch events settles before the view is rebuilt (short: a change
/// must show within 100 ms).
pub const KUBE_SETTLE: Duration = Duration::from_millis(10);

/// What `winnet dns` is started with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster domain, e.g. `cluster.local`.
    pub zone: String,
    /// TTL of every answer from the cluster zone (seconds).
    pub ttl: u32,
    /// Addresses to answer on, UDP and TCP each.
    pub listen: Vec<SocketAddr>,
    /// Where names outside the zone are sent, tried in order.
    pub upstreams: Vec<SocketAddr>,
    /// Where the Kubernetes objects come from.
    pub source: Source,
    /// Where `/metrics`, `/healthz` and `/ready` are served, if anywhere.
    pub metrics_addr: Option<SocketAddr>,
}

/// Why the DNS could not start.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Startup(String),
}

/// A DNS serving in this process; dropping it stops it.
pub struct Running {
    /// The addresses answering (UDP and TCP on each).
    pub addrs: Vec<SocketAddr>,
    pub metrics: Arc<Metrics>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Serves `config`'s zone on `sockets` from `objects` (its `listen`, `source` and
/// `metrics_addr` are not used here).
pub fn start(
    config: &Config,
    sockets: Sockets,
    mut objects: watch::Receiver<Arc<Objects>>,
) -> Result<Running, DnsError> {
    let zone = Zone::new(&config.zone, config.ttl).map_err(DnsError::Config)?;
    let metrics = Arc::new(Metrics::default());
    let first = Cluster::rebuild(&Arc::clone(&objects.borrow_and_update()), &zone.name, None);
    report(&first, &[]);
    metrics.source(&objects.borrow());
    let handler = Arc::new(Handler {
        metrics: Arc::clone(&metrics),
        ..Handler::new(zone, first, config.upstreams.clone())
    });
    let addrs = sockets.local_addrs();
    let mut tasks = server::spawn(Arc::clone(&handler), sockets);
    tasks.push(tokio::spawn(async move {
        while objects.changed().await.is_ok() {
            let objects = Arc::clone(&objects.borrow_and_update());
            let read = Arc::clone(&objects);
            let zone = handler.zone.name.clone();
            let started = std::time::Instant::now();
            let previous = handler.view.load_full();
            let rebuild = move || Cluster::rebuild(&objects, &zone, Some(&previous));
            let Ok(view) = tokio::task::spawn_blocking(rebuild).await else {
                return;
            };
            tracing::debug!(took = ?started.elapsed(), "cluster view rebuilt");
            report(&view, &handler.view.load().problems);
            let old = handler.view.swap(Arc::new(view));
            handler.metrics.source(&read);
            // The old view shares most of itself with the new one, but after a big change it
            // may be the last holder of many entries: freed off the serving threads.
            tokio::task::spawn_blocking(move || drop(old));
        }
    }));
    Ok(Running {
        addrs,
        metrics,
        tasks,
    })
}

/// Logs the problems that are new in this view.
fn report(view: &Cluster, before: &[String]) {
    for p in view.problems.iter().filter(|p| !before.contains(p)) {
        tracing::warn!("{p}");
    }
}

/// Runs `winnet dns` until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), DnsError> {
    let sockets = Sockets::bind(&config.listen)
        .await
        .map_err(DnsError::Startup)?;
    let metrics_listener = match config.metrics_addr {
        Some(addr) => Some(metrics::bind(addr).await.map_err(DnsError::Startup)?),
        None => None,
    };
    let kinds = Kinds {
        namespaces: true,
        ..Kinds::default()
    };
    let objects = kubesrc::watch(&config.source, kinds)
        .await
        .map_err(DnsError::Startup)?;
    let running = start(&config, sockets, objects)?;
    if let Some(listener) = metrics_listener {
        metrics::serve(listener, Arc::clone(&running.metrics));
    }
    tracing::info!(addrs = ?running.addrs, zone = %config.zone, "cluster DNS serving");
    shutdown.await;
    Ok(())
}

/// The `nameserver` lines of a resolv.conf, as port-53 addresses.
pub fn resolv_conf_nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next()? == "nameserver").then_some(())?;
            // A scoped IPv6 address (fe80::1%eth0) cannot be used from here; it is skipped.
            let ip: IpAddr = words.next()?.parse().ok()?;
            Some(SocketAddr::new(ip, 53))
        })
        .collect()
}
