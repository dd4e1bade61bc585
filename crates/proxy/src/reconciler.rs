//! Makes HNS match the plans: the fewest HNS calls, many in flight, with the observed state read
//! once at startup and kept up to date from the answers and from what hnsd reports others
//! changed (`GET /linux/changes`): never re-listed per sync.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use futures::StreamExt;
use hcn::error::HResult;
use hcn::loadbalancer::LoadBalancerFlags;
use hcn::policy::ProviderAddressPolicySetting;
use hcn::{
    Endpoint, EndpointFlags, EndpointPolicy, Guid, IpConfig, Kind, LoadBalancer,
    LoadBalancerPortMapping, Network,
};
use hns_client::changes::Changes;
use hns_client::{Client, ClientError};
use tokio::task::JoinHandle;

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
    /// HNS calls that HNS refused or that failed (each one is also in `problems`).
    pub hns_failures: usize,
    pub problems: Vec<String>,
}

/// What changed in HNS since the last sync, by others (the CNI, flanneld, an operator).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaughtUp {
    /// Addresses whose endpoint others made, removed or made anew (the CNI a pod's local
    /// endpoint; an operator a remote one): the plans of Services with these endpoints.
    pub addresses: BTreeSet<IpAddr>,
    pub network: NetworkNews,
}

/// What became of the proxy's network.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NetworkNews {
    /// The same network (its policies, e.g. flanneld's RemoteSubnetRoutes, may have changed).
    #[default]
    Same,
    /// Deleted, and none of its name yet.
    Gone,
    /// Deleted, and another of its name made: HNS must be observed again.
    Replaced,
}

/// HNS as the proxy sees it, and the plans it has applied.
pub struct Reconciler {
    client: Arc<Client>,
    network: Network,
    /// The network was deleted; its name is looked up until one comes back.
    network_gone: bool,
    /// Where hnsd's change log stood when this view was last brought up to date.
    epoch: Guid,
    revision: u64,
    root_endpoint: Option<Guid>,
    lbs: HashMap<Frontend, LoadBalancer>,
    local_by_ip: HashMap<IpAddr, Guid>,
    remote_by_ip: HashMap<IpAddr, Guid>,
    /// Every endpoint of the network this view holds: whether remote, and its addresses.
    endpoints: HashMap<Guid, (bool, Vec<IpAddr>)>,
    /// Remote endpoints this proxy deleted since the last catch-up (no news to it).
    own_deletes: HashSet<Guid>,
    /// Addresses a catch-up ahead of the next sync found touched, for that sync.
    noticed: BTreeSet<IpAddr>,
    plans: HashMap<ServiceKey, ServicePlan>,
    owner: HashMap<Frontend, ServiceKey>,
    remote_refs: HashMap<IpAddr, (RemoteEndpoint, usize)>,
    modify_supported: bool,
}

