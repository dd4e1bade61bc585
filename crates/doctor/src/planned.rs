//! What the node's NetworkPolicy agent plans, as the doctor compares it with HNS: each local
//! pod's endpoint with its ACLs (as HNS holds them) and the NetworkPolicy rule behind each, and
//! the network sets the ACLs name. Made by `winnet` with the agent's own planner over the same
//! NetworkPolicies, Pods and Namespaces and the same style, so a bundle carries it whole.

use std::net::IpAddr;

use hcn::policy::AclPolicySetting;
use serde::{Deserialize, Serialize};

/// The agent's plan for this node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyView {
    /// `calico` or `npm`.
    pub style: String,
    /// Where the NetworkPolicies came from (a folder, a kube API).
    pub source: String,
    pub endpoints: Vec<PlannedEndpoint>,
    /// The network sets the plan names (npm style).
    pub sets: Vec<PlannedSet>,
}

/// One local pod's endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedEndpoint {
    /// `namespace/name`.
    pub pod: String,
    pub ip: IpAddr,
    pub acls: Vec<PlannedAcl>,
    /// The directions (`ingress`, `egress`) some NetworkPolicy isolates for this pod.
    #[serde(default)]
    pub isolated: Vec<String>,
}

/// One ACL and what made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedAcl {
    pub acl: AclPolicySetting,
    /// In words: "NetworkPolicy x/web rule spec.ingress[0]", ...
    pub made_by: String,
    /// The NetworkPolicy (`namespace/name`), when one made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// A network set the plan names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedSet {
    pub id: String,
    /// Its name before hashing (`ns-x`, `podlabel-app:web`).
    pub name: String,
}
