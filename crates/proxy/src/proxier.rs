//! The proxier: startup checks as winkernel makes them, then one loop that turns snapshots into
//! per-Service plans and hands the changed ones to the reconciler.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hcn::{NetworkPolicy, NetworkType, SupportedFeatures};
use hns_client::Client;
use ipnet::IpNet;

use crate::health::{self, Health, ServiceHealth};
use crate::inputs::{Changes, Inputs};
use crate::model::ServiceKey;
use crate::planner::{NodeContext, ServicePlan, plan_service};
use crate::reconciler::{NetworkNews, Reconciler, SyncReport};
use crate::source::{self, Snapshot};

/// `--feature-gates`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    pub win_dsr: bool,
    pub win_overlay: bool,
}

impl std::str::FromStr for FeatureGates {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut g = FeatureGates::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item
                .split_once('=')
                .ok_or_else(|| format!("--feature-gates: \"{item}\" is not NAME=true|false"))?;
            let on: bool = value.parse().map_err(|_| {
                format!("--feature-gates: {name}={value}: the value must be true or false")
            })?;
            match name {
                "WinDSR" => g.win_dsr = on,
                "WinOverlay" => g.win_overlay = on,
                // kube-proxy accepts every gate of Kubernetes; those it does not use change nothing.
                _ => tracing::info!(
                    gate = name,
                    "feature gate has no effect on the Windows proxier"
                ),
            }
        }
        Ok(g)
    }
}

/// Where the Kubernetes objects come from.
#[derive(Clone, Debug)]
pub enum SourceConfig {
    Manifests(PathBuf),
    Kubeconfig(PathBuf),
}

/// What `winnet proxy` is started with (kube-proxy's flags).
#[derive(Clone, Debug)]
pub struct Config {
    pub hostname: String,
    pub network_name: String,
    pub source_vip: Option<IpAddr>,
    pub enable_dsr: bool,
    pub feature_gates: FeatureGates,
    pub cluster_cidr: Option<IpNet>,
    /// The node's addresses; else taken from its Node object.
    pub node_ips: Vec<IpAddr>,
    pub healthz_bind: Option<SocketAddr>,
    pub metrics_bind: Option<SocketAddr>,
    pub hns_socket: PathBuf,
    pub root_hnsendpoint_name: String,
    pub forward_healthcheck_vip: bool,
    pub source: SourceConfig,
    /// How long to wait before retrying a Service whose HNS calls failed (doubles, up to 30 s).
    pub retry_after: Duration,
    /// The MAC of the NIC holding the node IP; required on Overlay.
    pub host_mac: Option<hcn::MacAddress>,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("{0}")]
    Startup(String),
    #[error(transparent)]
    Hns(#[from] hns_client::ClientError),
}

/// A connected proxy: HNS observed, ready to sync snapshots.
pub struct Proxy {
    client: Arc<Client>,
    reconciler: Reconciler,
    proxier: Proxier,
    synced_once: bool,
    /// What [`Proxy::resync`] observes HNS with again.
    network_name: String,
    root_name: String,
    modify: bool,
    /// What the doctor's gauges need besides HNS and the objects.
    node_name: String,
    cluster_cidr: Option<IpNet>,
}

impl Proxy {
    /// Startup as winkernel does it: HNS V2, the feature gates, the network (waited for), the
    /// Overlay requirements; then HNS's load balancers and endpoints are read, once.
    pub async fn connect(config: Config) -> Result<Proxy, ProxyError> {
        let client = Client::new(&config.hns_socket);
        Proxy::connect_with(config, client).await
    }