/// The frontend an HNS load balancer holds.
fn frontend_of(lb: &LoadBalancer) -> Option<Frontend> {
    let pm = lb.port_mappings.first()?;
    let vip = lb.frontend_vips.first().copied();
    Some(Frontend {
        vip,
        ipv6: vip.map_or(lb.flags & LoadBalancerFlags::IPV6 != 0, |v| v.is_ipv6()),
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
        // Where the change log stands before the reads: what changes during them is reported
        // again at the first sync, and noting it twice changes nothing.
        let start = client.changes_since(None).await?;
        let endpoints = client.list_endpoints_of_network(network.id).await?;
        let mut r = Reconciler {
            client: Arc::clone(&client),
            network,
            network_gone: false,
            epoch: start.epoch,
            revision: start.revision,
            root_endpoint: None,
            lbs: HashMap::new(),
            local_by_ip: HashMap::new(),
            remote_by_ip: HashMap::new(),
            endpoints: HashMap::new(),
            own_deletes: HashSet::new(),
            noticed: BTreeSet::new(),
            plans: HashMap::new(),
            owner: HashMap::new(),
            remote_refs: HashMap::new(),
            modify_supported,
        };
        for ep in endpoints {
            if ep.name.eq_ignore_ascii_case(root_endpoint_name) {
                r.root_endpoint = Some(ep.id);
            }
            r.note(&ep);
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

    /// The addresses of the local (not remote) HNS endpoints on the network.
    pub fn local_endpoint_ips(&self) -> BTreeSet<IpAddr> {
        self.local_by_ip.keys().copied().collect()
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

    /// The network as HNS last reported it.
    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Brings the view up to date with what others changed in HNS since the last call: the
    /// endpoints the CNI made or removed on the network (or an operator removed) and the
    /// network itself (flanneld's routes), read one by one as hnsd's change log names them.
    /// Only when the log cannot answer (hnsd restarted, or the proxy fell far behind) are they
    /// listed again.
    pub async fn catch_up(&mut self) -> Result<CaughtUp, ClientError> {
        let asked = self.ask_changes();
        self.catch_up_from(asked).await
    }

    /// Asks hnsd's change log what changed since this view was brought up to date, in a task
    /// of its own, so that the proxy compares its objects while hnsd answers (neither needs
    /// the other); `None` when the network is gone (its name is looked up instead).
    pub(crate) fn ask_changes(&self) -> Option<JoinHandle<Result<Changes, ClientError>>> {
        if self.network_gone {
            return None;
        }
        let (client, since) = (Arc::clone(&self.client), self.revision);
        Some(tokio::spawn(async move {
            client.changes_since(Some(since)).await
        }))
    }

    /// [`Reconciler::catch_up`] with the answer [`Reconciler::ask_changes`] asked for.
    pub(crate) async fn catch_up_from(
        &mut self,
        asked: Option<JoinHandle<Result<Changes, ClientError>>>,
    ) -> Result<CaughtUp, ClientError> {
        let mut caught = CaughtUp {
            addresses: std::mem::take(&mut self.noticed),
            ..CaughtUp::default()
        };
        let Some(asked) = asked else {
            let name = self.network.name.clone();
            caught.network = match self.client.get_network_by_name(&name).await? {
                Some(_) => NetworkNews::Replaced,
                None => NetworkNews::Gone,
            };
            return Ok(caught);
        };
        let news = asked
            .await
            .map_err(|e| ClientError::Protocol(format!("the change log request failed: {e}")))??;
        let own_deletes = std::mem::take(&mut self.own_deletes);
        let mut network_changed = false;
        // Each endpoint's state now: `None` deleted, `Some(None)` to be read.
        let mut now: HashMap<Guid, Option<Option<Endpoint>>> = HashMap::new();
        if news.continues(self.epoch) {
            for c in &news.changes {
                if c.is(Kind::Network) && c.id == self.network.id {
                    network_changed = true;
                } else if c.is(Kind::Endpoint) && !own_deletes.contains(&c.id) {
                    now.insert(c.id, (!c.deleted).then_some(None));
                }
            }
        } else {
            network_changed = true;
            let listed = self
                .client
                .list_endpoints_of_network(self.network.id)
                .await?;
            now.extend(self.endpoints.keys().map(|id| (*id, None)));
            now.extend(listed.into_iter().map(|e| (e.id, Some(Some(e)))));
        }
        if network_changed {
            match self.client.get_network_by_id(self.network.id).await {
                Ok(n) => self.network = n,
                Err(e) if e.is_not_found() => {
                    self.network_gone = true;
                    caught.network = NetworkNews::Gone;
                    return Ok(caught);
                }
                Err(e) => return Err(e),
            }
        }
        let now = self.read_endpoints(now).await?;
        caught.addresses.extend(self.take_endpoints(now));
        (self.epoch, self.revision) = (news.epoch, news.revision);
        Ok(caught)
    }

    /// Catches up now and keeps the addresses found for the next [`Reconciler::catch_up`]:
    /// after a sync that wrote thousands of objects (a full one), so that the next sync, which
    /// a user waits on, does not read the proxy's own writes back from the change log.
    pub async fn catch_up_ahead(&mut self) -> Result<(), ClientError> {
        self.noticed = self.catch_up().await?.addresses;
        Ok(())
    }

    /// Reads (a few, concurrently) the endpoints whose state is still to be read. The proxy's
    /// own remote endpoints are not read: only it writes them, and its view has its writes.
    async fn read_endpoints(
        &self,
        now: HashMap<Guid, Option<Option<Endpoint>>>,
    ) -> Result<Vec<(Guid, Option<Endpoint>)>, ClientError> {
        let mut known = Vec::new();
        let mut reads = Vec::new();
        for (id, state) in now {
            match state {
                None => known.push((id, None)),
                Some(Some(ep)) => known.push((id, Some(ep))),
                Some(None) if self.endpoints.get(&id).is_some_and(|(remote, _)| *remote) => {}
                Some(None) => {
                    let client = Arc::clone(&self.client);
                    reads.push(async move { (id, client.get_endpoint_by_id(id).await) });
                }
            }
        }
        let read: Vec<(Guid, Result<Endpoint, ClientError>)> = futures::stream::iter(reads)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        for (id, result) in read {
            known.push(match result {
                Ok(ep) => (id, Some(ep)),
                Err(e) if e.is_not_found() => (id, None),
                Err(e) => return Err(e),
            });
        }
        Ok(known)
    }

    /// Takes the endpoints' states into the view (one not on the network counts as gone);
    /// the addresses whose endpoint came, went or was made anew (a load balancer names the
    /// endpoint's ID), as local or remote.
    fn take_endpoints(&mut self, now: Vec<(Guid, Option<Endpoint>)>) -> BTreeSet<IpAddr> {
        let mut changed = BTreeSet::new();
        for (id, ep) in now {
            let ep = ep.filter(|e| e.host_compute_network == self.network.id);
            let mut touched: Vec<IpAddr> = self
                .endpoints
                .get(&id)
                .map(|(_, ips)| ips.clone())
                .unwrap_or_default();
            touched.extend(ep.iter().flat_map(|e| e.ips()));
            let before: Vec<_> = touched.iter().map(|ip| self.holder(ip)).collect();
            self.forget(id);
            if let Some(ep) = &ep {
                self.note(ep);
            }
            for (ip, before) in touched.iter().zip(before) {
                if self.holder(ip) != before {
                    changed.insert(*ip);
                }
            }
        }
        changed
    }

    /// Which endpoints hold `ip`: (local, remote).
    fn holder(&self, ip: &IpAddr) -> (Option<Guid>, Option<Guid>) {
        (
            self.local_by_ip.get(ip).copied(),
            self.remote_by_ip.get(ip).copied(),
        )
    }

    /// Takes `ep` into the view; whether it is remote and its addresses.
    fn note(&mut self, ep: &Endpoint) -> (bool, Vec<IpAddr>) {
        let (remote, ips) = (ep.is_remote(), ep.ips().collect::<Vec<_>>());
        let map = if remote {
            &mut self.remote_by_ip
        } else {
            &mut self.local_by_ip
        };
        for ip in &ips {
            map.insert(*ip, ep.id);
        }
        self.endpoints.insert(ep.id, (remote, ips.clone()));
        (remote, ips)
    }

    /// Drops endpoint `id` from the view; what it was, if the view had it.
    fn forget(&mut self, id: Guid) -> Option<(bool, Vec<IpAddr>)> {
        let (remote, ips) = self.endpoints.remove(&id)?;
        let map = if remote {
            &mut self.remote_by_ip
        } else {
            &mut self.local_by_ip
        };
        for ip in &ips {
            if map.get(ip) == Some(&id) {
                map.remove(ip);
            }
        }
        Some((remote, ips))
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
        // Two rounds of concurrent calls: first what frees or provides (new remote endpoints,
        // load balancers to delete), then what uses them (load balancers created or updated,
        // remote endpoints no plan wants any more).
        let mut first = self.remote_creates(&touched, &mut report);
        first.extend(self.lb_deletes(&wanted, stale));
        let results = execute(&self.client, first, self.modify_supported).await;
        self.absorb(results, &mut report);
        let mut second = self.lb_writes(&wanted, &mut report);
        second.extend(unused.iter().filter_map(|ip| {
            self.remote_by_ip
                .get(ip)
                .map(|id| Call::DeleteRemote { ip: *ip, id: *id })
        }));
        let results = execute(&self.client, second, self.modify_supported).await;
        self.absorb(results, &mut report);
        report
    }

    /// Remote endpoints the touched Services need that HNS does not have.
    fn remote_creates(&self, touched: &[ServiceKey], report: &mut SyncReport) -> Vec<Call> {
        let mut calls = Vec::new();
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
                calls.push(Call::CreateRemote {
                    key: key.clone(),
                    endpoint: remote_endpoint(self.network.id, r),
                });
            }
        }
        calls
    }

    /// Load balancers to delete before the new ones are written: stale ones, those whose
    /// Service wants none now, and those HNS cannot modify in place.
    fn lb_deletes(&self, wanted: &[(ServiceKey, DesiredLb)], stale: Vec<Frontend>) -> Vec<Call> {
        let mut calls: Vec<Call> = stale
            .into_iter()
            .filter_map(|f| {
                self.lbs.get(&f).map(|lb| Call::DeleteLb {
                    key: None,
                    id: lb.id,
                    frontend: f,
                })
            })
            .collect();
        for (key, want) in wanted {
            let Some(old) = self.lbs.get(&want.frontend) else {
                continue;
            };
            let (ids, missing) = self.resolve(want);
            let changed = !missing.is_empty() || !same_lb(old, &hns_lb(want, ids.clone()));
            if ids.is_empty() && missing.is_empty() || changed && !self.modify_supported {
                calls.push(Call::DeleteLb {
                    key: Some(key.clone()),
                    id: old.id,
                    frontend: want.frontend.clone(),
                });
            }
        }
        calls
    }

    /// Load balancers to create or update, with backends resolved after the first round.
    fn lb_writes(&self, wanted: &[(ServiceKey, DesiredLb)], report: &mut SyncReport) -> Vec<Call> {
        let mut calls = Vec::new();
        for (key, want) in wanted {
            let (ids, missing) = self.resolve(want);
            if !missing.is_empty() {
                report.problems.push(format!(
                    "{key}: backend(s) {missing:?} not in HNS yet (a local endpoint is made by the CNI); retrying"
                ));
                report.retry.insert(key.clone());
            }
            let old = self.lbs.get(&want.frontend);
            if ids.is_empty() {
                if let Some(old) = old {
                    calls.push(Call::DeleteLb {
                        key: Some(key.clone()),
                        id: old.id,
                        frontend: want.frontend.clone(),
                    });
                }
                continue;
            }
            let new = hns_lb(want, ids);
            let frontend = want.frontend.clone();
            match old {
                Some(o) if same_lb(o, &new) => {} // adopted or unchanged: no HNS call
                Some(o) => calls.push(Call::UpdateLb {
                    key: key.clone(),
                    frontend,
                    id: o.id,
                    lb: new,
                }),
                None => calls.push(Call::CreateLb {
                    key: key.clone(),
                    frontend,
                    lb: new,
                }),
            }
        }
        calls
    }

    /// Resolves a desired LB's backends to HNS endpoint IDs, and the addresses not in HNS.
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

    /// Takes the answers into the observed state and the report.
    fn absorb(&mut self, results: Vec<(Call, CallResult)>, report: &mut SyncReport) {
        for (call, result) in results {
            if result.not_implemented {
                self.modify_supported = false;
            }
            match (call, result.outcome) {
                (Call::CreateRemote { mut endpoint, .. }, Ok(Done::Endpoint(id))) => {
                    endpoint.id = id;
                    self.note(&endpoint);
                    report.remote_created += 1;
                }
                (Call::DeleteRemote { ip, id }, Ok(_)) => {
                    if self.forget(id).is_none() {
                        self.remote_by_ip.remove(&ip);
                    }
                    self.own_deletes.insert(id);
                    report.remote_deleted += 1;
                }
                (Call::DeleteLb { frontend, .. }, Ok(_)) => {
                    self.lbs.remove(&frontend);
                    report.deleted += 1;
                }
                (Call::CreateLb { frontend, .. }, Ok(Done::Lb(lb))) => {
                    self.lbs.insert(frontend, lb);
                    report.created += 1;
                }
                (Call::UpdateLb { frontend, .. }, Ok(Done::Lb(lb))) => {
                    self.lbs.insert(frontend, lb);
                    if result.recreated {
                        report.deleted += 1;
                        report.created += 1;
                    } else {
                        report.updated += 1;
                    }
                }
                (call, Ok(_)) => report
                    .problems
                    .push(format!("unexpected answer to {}", call.describe())),
                (call, Err(e)) => {
                    if result.recreated {
                        // Deleted, then the create failed: the frontend is free now.
                        if let Call::UpdateLb { frontend, .. } = &call {
                            self.lbs.remove(frontend);
                        }
                    }
                    report.problems.push(format!("{}: {e}", call.describe()));
                    report.hns_failures += 1;
                    if let Some(key) = call.service() {
                        report.retry.insert(key.clone());
                    }
                }
            }
        }
    }
}

/// One HNS call of a sync.
// Calls live for one sync and are moved into their future once; boxing buys nothing.
#[allow(clippy::large_enum_variant)]
enum Call {
    CreateRemote {
        key: ServiceKey,
        endpoint: Endpoint,
    },
    DeleteRemote {
        ip: IpAddr,
        id: Guid,
    },
    DeleteLb {
        key: Option<ServiceKey>,
        id: Guid,
        frontend: Frontend,
    },
    CreateLb {
        key: ServiceKey,
        frontend: Frontend,
        lb: LoadBalancer,
    },
    /// Modify in place; where HNS answers E_NOTIMPL, delete + create.
    UpdateLb {
        key: ServiceKey,
        frontend: Frontend,
        id: Guid,
        lb: LoadBalancer,
    },
}

impl Call {
    fn service(&self) -> Option<&ServiceKey> {
        match self {
            Call::CreateRemote { key, .. }
            | Call::CreateLb { key, .. }
            | Call::UpdateLb { key, .. } => Some(key),
            Call::DeleteLb { key, .. } => key.as_ref(),
            Call::DeleteRemote { .. } => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Call::CreateRemote { key, endpoint } => format!(
                "{key}: creating remote endpoint {:?}",
                endpoint.ips().next()
            ),
            Call::DeleteRemote { ip, .. } => format!("deleting remote endpoint {ip}"),
            Call::DeleteLb { frontend, .. } => format!("deleting load balancer {frontend:?}"),
            Call::CreateLb { key, frontend, .. } => {
                format!("{key}: creating load balancer {frontend:?}")
            }
            Call::UpdateLb { key, frontend, .. } => {
                format!("{key}: updating load balancer {frontend:?}")
            }
        }
    }
}

enum Done {
    Endpoint(Guid),
    Lb(LoadBalancer),
    Gone,
}

struct CallResult {
    outcome: Result<Done, ClientError>,
    not_implemented: bool,
    /// An update done as delete + create.
    recreated: bool,
}

/// Runs calls concurrently (they are independent by construction).
async fn execute(client: &Arc<Client>, calls: Vec<Call>, modify: bool) -> Vec<(Call, CallResult)> {
    futures::stream::iter(calls)
        .map(|call| {
            let client = Arc::clone(client);
            async move {
                let result = call.run(&client, modify).await;
                (call, result)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

impl Call {
    async fn run(&self, client: &Client, modify: bool) -> CallResult {
        let mut r = CallResult {
            outcome: Ok(Done::Gone),
            not_implemented: false,
            recreated: false,
        };
        let gone = |res: Result<(), ClientError>| match res {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(Done::Gone),
        };
        r.outcome = match self {
            Call::CreateRemote { endpoint, .. } => client
                .create_endpoint(endpoint)
                .await
                .map(|e| Done::Endpoint(e.id)),
            Call::DeleteRemote { id, .. } => gone(client.delete_endpoint(*id).await),
            Call::DeleteLb { id, .. } => gone(client.delete_load_balancer(*id).await),
            Call::CreateLb { lb, .. } => client.create_load_balancer(lb).await.map(Done::Lb),
            Call::UpdateLb { id, lb, .. } => {
                let updated = if modify {
                    Some(client.update_load_balancer(*id, lb).await)
                } else {
                    None
                };
                match updated {
                    Some(Ok(lb)) => Ok(Done::Lb(lb)),
                    Some(Err(e)) if e.code() != Some(HResult::E_NOTIMPL) => Err(e),
                    other => {
                        r.not_implemented = other.is_some();
                        match gone(client.delete_load_balancer(*id).await) {
                            Ok(_) => {
                                r.recreated = true;
                                client.create_load_balancer(lb).await.map(Done::Lb)
                            }
                            Err(e) => Err(e),
                        }
                    }
                }
            }
        };
        r
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
        // kube-proxy's ServicePortName: `ns/name`, and `:port` only for a named port.
        linux_service: if want.port_name.is_empty() {
            want.service.to_string()
        } else {
            format!("{}:{}", want.service, want.port_name)
        },
        ..LoadBalancer::default()
    }
}

/// Same load balancer, ignoring the ID, the order of backends and winnet's `LinuxService` label:
/// an LB that another proxy made with the same HCN fields is adopted as it is (winkernel reuses
/// an existing LB that matches, hns_test.go TestGetLoadBalancerExisting).
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
