//! Services, EndpointSlices and Nodes from a kube API server, through kube-rs watchers.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service as K8sService};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Config};
use tokio::sync::{mpsc, watch};

use super::Snapshot;
use super::manifests::node_addresses;
use crate::model::{Service, Slice};

/// How long to let a burst of events settle before publishing a snapshot.
const SETTLE: Duration = Duration::from_millis(100);

enum Update {
    Service(Box<Event<K8sService>>),
    Slice(Box<Event<EndpointSlice>>),
    Node(Box<Event<Node>>),
}

/// Connects with the kubeconfig at `path` and watches; snapshots flow on the returned channel.
pub async fn watch(path: &Path) -> Result<watch::Receiver<Snapshot>, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
    let client = Client::try_from(config).map_err(|e| format!("kube client: {e}"))?;
    let (tx, mut rx) = mpsc::channel::<Update>(1024);
    spawn_watch(Api::<K8sService>::all(client.clone()), tx.clone(), |e| {
        Update::Service(Box::new(e))
    });
    spawn_watch(Api::<EndpointSlice>::all(client.clone()), tx.clone(), |e| {
        Update::Slice(Box::new(e))
    });
    spawn_watch(Api::<Node>::all(client), tx, |e| Update::Node(Box::new(e)));
    let (out, snapshots) = watch::channel(Snapshot::default());
    tokio::spawn(async move {
        let mut state = Objects::default();
        while let Some(first) = rx.recv().await {
            state.apply(first);
            let deadline = tokio::time::sleep(SETTLE);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    _ = &mut deadline => break,
                    more = rx.recv() => match more {
                        Some(u) => state.apply(u),
                        None => break,
                    },
                }
            }
            // A relist in progress, or a kind not yet listed once, would look like objects deleted.
            if !state.complete() {
                continue;
            }
            if out.send(state.snapshot()).is_err() {
                return;
            }
        }
    });
    Ok(snapshots)
}

fn spawn_watch<K>(api: Api<K>, tx: mpsc::Sender<Update>, wrap: fn(Event<K>) -> Update)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(e) => {
                    if tx.send(wrap(e)).await.is_err() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
            }
        }
    });
}

/// The raw objects by `namespace/name`, as the watchers last reported them.
#[derive(Default)]
struct Objects {
    services: BTreeMap<String, K8sService>,
    slices: BTreeMap<String, EndpointSlice>,
    nodes: BTreeMap<String, Node>,
    /// Per kind (services, slices, nodes): listed completely at least once, and not relisting.
    listed: [bool; 3],
}

fn key<K: kube::Resource>(o: &K) -> String {
    let m = o.meta();
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or(""),
        m.name.as_deref().unwrap_or("")
    )
}

fn apply_event<K: kube::Resource + Clone>(
    map: &mut BTreeMap<String, K>,
    listed: &mut bool,
    ev: Event<K>,
) {
    match ev {
        Event::Apply(o) | Event::InitApply(o) => {
            map.insert(key(&o), o);
        }
        Event::Delete(o) => {
            map.remove(&key(&o));
        }
        Event::Init => {
            map.clear();
            *listed = false;
        }
        Event::InitDone => *listed = true,
    }
}

impl Objects {
    fn apply(&mut self, u: Update) {
        match u {
            Update::Service(e) => apply_event(&mut self.services, &mut self.listed[0], *e),
            Update::Slice(e) => apply_event(&mut self.slices, &mut self.listed[1], *e),
            Update::Node(e) => apply_event(&mut self.nodes, &mut self.listed[2], *e),
        }
    }

    fn complete(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }

    fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::default();
        for (k, s) in &self.services {
            match Service::from_k8s(s) {
                Ok(s) => {
                    snap.services.insert(s.key.clone(), s);
                }
                Err(e) => snap.problems.push(format!("Service {k}: {e}; skipped")),
            }
        }
        for (k, s) in &self.slices {
            match Slice::from_k8s(s) {
                Ok(s) => {
                    snap.slices.insert(k.clone(), s);
                }
                Err(e) => snap
                    .problems
                    .push(format!("EndpointSlice {k}: {e}; skipped")),
            }
        }
        for n in self.nodes.values() {
            if let Some(name) = &n.metadata.name {
                snap.nodes.insert(name.clone(), node_addresses(n));
            }
        }
        snap
    }
}
