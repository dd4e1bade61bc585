//! Applies a [`Plan`] to HNS through `hns-client`, changing only what differs from what HNS
//! holds: an endpoint whose ACLs are already the planned ones is not touched (on Windows,
//! re-applying an endpoint's ACLs resets its live TCP connections even when nothing changed),
//! so a restarted agent adopts what an earlier one programmed. One call per changed endpoint
//! (its whole ACL list), sets added before the ACLs that name them and removed after.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use hcn::{Endpoint, EndpointPolicy, NetworkPolicy, RequestType};
use hns_client::Client;

use crate::acl::{IpSet, SetKind};
use crate::planner::Plan;

/// The prefix of the set IDs the npm style owns on the network.
const SET_PREFIX: &str = "azure-npm-";

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Endpoints whose ACL list was sent.
    pub endpoints_updated: usize,
    /// Endpoints that already held their planned ACLs.
    pub endpoints_unchanged: usize,
    /// Local pods (`namespace/name`) without an HNS endpoint yet (the CNI has not made it):
    /// retried.
    pub endpoints_pending: Vec<String>,
    pub sets_added: usize,
    pub sets_updated: usize,
    pub sets_removed: usize,
    /// Modify calls sent.
    pub hns_calls: usize,
    /// What failed, each with HNS's reason; retried.
    pub errors: Vec<String>,
}

impl SyncReport {
    /// Whether the next sync must come soon (something is pending or failed).
    pub fn needs_retry(&self) -> bool {
        !self.endpoints_pending.is_empty() || !self.errors.is_empty()
    }
}

/// Talks to HNS for the agent.
pub struct Reconciler {
    client: Arc<Client>,
    network_name: String,
}

impl Reconciler {
    pub fn new(client: Arc<Client>, network_name: &str) -> Reconciler {
        Reconciler {
            client,
            network_name: network_name.to_string(),
        }
    }

    /// Makes HNS hold `plan` for the pods whose addresses are `local_pods` (pod key by
    /// address): endpoints of other addresses are left alone.
    pub async fn sync(&self, plan: &Plan, local_pods: &BTreeMap<IpAddr, String>) -> SyncReport {
        let mut report = SyncReport::default();
        let network = match self.client.get_network_by_name(&self.network_name).await {
            Ok(Some(n)) => n,
            Ok(None) => {
                report.errors.push(format!(
                    "network {} is not in HNS (yet); nothing programmed",
                    self.network_name
                ));
                return report;
            }
            Err(e) => {
                report
                    .errors
                    .push(format!("reading network {}: {e}", self.network_name));
                return report;
            }
        };
        let endpoints = match self.client.list_endpoints_of_network(network.id).await {
            Ok(e) => e,
            Err(e) => {
                report.errors.push(format!("listing endpoints: {e}"));
                return report;
            }
        };
        let held = held_sets(&network.policies);
        let stale = self
            .add_sets(network.id, &plan.sets, &held, &mut report)
            .await;
        self.apply_endpoints(plan, local_pods, &endpoints, &mut report)
            .await;
        // Sets go once nothing names them: only when every endpoint took its new list.
        if report.errors.is_empty() {
            self.remove_sets(network.id, stale, &mut report).await;
        }
        report
    }

    /// Adds the missing sets (plain, then nested) and updates changed ones; returns the held
    /// sets the plan no longer has.
    async fn add_sets(
        &self,
        network: hcn::Guid,
        wanted: &[IpSet],
        held: &BTreeMap<String, hcn::policy::SetPolicySetting>,
        report: &mut SyncReport,
    ) -> Vec<hcn::policy::SetPolicySetting> {
        for kind in [SetKind::IpSet, SetKind::Nested] {
            let new: Vec<NetworkPolicy> = wanted
                .iter()
                .filter(|s| s.kind == kind && !held.contains_key(&s.id))
                .map(|s| NetworkPolicy::SetPolicy(s.setting()))
                .collect();
            let n = new.len();
            if self
                .network_call(network, RequestType::Add, new, report)
                .await
            {
                report.sets_added += n;
            }
        }
        let changed: Vec<NetworkPolicy> = wanted
            .iter()
            .filter(|s| held.get(&s.id).is_some_and(|h| *h != s.setting()))
            .map(|s| NetworkPolicy::SetPolicy(s.setting()))
            .collect();
        let n = changed.len();
        if self
            .network_call(network, RequestType::Update, changed, report)
            .await
        {
            report.sets_updated += n;
        }
        let ids: BTreeSet<&str> = wanted.iter().map(|s| s.id.as_str()).collect();
        held.values()
            .filter(|h| !ids.contains(h.id.as_str()))
            .cloned()
            .collect()
    }

