//! Makes HNS match the plans: the fewest HNS calls, many in flight, with the observed state read
//! once at startup and kept up to date from the answers (never re-listed per sync).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use futures::StreamExt;
use hcn::error::HResult;
use hcn::policy::ProviderAddressPolicySetting;
use hcn::{
    Endpoint, EndpointFlags, EndpointPolicy, Guid, IpConfig, LoadBalancer, LoadBalancerPortMapping,
    Network,
};
use hns::{Client, ClientError};

use crate::model::ServiceKey;
use crate::planner::{Backend, DesiredLb, Frontend, RemoteEndpoint, ServicePlan};

/// HNS calls in flight at once.
const CONCURRENCY: usize = 64;

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub created: usize,
    pub updated: usize,
    pub deleted: usize,
    pub remote_created: usize,
    pub remote_deleted: usize,
    /// Services to try again (an HNS call failed, or a local endpoint is not there yet).
    pub retry: BTreeSet<ServiceKey>,
    pub problems: Vec<String>,
}

/// HNS as the proxy sees it, and the plans it has applied.
pub struct Reconciler {
    client: Arc<Client>,
    network: Network,
    root_endpoint: Option<Guid>,
    lbs: HashMap<Frontend, LoadBalancer>,
    local_by_ip: HashMap<IpAddr, Guid>,
    remote_by_ip: HashMap<IpAddr, Guid>,
    plans: HashMap<ServiceKey, ServicePlan>,
    owner: HashMap<Frontend, ServiceKey>,
    remote_refs: HashMap<IpAddr, (RemoteEndpoint, usize)>,
    modify_supported: bool,
}

/// The frontend an HNS load balancer holds.
fn frontend_of(lb: &LoadBalancer) -> Option<Frontend> {
    let pm = lb.port_mappings.first()?;
    Some(Frontend {
        vip: lb.frontend_vips.first().copied(),
        protocol: pm.protocol,
        port: pm.external_port,
    })
}

impl Reconciler {
    /// Reads the network's endpoints and every load balancer once.
    pub async fn observe(
        client: Arc<Client>,
        network: Network,
        root_endpoint_name: &str,
        modify_supported: bool,
    ) -> Result<Reconciler, ClientError> {
        let endpoints = client.list_endpoints_of_network(network.id).await?;
        let mut r = Reconciler {
            client: Arc::clone(&client),
            network,
            root_endpoint: None,
            lbs: HashMap::new(),
            local_by_ip: HashMap::new(),
            remote_by_ip: HashMap::new(),
            plans: HashMap::new(),
            owner: HashMap::new(),
            remote_refs: HashMap::new(),
            modify_supported,
        };
        for ep in endpoints {
            if ep.name.eq_ignore_ascii_case(root_endpoint_name) {
                r.root_endpoint = Some(ep.id);
            }
            let map = if ep.is_remote() {
                &mut r.remote_by_ip
            } else {
                &mut r.local_by_ip
            };
            for ip in ep.ips() {
                map.insert(ip, ep.id);
            }
        }
        for lb in client.list_load_balancers().await? {
            if let Some(f) = frontend_of(&lb) {
                r.lbs.insert(f, lb);
            }
        }
        Ok(r)
    }

    /// Load balancers in HNS.
    pub fn load_balancer_count(&self) -> usize {
        self.lbs.len()
    }

    /// Remote endpoints in HNS on the network.
    pub fn remote_endpoint_count(&self) -> usize {
        self.remote_by_ip.len()
    }

    /// The applied plan of a Service.
    pub fn plan(&self, key: &ServiceKey) -> Option<&ServicePlan> {
        self.plans.get(key)
    }

    /// Every applied plan.
    pub fn plans(&self) -> impl Iterator<Item = (&ServiceKey, &ServicePlan)> {
        self.plans.iter()
    }

    /// Notes that a local endpoint appeared or went (the CNI made or removed it).
    pub async fn refresh_local_endpoints(&mut self) -> Result<(), ClientError> {
        let endpoints = self
            .client
            .list_endpoints_of_network(self.network.id)
            .await?;
        self.local_by_ip = endpoints
            .iter()
            .filter(|e| !e.is_remote())
            .flat_map(|e| e.ips().map(move |ip| (ip, e.id)))
            .collect();
        Ok(())
    }