    /// [`Proxy::connect`] on the hnsd `client` reaches (e.g. one in this process) instead of
    /// the socket the config names.
    pub async fn connect_with(config: Config, client: Client) -> Result<Proxy, ProxyError> {
        let client = Arc::new(client);
        let features = client.get_supported_features().await?;
        if !features.api.v2 {
            return Err(ProxyError::Startup(
                "this HNS has no V2 API; the Windows proxier needs it".into(),
            ));
        }
        if config.enable_dsr && !config.feature_gates.win_dsr {
            return Err(ProxyError::Startup(
                "WinDSR feature gate not enabled: --enable-dsr needs --feature-gates WinDSR=true"
                    .into(),
            ));
        }
        let network = wait_for_network(&client, &config.network_name).await?;
        let overlay = network.network_type == NetworkType::Overlay;
        if overlay {
            check_overlay(&config, &features)?;
            ensure_source_vip_endpoint(&client, &network, &config).await?;
        }
        let modify = features.modify_loadbalancer;
        let (network_name, root_name) = (
            config.network_name.clone(),
            config.root_hnsendpoint_name.clone(),
        );
        let (node_name, cluster_cidr) = (config.hostname.clone(), config.cluster_cidr);
        let reconciler = Reconciler::observe(
            Arc::clone(&client),
            network,
            &config.root_hnsendpoint_name,
            modify,
        )
        .await?;
        let proxier = Proxier::new(config, features, overlay, Arc::new(Health::default()));
        Ok(Proxy {
            client,
            reconciler,
            proxier,
            synced_once: false,
            network_name,
            root_name,
            modify,
            node_name,
            cluster_cidr,
        })
    }

    /// What `winnet doctor` finds comparing `snapshot`'s Services with HNS (and the switch,
    /// when hnsd has one): HNS is listed afresh, not taken from the proxy's own view, since
    /// that is what could be stale.
    pub async fn diagnose(&self, snapshot: &Snapshot) -> Result<Vec<doctor::Finding>, ProxyError> {
        let c = &self.client;
        let hns = doctor::snapshot::HnsView {
            networks: c.list_networks().await?,
            endpoints: c.list_endpoints().await?,
            namespaces: c.list_namespaces().await?,
            load_balancers: c.list_load_balancers().await?,
            routes: c.list_sdn_routes().await?,
        };
        // Without a data plane there is no switch to compare; the other checks still run.
        let switch = match c.switch_dump().await {
            Ok(d) => Some(d),
            Err(e) if e.code() == Some(hns_client::trace::NO_DATAPLANE) => None,
            Err(e) => return Err(e.into()),
        };
        let snap = doctor::NodeSnapshot {
            node: self.node_name.clone(),
            profile: doctor::snapshot::ProfileFacts {
                name: switch
                    .as_ref()
                    .map(|s| s.facts.profile.clone())
                    .unwrap_or_default(),
                backend_limit: None,
                ..Default::default()
            },
            cluster: doctor::snapshot::ClusterFacts {
                cluster_cidr: self.cluster_cidr,
                service_cidr: None,
            },
            kube: crate::doctor::kube_view(snapshot),
            hns,
            switch,
            kernel: None,
            flannel: None,
            dns: None,
            policy: None,
        };
        Ok(doctor::diagnose(&snap))
    }

    /// Forgets what the proxy believes HNS holds and reads it again, so that the next sync is
    /// full: load balancers deleted behind its back are made again, ones nothing wants are
    /// removed. `winnet doctor --fix` asks for this with SIGHUP.
    pub async fn resync(&mut self) -> Result<(), ProxyError> {
        let network = wait_for_network(&self.client, &self.network_name).await?;
        self.reconciler = Reconciler::observe(
            Arc::clone(&self.client),
            network,
            &self.root_name,
            self.modify,
        )
        .await?;
        self.synced_once = false;
        Ok(())
    }

    /// Programs HNS for `snapshot`. The first sync is full: it adopts the load balancers that
    /// already match and removes those nothing wants. Later ones replan and write only the
    /// Services whose objects changed, or whose local endpoints or routes in HNS did.
    pub async fn sync(&mut self, snapshot: &Snapshot) -> SyncReport {
        // hnsd answers what others changed while the objects are compared with the last
        // sync's: one round trip hidden behind the walk instead of added to it.
        let asked = self.reconciler.ask_changes();
        let changes = self.proxier.inputs.take(snapshot);
        let caught = match self.reconciler.catch_up_from(asked).await {
            Ok(c) => c,
            Err(e) => {
                let problem = format!("asking hnsd what changed: {e}");
                return self.proxier.failed_sync(changes, problem);
            }
        };
        match caught.network {
            NetworkNews::Same => {}
            NetworkNews::Gone => {
                let problem = format!(
                    "network {} is gone from HNS; waiting for it",
                    self.network_name
                );
                return self.proxier.failed_sync(changes, problem);
            }
            NetworkNews::Replaced => {
                if let Err(e) = self.resync().await {
                    let problem = format!(
                        "network {} was made again; reading HNS: {e}",
                        self.network_name
                    );
                    return self.proxier.failed_sync(changes, problem);
                }
            }
        }
        let full = !self.synced_once;
        self.synced_once = true;
        let report = self
            .proxier
            .sync(
                &mut self.reconciler,
                snapshot,
                changes,
                full,
                &caught.addresses,
            )
            .await;
        if full && let Err(e) = self.reconciler.catch_up_ahead().await {
            // The next sync reads the same changes then.
            tracing::warn!("asking hnsd what changed after the full sync: {e}");
        }
        report
    }

