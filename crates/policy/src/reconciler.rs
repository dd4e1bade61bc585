//! Applies a [`Plan`] to HNS through `hns-client`, changing only what differs from what HNS
//! holds: an endpoint whose ACLs are already the planned ones is not touched (on Windows,
//! re-applying an endpoint's ACLs resets its live TCP connections even when nothing changed),
//! so a restarted agent adopts what an earlier one programmed. One call per changed endpoint
//! (its whole ACL list), sets added before the ACLs that name them and removed after.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use hcn::policy::{AclPolicySetting, SetPolicySetting};
use hcn::{Endpoint, NetworkPolicy, RequestType};
use hns_client::Client;
use hns_client::acl::endpoint_acls;
use serde_json::json;

use crate::acl::{Acl, IpSet, hcn_acls};
use crate::planner::Plan;
use crate::problem::Style;

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

/// Talks to HNS for the agent, as `style`'s peer does: felix's v1 endpoint update (calico),
/// or a v2 policy Update of the endpoint (npm).
pub struct Reconciler {
    client: Arc<Client>,
    network_name: String,
    style: Style,
}

impl Reconciler {
    pub fn new(client: Arc<Client>, network_name: &str, style: Style) -> Reconciler {
        Reconciler {
            client,
            network_name: network_name.to_string(),
            style,
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

    /// Adds the missing sets and updates changed ones (hns-client orders plain before
    /// nested); returns the held sets the plan no longer has.
    async fn add_sets(
        &self,
        network: hcn::Guid,
        wanted: &[IpSet],
        held: &BTreeMap<String, SetPolicySetting>,
        report: &mut SyncReport,
    ) -> Vec<SetPolicySetting> {
        let mut new = Vec::new();
        let mut changed = Vec::new();
        for set in wanted {
            match set.setting() {
                Ok(s) => match held.get(&set.id) {
                    None => new.push(s),
                    Some(h) if *h != s => changed.push(s),
                    Some(_) => {}
                },
                Err(e) => report.errors.push(e),
            }
        }
        let (n_new, n_changed) = (new.len(), changed.len());
        if self.sets_call(network, RequestType::Add, new, report).await {
            report.sets_added += n_new;
        }
        if self
            .sets_call(network, RequestType::Update, changed, report)
            .await
        {
            report.sets_updated += n_changed;
        }
        let ids: BTreeSet<&str> = wanted.iter().map(|s| s.id.as_str()).collect();
        held.values()
            .filter(|h| !ids.contains(h.id.as_str()))
            .cloned()
            .collect()
    }

    /// Removes sets nothing names any more, nested ones with their members in one request.
    async fn remove_sets(
        &self,
        network: hcn::Guid,
        stale: Vec<SetPolicySetting>,
        report: &mut SyncReport,
    ) {
        let n = stale.len();
        if self
            .sets_call(network, RequestType::Remove, stale, report)
            .await
        {
            report.sets_removed += n;
        }
    }

    /// One network modify call (none when there is nothing to send); false when it failed.
    async fn sets_call(
        &self,
        network: hcn::Guid,
        request: RequestType,
        sets: Vec<SetPolicySetting>,
        report: &mut SyncReport,
    ) -> bool {
        if sets.is_empty() {
            return true;
        }
        report.hns_calls += 1;
        match self.client.set_policies(network, request, sets).await {
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
            match hcn_acls(wanted, self.style) {
                Ok(decoded) => self.apply_endpoint(ep, pod, wanted, decoded, report).await,
                Err(e) => report.errors.push(format!("pod {pod}: {e}")),
            }
        }
    }

    /// Sends `ep`'s whole ACL list when it differs from what HNS holds.
    async fn apply_endpoint(
        &self,
        ep: &Endpoint,
        pod: &str,
        acls: &[Acl],
        wanted: Vec<AclPolicySetting>,
        report: &mut SyncReport,
    ) {
        let held: Vec<AclPolicySetting> = endpoint_acls(ep).into_iter().cloned().collect();
        if held == wanted {
            report.endpoints_unchanged += 1;
            return;
        }
        report.hns_calls += 1;
        let sent = match self.style {
            Style::Npm => self
                .client
                .set_endpoint_acls(ep.id, wanted)
                .await
                .map(|_| ()),
            Style::Calico => self
                .client
                .apply_v1_endpoint(ep.id, &v1_document(ep, acls))
                .await
                .map(|_| ()),
        };
        match sent {
            Ok(()) => report.endpoints_updated += 1,
            Err(e) => report
                .errors
                .push(format!("the ACLs of pod {pod} (endpoint {}): {e}", ep.id)),
        }
    }
}

/// Felix's v1 update of `ep`: the endpoint's ID and its ACLs, nothing else (felix builds a
/// bare `HNSEndpoint{Id}` and calls `ApplyACLPolicy`); HNS replaces the endpoint's ACLs with
/// them and keeps its other policies.
fn v1_document(ep: &Endpoint, acls: &[Acl]) -> serde_json::Value {
    let policies: Vec<serde_json::Value> = acls.iter().map(Acl::v1_json).collect();
    json!({ "Id": ep.id, "Policies": policies })
}

/// The sets the npm style holds on the network, by ID.
fn held_sets(policies: &[NetworkPolicy]) -> BTreeMap<String, SetPolicySetting> {
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