    /// Removes sets nothing names any more: nested ones first (they name the plain ones).
    async fn remove_sets(
        &self,
        network: hcn::Guid,
        stale: Vec<hcn::policy::SetPolicySetting>,
        report: &mut SyncReport,
    ) {
        let (nested, plain): (Vec<_>, Vec<_>) = stale
            .into_iter()
            .partition(|s| s.policy_type == "NESTEDIPSET");
        for group in [nested, plain] {
            let n = group.len();
            let policies = group.into_iter().map(NetworkPolicy::SetPolicy).collect();
            if self
                .network_call(network, RequestType::Remove, policies, report)
                .await
            {
                report.sets_removed += n;
            }
        }
    }

    /// One network modify call (none when there is nothing to send); false when it failed.
    async fn network_call(
        &self,
        network: hcn::Guid,
        request: RequestType,
        policies: Vec<NetworkPolicy>,
        report: &mut SyncReport,
    ) -> bool {
        if policies.is_empty() {
            return true;
        }
        report.hns_calls += 1;
        match self.client.network_policy(network, request, policies).await {
            Ok(_) => true,
            Err(e) => {
                report.errors.push(format!("{request} of IP sets: {e}"));
                false
            }
        }
    }

    async fn apply_endpoints(
        &self,
        plan: &Plan,
        local_pods: &BTreeMap<IpAddr, String>,
        endpoints: &[Endpoint],
        report: &mut SyncReport,
    ) {
        let by_ip: BTreeMap<IpAddr, &Endpoint> = endpoints
            .iter()
            .flat_map(|e| e.ips().map(move |ip| (ip, e)))
            .collect();
        for (ip, pod) in local_pods {
            let Some(ep) = by_ip.get(ip) else {
                if plan.endpoints.contains_key(ip) {
                    report.endpoints_pending.push(pod.clone());
                }
                continue;
            };
            let wanted = plan
                .endpoints
                .get(ip)
                .map(|e| e.acls.as_slice())
                .unwrap_or_default();
            match hcn_acls(wanted) {
                Ok(wanted) => self.apply_endpoint(ep, pod, wanted, report).await,
                Err(e) => report.errors.push(format!("pod {pod}: {e}")),
            }
        }
    }

    /// Sends `ep`'s whole ACL list when it differs from what HNS holds.
    async fn apply_endpoint(
        &self,
        ep: &Endpoint,
        pod: &str,
        wanted: Vec<EndpointPolicy>,
        report: &mut SyncReport,
    ) {
        let held: Vec<EndpointPolicy> = ep
            .policies
            .iter()
            .filter(|p| matches!(p, EndpointPolicy::Acl(_)))
            .cloned()
            .collect();
        if held == wanted {
            report.endpoints_unchanged += 1;
            return;
        }
        // Update replaces the endpoint's ACLs whole; with none wanted, the held ones go.
        let (request, policies) = match (held.is_empty(), wanted.is_empty()) {
            (true, _) => (RequestType::Add, wanted),
            (false, true) => (RequestType::Remove, held),
            (false, false) => (RequestType::Update, wanted),
        };
        report.hns_calls += 1;
        match self.client.endpoint_policy(ep.id, request, policies).await {
            Ok(_) => report.endpoints_updated += 1,
            Err(e) => report.errors.push(format!(
                "{request} of the ACLs of pod {pod} (endpoint {}): {e}",
                ep.id
            )),
        }
    }
}

/// The sets the npm style holds on the network, by ID.
fn held_sets(policies: &[NetworkPolicy]) -> BTreeMap<String, hcn::policy::SetPolicySetting> {
    policies
        .iter()
        .filter_map(|p| match p {
            NetworkPolicy::SetPolicy(s) if s.id.starts_with(SET_PREFIX) => {
                Some((s.id.clone(), s.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The plan's ACLs as hcn policies, identical ones once (HNS refuses a duplicate).
fn hcn_acls(acls: &[crate::acl::Acl]) -> Result<Vec<EndpointPolicy>, String> {
    let mut out: Vec<EndpointPolicy> = Vec::with_capacity(acls.len());
    for a in acls {
        let p = a.to_hcn()?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}