    /// Applies new plans for some Services (an empty plan removes a Service). With `full`, the
    /// plans are every Service there is, and HNS objects no plan wants are cleaned up.
    pub async fn sync(
        &mut self,
        updates: Vec<(ServiceKey, ServicePlan)>,
        full: bool,
    ) -> SyncReport {
        let mut report = SyncReport::default();
        let mut touched: Vec<ServiceKey> = Vec::new();
        let mut released: HashSet<IpAddr> = HashSet::new();
        let mut old_frontends: Vec<Frontend> = Vec::new();
        for (key, plan) in updates {
            let old = self.plans.remove(&key).unwrap_or_default();
            for r in &old.remotes {
                if let Some(entry) = self.remote_refs.get_mut(&r.ip) {
                    entry.1 -= 1;
                    if entry.1 == 0 {
                        self.remote_refs.remove(&r.ip);
                        released.insert(r.ip);
                    }
                }
            }
            for r in &plan.remotes {
                self.remote_refs
                    .entry(r.ip)
                    .or_insert_with(|| (r.clone(), 0))
                    .1 += 1;
            }
            report.problems.extend(plan.problems.iter().cloned());
            for lb in &old.lbs {
                if self.owner.get(&lb.frontend) == Some(&key) {
                    self.owner.remove(&lb.frontend);
                    old_frontends.push(lb.frontend.clone());
                }
            }
            if !plan.lbs.is_empty() || !plan.remotes.is_empty() {
                self.plans.insert(key.clone(), plan);
            }
            touched.push(key);
        }
        self.create_remotes(&touched, &mut report).await;
        let mut stale: Vec<Frontend> = Vec::new();
        let mut wanted: Vec<(ServiceKey, DesiredLb)> = Vec::new();
        for key in &touched {
            for lb in self
                .plans
                .get(key)
                .map(|p| p.lbs.as_slice())
                .unwrap_or_default()
            {
                match self.owner.get(&lb.frontend) {
                    Some(other) if other != key => report.problems.push(format!(
                        "{key}: {:?} is already load balanced for {other}; not programmed",
                        lb.frontend
                    )),
                    _ => {
                        self.owner.insert(lb.frontend.clone(), key.clone());
                        wanted.push((key.clone(), lb.clone()));
                    }
                }
            }
        }
        if full {
            stale.extend(
                self.lbs
                    .keys()
                    .filter(|f| !self.owner.contains_key(*f))
                    .cloned(),
            );
        } else {
            stale.extend(
                old_frontends
                    .into_iter()
                    .filter(|f| !self.owner.contains_key(f) && self.lbs.contains_key(f)),
            );
        }
        self.apply_lbs(wanted, stale, &mut report).await;
        let unused: Vec<IpAddr> = if full {
            self.remote_by_ip
                .keys()
                .filter(|ip| !self.remote_refs.contains_key(*ip))
                .copied()
                .collect()
        } else {
            released
                .into_iter()
                .filter(|ip| !self.remote_refs.contains_key(ip))
                .collect()
        };
        self.delete_remotes(unused, &mut report).await;
        report
    }

