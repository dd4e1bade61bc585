//! The pure planner, twin of `proxy::planner::plan_service`: a [`Cluster`] and the node to
//! [`Plan`] — the ACL list of each local pod's endpoint, the network IP sets (npm style), and
//! the constructs the style could not express, typed.

pub mod calico;
pub mod felix;
pub mod npm;

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::acl::{Acl, IpSet};
use crate::cluster::Cluster;
use crate::model::Direction;
use crate::problem::{Problem, Style};

/// What the plan depends on besides the objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeContext {
    /// The node whose pods are programmed.
    pub node: String,
    /// The node's own addresses (calico's node -> endpoint Allow).
    pub host_addresses: Vec<IpNet>,
}

/// One local pod's endpoint and its whole ACL list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointPlan {
    /// `namespace/name` of the pod.
    pub pod: String,
    pub acls: Vec<Acl>,
}

/// Everything the node should hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// By the endpoint's IPv4 address (how HNS endpoints are found from pods).
    pub endpoints: BTreeMap<IpAddr, EndpointPlan>,
    /// Network IP sets, plain ones before nested ones.
    pub sets: Vec<IpSet>,
    pub problems: Vec<Problem>,
}

impl Plan {
    /// ACL rules over all endpoints.
    pub fn rule_count(&self) -> usize {
        self.endpoints.values().map(|e| e.acls.len()).sum()
    }
}

/// The node's plan under `style`.
pub fn plan(cluster: &Cluster, ctx: &NodeContext, style: Style) -> Plan {
    match style {
        Style::Calico => plan_calico(cluster, ctx),
        Style::Npm => plan_npm(cluster, ctx),
    }
}

/// The address the pod's HNS endpoint carries (the Windows dataplanes are IPv4).
fn endpoint_ip(ips: &[IpAddr]) -> Option<IpAddr> {
    ips.iter().copied().find(IpAddr::is_ipv4)
}

/// Each local pod's endpoint with the ACLs `acls_of` gives it.
fn local_endpoints(
    cluster: &Cluster,
    ctx: &NodeContext,
    mut acls_of: impl FnMut(&crate::model::Pod) -> Vec<Acl>,
) -> BTreeMap<IpAddr, EndpointPlan> {
    let mut endpoints = BTreeMap::new();
    for pod in cluster.local_pods(&ctx.node) {
        if let Some(ip) = endpoint_ip(&pod.ips) {
            let acls = acls_of(pod);
            endpoints.insert(
                ip,
                EndpointPlan {
                    pod: pod.key(),
                    acls,
                },
            );
        }
    }
    endpoints
}

fn plan_calico(cluster: &Cluster, ctx: &NodeContext) -> Plan {
    let mut problems = Vec::new();
    let mut rules = BTreeMap::new();
    for p in &cluster.policies {
        for dir in [Direction::Ingress, Direction::Egress] {
            if p.rules(dir).is_some() {
                let r = calico::calico_rules(cluster, p, dir, &mut problems);
                rules.insert((p.key(), dir), r);
            }
        }
    }
    let endpoints = local_endpoints(cluster, ctx, |pod| {
        calico::endpoint_acls(cluster, pod, &ctx.host_addresses, &rules)
    });
    Plan {
        endpoints,
        sets: Vec::new(),
        problems,
    }
}

fn plan_npm(cluster: &Cluster, ctx: &NodeContext) -> Plan {
    let mut problems = Vec::new();
    let mut sets = npm::Sets::default();
    let mut applied = Vec::new();
    for p in &cluster.policies {
        let refused = npm::refused(p);
        if refused.is_empty() {
            applied.push(p);
        }
        problems.extend(refused);
    }
    let endpoints = local_endpoints(cluster, ctx, |pod| {
        let selecting = applied.iter().filter(|p| p.selects(pod));
        selecting
            .flat_map(|p| npm::policy_acls(&mut sets, cluster, p))
            .collect()
    });
    Plan {
        endpoints,
        sets: sets.ordered(),
        problems,
    }
}
