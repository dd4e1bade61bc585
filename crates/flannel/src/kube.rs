//! The kube subnet manager: a node's `spec.podCIDR` is its lease; flanneld publishes its
//! backend in its Node's annotations (`flannel.alpha.coreos.com/*`) and watches the other
//! Nodes for theirs. A Node that is deleted takes its lease with it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use futures::StreamExt;
use futures::stream::BoxStream;
use ipnet::Ipv4Net;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;

use crate::Error;
use crate::lease::{Lease, LeaseAttrs};

/// The kube subnet manager of one node.
pub struct KubeManager {
    nodes: Api<Node>,
    name: String,
    store: Option<Store<Node>>,
    events: Option<BoxStream<'static, Result<watcher::Event<Node>, watcher::Error>>>,
}

impl KubeManager {
    /// Connects with `kubeconfig` (else the in-cluster or default config) as Node `name`.
    pub async fn connect(kubeconfig: Option<&Path>, name: &str) -> Result<KubeManager, Error> {
        let config = match kubeconfig {
            Some(p) => {
                let kc = kube::config::Kubeconfig::read_from(p)
                    .map_err(|e| Error::Kube(format!("--kubeconfig-file {}: {e}", p.display())))?;
                kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .map_err(|e| Error::Kube(format!("--kubeconfig-file {}: {e}", p.display())))?
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| Error::Kube(format!("no kubeconfig: {e}; pass --kubeconfig-file")))?,
        };
        let client = kube::Client::try_from(config).map_err(|e| Error::Kube(e.to_string()))?;
        Ok(KubeManager {
            nodes: Api::all(client),
            name: name.to_string(),
            store: None,
            events: None,
        })
    }

    /// This node's lease: its podCIDR, published with `attrs`. Fails (and changes nothing)
    /// when the Node has no IPv4 podCIDR yet, the podCIDR is outside `network` (the
    /// net-conf's), or another Node has the same one.
    pub async fn acquire(&mut self, network: Ipv4Net, attrs: &LeaseAttrs) -> Result<Lease, Error> {
        let node = self
            .nodes
            .get_opt(&self.name)
            .await
            .map_err(|e| Error::Kube(format!("get Node {}: {e}", self.name)))?
            .ok_or_else(|| {
                Error::Kube(format!(
                    "Node {} does not exist; set NODE_NAME or --node-name to this node's name",
                    self.name
                ))
            })?;
        let subnet = pod_cidr(&node).ok_or_else(|| {
            Error::NoPodCidr(format!(
                "Node {} has no IPv4 spec.podCIDR yet; the controller manager assigns one with --allocate-node-cidrs",
                self.name
            ))
        })?;
        if !network.contains(&subnet) {
            // flannel's words; the Node's podCIDR is the controller manager's, from
            // --cluster-cidr, which must lie inside net-conf.json's Network.
            return Err(Error::Config(format!(
                "subnet \"{network}\" specified in the flannel net config doesn't contain \"{subnet}\" PodCIDR of the \"{}\" node; make net-conf.json's Network hold the cluster's pod CIDRs (the controller manager's --cluster-cidr)",
                self.name
            )));
        }
        let all = self
            .nodes
            .list(&Default::default())
            .await
            .map_err(|e| Error::Kube(format!("list Nodes: {e}")))?;
        if let Some(other) = all
            .items
            .iter()
            .find(|n| n.metadata.name.as_deref() != Some(&self.name) && pod_cidr(n) == Some(subnet))
        {
            return Err(Error::Kube(format!(
                "podCIDR {subnet} of Node {} is also Node {}'s; give each Node its own",
                self.name,
                other.metadata.name.clone().unwrap_or_default()
            )));
        }
        let have = node.metadata.annotations.clone().unwrap_or_default();
        let attrs = match LeaseAttrs::from_annotations(&have) {
            Some(Ok(published)) => attrs.keeping_vtep_mac_of(&published),
            _ => *attrs,
        };
        let want = attrs.to_annotations();
        if want.iter().any(|(k, v)| have.get(k) != Some(v)) {
            self.publish(&attrs).await?;
        }
        Ok(Lease { subnet, attrs })
    }

    /// Writes `attrs` into this Node's annotations.
    pub async fn publish(&mut self, attrs: &LeaseAttrs) -> Result<(), Error> {
        let patch = serde_json::json!({"metadata": {"annotations": attrs.to_annotations()}});
        self.nodes
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::Kube(format!("annotate Node {}: {e}", self.name)))?;
        Ok(())
    }

    /// Every other Node's lease, as the watch has seen them; starts the watch on first use
    /// and waits for its first listing.
    pub async fn others(&mut self, _me: Ipv4Addr) -> Result<Vec<Lease>, Error> {
        if self.store.is_none() {
            let (reader, writer) = reflector::store();
            let stream = reflector::reflector(
                writer,
                watcher(self.nodes.clone(), watcher::Config::default()),
            )
            .boxed();
            self.events = Some(stream);
            self.store = Some(reader);
            self.until_listed().await?;
        }
        let Some(store) = &self.store else {
            return Ok(Vec::new());
        };
        Ok(store
            .state()
            .iter()
            .filter(|n| n.metadata.name.as_deref() != Some(&self.name))
            .filter_map(|n| lease_of(n))
            .collect())
    }

    /// Reads watch events until the first full listing is in the store.
    async fn until_listed(&mut self) -> Result<(), Error> {
        let Some(events) = self.events.as_mut() else {
            return Ok(());
        };
        loop {
            match events.next().await {
                Some(Ok(watcher::Event::InitDone)) => return Ok(()),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(Error::Kube(format!("watch Nodes: {e}"))),
                None => return Err(Error::Kube("the Node watch ended".into())),
            }
        }
    }

    /// Waits for the next change to any Node.
    pub async fn changed(&mut self) -> Result<(), Error> {
        let Some(events) = self.events.as_mut() else {
            return std::future::pending().await;
        };
        match events.next().await {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(Error::Kube(format!("watch Nodes: {e}"))),
            None => Err(Error::Kube("the Node watch ended".into())),
        }
    }
}

/// The Node's IPv4 pod CIDR (`spec.podCIDRs`, else `spec.podCIDR`).
fn pod_cidr(n: &Node) -> Option<Ipv4Net> {
    let spec = n.spec.as_ref()?;
    spec.pod_cidrs
        .iter()
        .flatten()
        .chain(spec.pod_cidr.iter())
        .find_map(|c| c.parse::<Ipv4Net>().ok())
        .map(|c| c.trunc())
}

/// A Node's lease, if it has a podCIDR and published a backend.
fn lease_of(n: &Node) -> Option<Lease> {
    let subnet = pod_cidr(n)?;
    let empty = BTreeMap::new();
    let a = n.metadata.annotations.as_ref().unwrap_or(&empty);
    match LeaseAttrs::from_annotations(a)? {
        Ok(attrs) => Some(Lease { subnet, attrs }),
        Err(e) => {
            tracing::warn!(
                "skipping Node {}: {e}",
                n.metadata.name.clone().unwrap_or_default()
            );
            None
        }
    }
}