    async fn create_remotes(&mut self, touched: &[ServiceKey], report: &mut SyncReport) {
        let mut todo: Vec<(ServiceKey, RemoteEndpoint)> = Vec::new();
        let mut seen = HashSet::new();
        for key in touched {
            for r in self
                .plans
                .get(key)
                .map(|p| &p.remotes)
                .into_iter()
                .flatten()
            {
                if self.remote_by_ip.contains_key(&r.ip) || !seen.insert(r.ip) {
                    continue;
                }
                if self.local_by_ip.contains_key(&r.ip) {
                    report.problems.push(format!(
                        "{key}: endpoint {} is on another node by its EndpointSlice, but it is a local HNS endpoint here; is --hostname-override this node's name? The local endpoint is used and never deleted",
                        r.ip
                    ));
                    continue;
                }
                todo.push((key.clone(), r.clone()));
            }
        }
        let network = self.network.id;
        let client = Arc::clone(&self.client);
        let results: Vec<_> = futures::stream::iter(todo)
            .map(|(key, r)| {
                let client = Arc::clone(&client);
                async move {
                    let ep = remote_endpoint(network, &r);
                    (key, r.ip, client.create_endpoint(&ep).await)
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (key, ip, result) in results {
            match result {
                Ok(ep) => {
                    self.remote_by_ip.insert(ip, ep.id);
                    report.remote_created += 1;
                }
                Err(e) => {
                    report
                        .problems
                        .push(format!("{key}: creating remote endpoint {ip}: {e}"));
                    report.retry.insert(key);
                }
            }
        }
    }

    async fn delete_remotes(&mut self, ips: Vec<IpAddr>, report: &mut SyncReport) {
        let targets: Vec<(IpAddr, Guid)> = ips
            .into_iter()
            .filter_map(|ip| self.remote_by_ip.get(&ip).map(|id| (ip, *id)))
            .collect();
        let client = Arc::clone(&self.client);
        let results: Vec<_> = futures::stream::iter(targets)
            .map(|(ip, id)| {
                let client = Arc::clone(&client);
                async move { (ip, client.delete_endpoint(id).await) }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (ip, result) in results {
            match result {
                Ok(()) => {
                    self.remote_by_ip.remove(&ip);
                    report.remote_deleted += 1;
                }
                Err(e) if e.is_not_found() => {
                    self.remote_by_ip.remove(&ip);
                }
                Err(e) => report
                    .problems
                    .push(format!("deleting remote endpoint {ip}: {e}")),
            }
        }
    }

    /// Resolves a desired LB's backends to HNS endpoint IDs; `None` for a backend not in HNS.
    fn resolve(&self, lb: &DesiredLb) -> (Vec<Guid>, Vec<IpAddr>) {
        let mut ids = Vec::new();
        let mut missing = Vec::new();
        for b in &lb.backends {
            let id = match b {
                Backend::Local(ip) => self.local_by_ip.get(ip).copied().ok_or(*ip),
                Backend::Remote(ip) => self
                    .remote_by_ip
                    .get(ip)
                    .or_else(|| self.local_by_ip.get(ip))
                    .copied()
                    .ok_or(*ip),
                Backend::Root => self.root_endpoint.ok_or(IpAddr::from([0, 0, 0, 0])),
            };
            match id {
                Ok(id) => ids.push(id),
                Err(ip) => missing.push(ip),
            }
        }
        ids.sort();
        ids.dedup();
        (ids, missing)
    }

    async fn apply_lbs(
        &mut self,
        wanted: Vec<(ServiceKey, DesiredLb)>,
        stale: Vec<Frontend>,
        report: &mut SyncReport,
    ) {
        let mut ops: Vec<LbOp> = stale
            .into_iter()
            .filter_map(|f| {
                self.lbs.get(&f).map(|lb| LbOp {
                    key: None,
                    frontend: f,
                    old: Some(lb.id),
                    new: None,
                })
            })
            .collect();
        for (key, want) in wanted {
            let (ids, missing) = self.resolve(&want);
            if !missing.is_empty() {
                report.problems.push(format!(
                    "{key}: backend(s) {missing:?} not in HNS yet (a local endpoint is made by the CNI); retrying"
                ));
                report.retry.insert(key.clone());
            }
            let old = self.lbs.get(&want.frontend);
            if ids.is_empty() {
                if let Some(old) = old {
                    ops.push(LbOp {
                        key: Some(key),
                        frontend: want.frontend.clone(),
                        old: Some(old.id),
                        new: None,
                    });
                }
                continue;
            }
            let new = hns_lb(&want, ids);
            if old.is_some_and(|o| same_lb(o, &new)) {
                continue; // adopted or unchanged: no HNS call
            }
            ops.push(LbOp {
                key: Some(key),
                frontend: want.frontend.clone(),
                old: old.map(|o| o.id),
                new: Some(new),
            });
        }
        let client = Arc::clone(&self.client);
        let modify = self.modify_supported;
        let results: Vec<_> = futures::stream::iter(ops)
            .map(|op| {
                let client = Arc::clone(&client);
                async move { op.run(&client, modify).await }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for r in results {
            if r.not_implemented {
                self.modify_supported = false;
            }
            report.created += r.created;
            report.updated += r.updated;
            report.deleted += r.deleted;
            match r.outcome {
                Ok(Some(lb)) => {
                    self.lbs.insert(r.frontend, lb);
                }
                Ok(None) => {
                    self.lbs.remove(&r.frontend);
                }
                Err(e) => {
                    if r.deleted > 0 {
                        self.lbs.remove(&r.frontend);
                    }
                    report.problems.push(format!("{:?}: {e}", r.frontend));
                    if let Some(k) = r.key {
                        report.retry.insert(k);
                    }
                }
            }
        }
    }
}

/// One frontend's change: delete, create, update, or delete + create.
struct LbOp {
    key: Option<ServiceKey>,
    frontend: Frontend,
    old: Option<Guid>,
    new: Option<LoadBalancer>,
}

struct LbOpResult {
    key: Option<ServiceKey>,
    frontend: Frontend,
    outcome: Result<Option<LoadBalancer>, ClientError>,
    created: usize,
    updated: usize,
    deleted: usize,
    not_implemented: bool,
}

impl LbOp {
    async fn run(self, client: &Client, modify: bool) -> LbOpResult {
        let mut res = LbOpResult {
            key: self.key,
            frontend: self.frontend,
            outcome: Ok(None),
            created: 0,
            updated: 0,
            deleted: 0,
            not_implemented: false,
        };
        if let (Some(old), Some(new), true) = (self.old, &self.new, modify) {
            match client.update_load_balancer(old, new).await {
                Ok(lb) => {
                    res.updated = 1;
                    res.outcome = Ok(Some(lb));
                    return res;
                }
                Err(e) if e.code() == Some(HResult::E_NOTIMPL) => res.not_implemented = true,
                Err(e) => {
                    res.outcome = Err(e);
                    return res;
                }
            }
        }
        if let Some(old) = self.old {
            match client.delete_load_balancer(old).await {
                Ok(()) => res.deleted = 1,
                Err(e) if e.is_not_found() => res.deleted = 1,
                Err(e) => {
                    res.outcome = Err(e);
                    return res;
                }
            }
        }
        if let Some(new) = self.new {
            match client.create_load_balancer(&new).await {
                Ok(lb) => {
                    res.created = 1;
                    res.outcome = Ok(Some(lb));
                }
                Err(e) => res.outcome = Err(e),
            }
        }
        res
    }
}

/// The HNS load balancer for a desired one, as winkernel builds it.
fn hns_lb(want: &DesiredLb, backends: Vec<Guid>) -> LoadBalancer {
    LoadBalancer {
        host_compute_endpoints: backends,
        source_vip: want.source_vip,
        frontend_vips: want.frontend.vip.into_iter().collect(),
        port_mappings: vec![LoadBalancerPortMapping {
            protocol: want.frontend.protocol,
            internal_port: want.internal_port,
            external_port: want.frontend.port,
            distribution_type: want.distribution,
            flags: want.port_mapping_flags,
        }],
        flags: want.lb_flags,
        ..LoadBalancer::default()
    }
}

/// Same load balancer, ignoring the ID and the order of backends.
fn same_lb(a: &LoadBalancer, b: &LoadBalancer) -> bool {
    let set = |l: &LoadBalancer| {
        l.host_compute_endpoints
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
    };
    set(a) == set(b)
        && a.source_vip == b.source_vip
        && a.frontend_vips == b.frontend_vips
        && a.port_mappings == b.port_mappings
        && a.flags == b.flags
}

/// The remote HNS endpoint winkernel creates for a backend on another node.
fn remote_endpoint(network: Guid, r: &RemoteEndpoint) -> Endpoint {
    let policies = r
        .provider_address
        .map(|pa| {
            EndpointPolicy::ProviderAddress(ProviderAddressPolicySetting {
                provider_address: pa,
            })
        })
        .into_iter()
        .collect();
    Endpoint {
        host_compute_network: network,
        policies,
        ip_configurations: vec![IpConfig {
            ip_address: Some(r.ip),
            prefix_length: 0,
        }],
        mac_address: Some(r.mac),
        flags: EndpointFlags::REMOTE_ENDPOINT,
        ..Endpoint::default()
    }
}
