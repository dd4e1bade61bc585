//! The node's NetworkPolicy agent's plan, for the doctor's policy checks: the agent's own
//! planner over the NetworkPolicies, Pods and Namespaces it reads, with the same style and
//! node addresses, each ACL with the NetworkPolicy rule that made it.

use hcn::Endpoint;
use hns_client::acl::endpoint_acls;
use ipnet::IpNet;
use policy::explain::{self, Source};
use policy::model::Direction;
use policy::{Cluster, NodeContext, Style};

use doctor::planned::{PlannedAcl, PlannedEndpoint, PlannedSet, PolicyView};

/// What the agent of a node is started with, when known (the local cluster knows; elsewhere
/// both are read back from what the endpoints hold).
#[derive(Clone, Debug, Default)]
pub struct AgentFacts {
    pub style: Option<Style>,
    pub host_addresses: Option<Vec<IpNet>>,
}

/// The plan of node `node`'s agent; `None` when there is no NetworkPolicy and no endpoint of
/// the node holds an ACL (no agent to compare).
pub fn view(
    objects: &kubesrc::Objects,
    origin: &str,
    node: &str,
    endpoints: &[Endpoint],
    agent: &AgentFacts,
) -> anyhow::Result<Option<PolicyView>> {
    let cluster = Cluster::from_objects(objects);
    let held: Vec<&hcn::policy::AclPolicySetting> =
        endpoints.iter().flat_map(endpoint_acls).collect();
    if cluster.policies.is_empty() && held.is_empty() {
        return Ok(None);
    }
    let style = agent.style.unwrap_or_else(|| {
        held.iter()
            .map(|a| explain::style_of_id(&a.id))
            .find(|s| *s == Style::Npm)
            .unwrap_or(Style::Calico)
    });
    let host_addresses = agent
        .host_addresses
        .clone()
        .unwrap_or_else(|| explain::host_addresses_of(held.iter().copied()));
    let ctx = NodeContext {
        node: node.to_string(),
        host_addresses,
    };
    let plan = policy::plan(&cluster, &ctx, style);
    let explained = explain::explain_plan(&cluster, &plan, style)
        .map_err(|e| anyhow::anyhow!("the NetworkPolicy plan of node {node}: {e}"))?;
    let endpoints = explained
        .into_iter()
        .map(|(ip, ep)| PlannedEndpoint {
            isolated: isolated(&cluster, &ep.pod),
            pod: ep.pod,
            ip,
            acls: ep
                .acls
                .into_iter()
                .map(|a| PlannedAcl {
                    made_by: a.source.to_string(),
                    policy: policy_of(&a.source),
                    acl: a.setting,
                })
                .collect(),
        })
        .collect();
    Ok(Some(PolicyView {
        style: style.name().into(),
        source: origin.to_string(),
        endpoints,
        sets: plan
            .sets
            .iter()
            .map(|s| PlannedSet {
                id: s.id.clone(),
                name: s.name.clone(),
            })
            .collect(),
    }))
}

fn policy_of(s: &Source) -> Option<String> {
    s.policy().map(str::to_string)
}

/// The directions some NetworkPolicy isolates for the pod `key` (`namespace/name`).
fn isolated(cluster: &Cluster, key: &str) -> Vec<String> {
    let Some(pod) = cluster.pods.iter().find(|p| p.key() == key) else {
        return Vec::new();
    };
    [Direction::Ingress, Direction::Egress]
        .into_iter()
        .filter(|d| {
            cluster
                .policies
                .iter()
                .any(|p| p.selects(pod) && p.rules(*d).is_some())
        })
        .map(|d| d.name().to_string())
        .collect()
}
