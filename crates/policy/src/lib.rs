//! `winnet policy`: the NetworkPolicy agent of a Windows node. NetworkPolicies, Pods and
//! Namespaces come from the shared Kubernetes source (`kubesrc`); a pure planner turns them
//! into each local endpoint's HNS ACLs as Calico for Windows (`--style calico`) or Azure NPM
//! (`--style npm`) programs them, with what Windows cannot express reported, typed; a
//! reconciler applies only what changed through `hns-client`.

#![forbid(unsafe_code)]

pub mod acl;
pub mod agent;
pub mod cluster;
pub mod explain;
pub mod lint;
pub mod metrics;
pub mod model;
pub mod nftables;
pub mod planner;
pub mod problem;
pub mod reconciler;

pub use cluster::{Cluster, Connection};
pub use planner::{NodeContext, Plan, plan};
pub use problem::{Construct, Effect, Problem, Style};
