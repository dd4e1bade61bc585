//! The NetworkPolicy agent on every node: the real `winnet policy` agent (`policy::agent::Agent`,
//! its planner and reconciler) on the node's in-process hnsd, syncing the cluster's
//! NetworkPolicies, Pods and Namespaces as the manifests hand them to it. A style the node's
//! HNS cannot carry (npm without SetPolicy) is refused as the agent refuses to start, and the
//! node then enforces nothing.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hcn::error::HnsError;
use ipnet::IpNet;
use kubesrc::{Objects, Source};
use policy::Style;
use policy::agent::{Agent, Config, check_hns};

use super::super::cluster::Cluster;
use super::super::node::block_on;

/// Each node's agent, once started, or why it did not start.
#[derive(Default)]
pub struct Policies {
    style: Option<Style>,
    running: Vec<Option<Result<Agent, String>>>,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("style", &self.style)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Hands every node's agent of `style` `objects` (what the kube API now holds) and lets
    /// each sync once. Returns, per node, why its agent does not run (npm without SetPolicy)
    /// or the errors its sync met (empty when it synced cleanly).
    pub fn sync_policies(
        &mut self,
        style: Style,
        objects: &Objects,
    ) -> Result<Vec<Result<Vec<String>, String>>, HnsError> {
        if self.policies.style != Some(style) {
            self.policies = Policies {
                style: Some(style),
                running: Vec::new(),
            };
        }
        let cluster = policy::Cluster::from_objects(objects);
        self.policies.running.resize_with(self.nodes.len(), || None);
        let mut out = Vec::new();
        for i in 0..self.nodes.len() {
            if self.policies.running[i].is_none() {
                let Some(config) = self.policy_config(i, style) else {
                    out.push(Err(format!("{}: no pod network yet", self.nodes[i].name)));
                    continue;
                };
                let client = Arc::new(self.nodes[i].hns.clone());
                let started = block_on(check_hns(&client, style))?
                    .map(|()| Agent::new(Arc::clone(&client), &config));
                self.policies.running[i] = Some(started);
            }
            match self.policies.running[i].as_mut() {
                Some(Ok(agent)) => {
                    let (_, report) = block_on(agent.sync(&cluster))?;
                    out.push(Ok(report.errors));
                }
                Some(Err(why)) => out.push(Err(why.clone())),
                None => out.push(Err("not started".into())),
            }
            self.nodes[i].sync_host();
        }
        Ok(out)
    }

    /// Node `i`'s agent flags as the local cluster starts it (`--host-address` the node's
    /// own, `--network-name` flannel's network); `None` before flanneld made the network.
    fn policy_config(&self, i: usize, style: Style) -> Option<Config> {
        let node = &self.nodes[i];
        let net = node.network.as_ref()?;
        let host: Vec<IpNet> = node
            .compiler()
            .facts()
            .ips()
            .filter(IpAddr::is_ipv4)
            .map(IpNet::from)
            .collect();
        Some(Config {
            style,
            node: node.name.clone(),
            network_name: net.name.clone(),
            hns_socket: PathBuf::new(),
            source: Source::Manifests {
                dir: PathBuf::new(),
                poll: std::time::Duration::from_secs(1),
            },
            host_addresses: host,
            healthz_bind: None,
        })
    }
}