    /// When the next retry of failed Services is due.
    pub fn next_retry(&self) -> Option<Duration> {
        self.proxier.next_retry()
    }

    /// The health state (metrics, last sync) the servers report.
    pub fn health(&self) -> Arc<Health> {
        Arc::clone(&self.proxier.health)
    }

    /// The reconciler's view of HNS.
    pub fn reconciler(&self) -> &Reconciler {
        &self.reconciler
    }

    /// Serves each health check node port on a TCP listener from now on (the daemon does; a
    /// proxy in its client's process answers through [`Proxy::health_check`]).
    pub fn listen_health_check_node_ports(&mut self) {
        self.proxier.service_health.listen();
    }

    /// The health check node ports this node serves (ExternalTrafficPolicy Local Services).
    pub fn health_check_node_ports(&self) -> Vec<u16> {
        self.proxier.service_health.ports()
    }

    /// What health check node port `port` answers: the HTTP status and the JSON body.
    pub fn health_check(&self, port: u16) -> Option<(u16, String)> {
        self.proxier.service_health.answer(port)
    }
}

/// How often the proxy runs the doctor's checks for its gauges (`winnet_doctor_problems`).
const DOCTOR_PERIOD: Duration = Duration::from_secs(30);

/// Runs the proxy until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
    tokio::pin!(shutdown);
    let (healthz, metrics) = (config.healthz_bind, config.metrics_bind);
    let mut snapshots = match &config.source {
        SourceConfig::Manifests(dir) => source::manifests::watch(dir.clone()),
        SourceConfig::Kubeconfig(path) => source::kube::watch(path)
            .await
            .map_err(ProxyError::Startup)?,
    };
    let mut proxy = tokio::select! {
        p = Proxy::connect(config) => p?,
        _ = &mut shutdown => return Ok(()),
    };
    if let Some(addr) = healthz {
        health::serve(addr, proxy.health(), false);
    }
    if let Some(addr) = metrics {
        health::serve(addr, proxy.health(), true);
    }
    proxy.listen_health_check_node_ports();
    // /healthz says 503 until this first sync.
    let health = proxy.health();
    let mut snapshot = tokio::select! {
        s = source::first_synced(&mut snapshots, |s| health.metrics.set_source(s)) => s.ok_or_else(stopped)?,
        _ = &mut shutdown => return Ok(()),
    };
    proxy.sync(&snapshot).await;
    // SIGHUP: a full resync against HNS (re-read, then program what differs).
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| ProxyError::Startup(format!("cannot handle SIGHUP: {e}")))?;
    let mut checkups = tokio::time::interval(DOCTOR_PERIOD);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = checkups.tick() => {
                match proxy.diagnose(&snapshot).await {
                    Ok(found) => proxy.health().metrics.set_problems(&doctor::counts(&found)),
                    Err(e) => tracing::warn!("the doctor's check failed: {e}"),
                }
            }
            _ = hangups.recv() => {
                match proxy.resync().await {
                    Ok(()) => {
                        let report = proxy.sync(&snapshot).await;
                        tracing::info!(created = report.created, deleted = report.deleted, "resync against HNS (SIGHUP)");
                    }
                    Err(e) => tracing::error!("resync against HNS failed: {e}"),
                }
            }
            changed = snapshots.changed() => {
                if changed.is_err() {
                    return Err(stopped());
                }
                snapshot = snapshots.borrow_and_update().clone();
                proxy.health().metrics.set_source(&snapshot);
                proxy.sync(&snapshot).await;
            }
            _ = sleep_opt(proxy.next_retry()) => {
                proxy.sync(&snapshot).await;
            }
        }
    }
}

/// The error of a run whose object source ended.
pub(crate) fn stopped() -> ProxyError {
    ProxyError::Startup("the object source stopped".into())
}

async fn sleep_opt(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Polls every second until the network exists, as winkernel does.
async fn wait_for_network(client: &Client, name: &str) -> Result<hcn::Network, ProxyError> {
    let mut logged = false;
    loop {
        if let Some(n) = client.get_network_by_name(name).await? {
            return Ok(n);
        }
        if !logged {
            tracing::info!(
                network = name,
                "waiting for the HNS network (is --network-name / KUBE_NETWORK right?)"
            );
            logged = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn check_overlay(config: &Config, features: &SupportedFeatures) -> Result<(), ProxyError> {
    if !config.feature_gates.win_overlay {
        return Err(ProxyError::Startup("the network is Overlay: WinOverlay feature gate not enabled (--feature-gates WinOverlay=true)".into()));
    }
    if !features.remote_subnet {
        return Err(ProxyError::Startup(
            "the network is Overlay but this HNS has no RemoteSubnet support".into(),
        ));
    }
    if config.source_vip.is_none() {
        return Err(ProxyError::Startup("the network is Overlay: --source-vip is required (an address of the node's pod subnet)".into()));
    }
    if config.host_mac.is_none() {
        return Err(ProxyError::Startup(
            "the network is Overlay: the host MAC is needed (the MAC of the NIC holding the node IP; give the node IP with --bind-address)".into(),
        ));
    }
    Ok(())
}

/// Overlay: the source VIP is a local HNS endpoint with the host's MAC; made if no endpoint
/// holds that address yet.
async fn ensure_source_vip_endpoint(
    client: &Client,
    network: &hcn::Network,
    config: &Config,
) -> Result<(), ProxyError> {
    let Some(vip) = config.source_vip else {
        return Ok(());
    };
    let existing = client.list_endpoints_of_network(network.id).await?;
    if existing.iter().any(|e| e.ips().any(|ip| ip == vip)) {
        return Ok(());
    }
    let ep = hcn::Endpoint {
        name: "source-vip".into(),
        host_compute_network: network.id,
        ip_configurations: vec![hcn::IpConfig {
            ip_address: Some(vip),
            prefix_length: 0,
        }],
        mac_address: config.host_mac,
        ..hcn::Endpoint::default()
    };
    client
        .create_endpoint(&ep)
        .await
        .map_err(|e| ProxyError::Startup(format!("creating the source VIP endpoint {vip}: {e}")))?;
    tracing::info!(%vip, "created the source VIP endpoint");
    Ok(())
}

struct Proxier {
    config: Config,
    features: SupportedFeatures,
    overlay: bool,
    health: Arc<Health>,
    service_health: ServiceHealth,
    /// The objects the last sync planned from.
    inputs: Inputs,
    /// Services removed while syncs failed: their load balancers are still to be deleted.
    gone: Vec<ServiceKey>,
    context: Option<NodeContext>,
    retry: BTreeSet<ServiceKey>,
    retry_delay: Duration,
    retry_at: Option<Instant>,
    reported: BTreeSet<String>,
}

impl Proxier {
    fn new(
        config: Config,
        features: SupportedFeatures,
        overlay: bool,
        health: Arc<Health>,
    ) -> Proxier {
        let retry_delay = config.retry_after;
        Proxier {
            config,
            features,
            overlay,
            health,
            service_health: ServiceHealth::default(),
            inputs: Inputs::default(),
            gone: Vec::new(),
            context: None,
            retry: BTreeSet::new(),
            retry_delay,
            retry_at: None,
            reported: BTreeSet::new(),
        }
    }

    fn next_retry(&self) -> Option<Duration> {
        self.retry_at
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    fn context(
        &self,
        network: &hcn::Network,
        snapshot: &Snapshot,
        reconciler: &Reconciler,
    ) -> NodeContext {
        let node_ips = if self.config.node_ips.is_empty() {
            snapshot
                .nodes
                .get(&self.config.hostname)
                .cloned()
                .unwrap_or_default()
        } else {
            self.config.node_ips.clone()
        };
        let remote_subnets = network
            .policies
            .iter()
            .filter_map(|p| match p {
                NetworkPolicy::RemoteSubnetRoute(r) => {
                    Some((r.destination_prefix, r.provider_address))
                }
                _ => None,
            })
            .collect();
        NodeContext {
            hostname: self.config.hostname.clone(),
            local_endpoint_ips: reconciler.local_endpoint_ips(),
            node_ips,
            overlay: self.overlay,
            remote_subnets,
            source_vip: if self.overlay {
                self.config.source_vip
            } else {
                None
            },
            enable_dsr: self.config.enable_dsr && self.features.dsr,
            dsr_supported: self.features.dsr,
            session_affinity_supported: self.features.session_affinity,
            ipv6: NodeContext::programs_ipv6(&self.features, self.overlay),
            forward_healthcheck_vip: self.config.forward_healthcheck_vip,
            healthz_port: self.config.healthz_bind.map_or(10256, |a| a.port()),
            host_mac: self.config.host_mac,
        }
    }

    /// One sync: replan what changed (`changes`, against the last sync's objects), apply it.
    /// A Service is replanned when its objects
    /// changed, when it is retried, or when one of its endpoints' addresses had its HNS
    /// endpoint made, removed or made anew by others (`changed`, e.g. the CNI made a pod's) or
    /// moved to another remote subnet; everything only on a full sync or when the node's
    /// addresses changed.
    async fn sync(
        &mut self,
        reconciler: &mut Reconciler,
        snapshot: &Snapshot,
        changes: Changes,
        full: bool,
        changed: &BTreeSet<IpAddr>,
    ) -> SyncReport {
        let started = Instant::now();
        let mut touched = std::mem::take(&mut self.retry);
        touched.extend(changes.touched);
        let mut gone = std::mem::take(&mut self.gone);
        gone.extend(changes.gone);
        // One removed and then added again while syncs failed is planned, not removed.
        gone.retain(|k| !snapshot.services.contains_key(k));
        let context = self.context(reconciler.network(), snapshot, reconciler);
        let moved = self.context.as_ref().map(|c| moved_subnets(c, &context));
        let everything = full
            || self
                .context
                .as_ref()
                .is_none_or(|c| !same_node(c, &context))
            || matches!(moved, Some(None));
        if everything {
            touched.extend(snapshot.services.keys().cloned());
        } else {
            // Whose plans may differ though their objects did not: an endpoint whose HNS
            // endpoint others made, removed or made anew, or inside a moved remote subnet.
            let moved = moved.flatten().unwrap_or_default();
            touched.extend(self.inputs.services_at(changed, &moved));
        }
        let mut updates: Vec<(ServiceKey, ServicePlan)> = Vec::new();
        for key in touched {
            if let Some(svc) = snapshot.services.get(&key) {
                let slices = self.inputs.slices_of(&key, snapshot);
                updates.push((key, plan_service(svc, &slices, &context)));
            }
        }
        updates.extend(gone.into_iter().map(|k| (k, ServicePlan::default())));
        self.context = Some(context);
        for p in &snapshot.problems {
            self.report_once(p.clone());
        }
        let report = reconciler.sync(updates, full).await;
        self.after_sync(reconciler, snapshot, &report, started);
        report
    }

    /// A sync that could not start: retried later, everything still wanted, and the Services
    /// `changes` removed still to be deleted.
    pub(crate) fn failed_sync(&mut self, changes: Changes, problem: String) -> SyncReport {
        self.report_once(problem.clone());
        self.retry.extend(self.inputs.keys().cloned());
        self.gone.extend(changes.gone);
        self.schedule_retry();
        SyncReport {
            problems: vec![problem],
            retry: self.retry.clone(),
            ..SyncReport::default()
        }
    }

    fn after_sync(
        &mut self,
        reconciler: &Reconciler,
        snapshot: &Snapshot,
        report: &SyncReport,
        started: Instant,
    ) {
        let m = &self.health.metrics;
        m.sync_duration.observe(started.elapsed().as_secs_f64());
        m.load_balancers
            .set(reconciler.load_balancer_count() as i64);
        m.remote_endpoints
            .set(reconciler.remote_endpoint_count() as i64);
        m.errors.inc_by(report.retry.len() as u64);
        m.hns_failures.inc_by(report.hns_failures as u64);
        m.services_pending.set(report.retry.len() as i64);
        // Counted last: a reader that sees the sync sees what it left pending.
        m.syncs.inc();
        if report.created
            + report.updated
            + report.deleted
            + report.remote_created
            + report.remote_deleted
            > 0
        {
            tracing::info!(
                created = report.created,
                updated = report.updated,
                deleted = report.deleted,
                remote_created = report.remote_created,
                remote_deleted = report.remote_deleted,
                took_ms = started.elapsed().as_millis() as u64,
                "synced load balancers"
            );
        }
        for p in &report.problems {
            self.report_once(p.clone());
        }
        self.retry = report.retry.clone();
        if self.retry.is_empty() {
            self.retry_delay = self.config.retry_after;
            self.retry_at = None;
        } else {
            self.schedule_retry();
        }
        let mut hc = HashMap::new();
        for (key, svc) in &snapshot.services {
            if let (true, Some(port)) = (svc.external_policy_local, svc.health_check_node_port) {
                let local = reconciler.plan(key).map_or(0, |p| p.local_endpoints);
                hc.insert(port, (key.clone(), local));
            }
        }
        self.service_health.update(&hc);
        self.health.synced();
    }

    fn schedule_retry(&mut self) {
        self.retry_at = Some(Instant::now() + self.retry_delay);
        self.retry_delay = (self.retry_delay * 2).min(Duration::from_secs(30));
    }

    /// Logs a problem once (until it goes away and comes back, it is not repeated).
    fn report_once(&mut self, problem: String) {
        if self.reported.insert(problem.clone()) {
            tracing::warn!("{problem}");
        }
    }
}

/// Whether what every plan depends on is the same: the node's name and addresses.
fn same_node(a: &NodeContext, b: &NodeContext) -> bool {
    a.node_ips == b.node_ips && a.hostname == b.hostname
}

/// The remote subnets (flanneld's RemoteSubnetRoutes) added, removed or given another provider
/// address between `a` and `b`: the plans of endpoints inside them may change. `None` when
/// the same routes were only reordered, which can change which of two overlapping prefixes a
/// plan takes: then every plan may.
fn moved_subnets(a: &NodeContext, b: &NodeContext) -> Option<Vec<IpNet>> {
    if a.remote_subnets == b.remote_subnets {
        return Some(Vec::new());
    }
    let (old, new): (BTreeSet<_>, BTreeSet<_>) = (
        a.remote_subnets.iter().collect(),
        b.remote_subnets.iter().collect(),
    );
    if old == new {
        return None;
    }
    let moved: BTreeSet<IpNet> = old
        .symmetric_difference(&new)
        .map(|(prefix, _)| *prefix)
        .collect();
    Some(moved.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routes(list: &[(&str, &str)]) -> NodeContext {
        NodeContext {
            remote_subnets: list
                .iter()
                .map(|(p, pa)| (p.parse().unwrap(), pa.parse().unwrap()))
                .collect(),
            ..NodeContext::default()
        }
    }

    #[test]
    fn only_the_subnets_that_moved_are_replanned() {
        let two = routes(&[
            ("10.244.2.0/24", "192.168.0.12"),
            ("10.244.3.0/24", "192.168.0.13"),
        ]);
        assert_eq!(moved_subnets(&two, &two), Some(vec![]));
        let added = routes(&[
            ("10.244.2.0/24", "192.168.0.12"),
            ("10.244.3.0/24", "192.168.0.13"),
            ("10.244.4.0/24", "192.168.0.14"),
        ]);
        let four: IpNet = "10.244.4.0/24".parse().unwrap();
        assert_eq!(moved_subnets(&two, &added), Some(vec![four]));
        assert_eq!(moved_subnets(&added, &two), Some(vec![four]));
        // Another provider address for the same prefix moves it.
        let moved = routes(&[
            ("10.244.2.0/24", "192.168.0.99"),
            ("10.244.3.0/24", "192.168.0.13"),
        ]);
        let two_net: IpNet = "10.244.2.0/24".parse().unwrap();
        assert_eq!(moved_subnets(&two, &moved), Some(vec![two_net]));
        // Only reordered: which of two overlapping prefixes wins may change, so everything.
        let reordered = routes(&[
            ("10.244.3.0/24", "192.168.0.13"),
            ("10.244.2.0/24", "192.168.0.12"),
        ]);
        assert_eq!(moved_subnets(&two, &reordered), None);
    }
}
