//! Services, EndpointSlices, Nodes (and Namespaces and Pods when asked) from a kube API server, through
//! kube-rs watchers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Config};
use tokio::sync::{mpsc, watch as channel};

use crate::{ByKey, Kinds, Objects, Sourced, key};

enum Update {
    Service(Box<Event<Service>>),
    Slice(Box<Event<EndpointSlice>>),
    Node(Box<Event<Node>>),
    Namespace(Box<Event<Namespace>>),
    Pod(Box<Event<Pod>>),
}

/// Connects with the kubeconfig at `path` and watches; objects flow on the returned channel,
/// once per burst of events (a burst ends after `settle` without events).
pub async fn watch(
    path: &Path,
    kinds: Kinds,
    settle: Duration,
) -> Result<channel::Receiver<Arc<Objects>>, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
    let client = Client::try_from(config).map_err(|e| format!("kube client: {e}"))?;
    let (tx, mut rx) = mpsc::channel::<Update>(1024);
    spawn_watch(Api::<Service>::all(client.clone()), tx.clone(), |e| {
        Update::Service(Box::new(e))
    });
    spawn_watch(Api::<EndpointSlice>::all(client.clone()), tx.clone(), |e| {
        Update::Slice(Box::new(e))
    });
    spawn_watch(Api::<Node>::all(client.clone()), tx.clone(), |e| {
        Update::Node(Box::new(e))
    });
    if kinds.namespaces {
        spawn_watch(Api::<Namespace>::all(client.clone()), tx.clone(), |e| {
            Update::Namespace(Box::new(e))
        });
    }
    if kinds.pods {
        spawn_watch(Api::<Pod>::all(client), tx, |e| Update::Pod(Box::new(e)));
    }
    let (out, objects) = channel::channel(Arc::new(Objects::default()));
    tokio::spawn(async move {
        let mut state = State::new(kinds);
        while let Some(first) = rx.recv().await {
            state.apply(first);
            let deadline = tokio::time::sleep(settle);
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
            if out.send(Arc::new(state.objects.clone())).is_err() {
                return;
            }
        }
    });
    Ok(objects)
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

/// The objects as the watchers last reported them, and which kinds have been listed.
struct State {
    objects: Objects,
    /// Per kind (services, slices, nodes, namespaces, pods): listed completely at least once,
    /// and not relisting. A kind not watched counts as listed.
    listed: [bool; 5],
}

fn apply_event<K: kube::Resource + Clone>(
    kind: &str,
    map: &mut ByKey<K>,
    listed: &mut bool,
    ev: Event<K>,
) {
    match ev {
        Event::Apply(o) | Event::InitApply(o) => {
            let k = key(&o);
            let origin = format!("{kind} {}", k.trim_start_matches('/'));
            map.insert(k, Arc::new(Sourced { origin, object: o }));
        }
        Event::Delete(o) => {
            map.remove(&key(&o));
        }
        Event::Init => {
            *map = BTreeMap::new();
            *listed = false;
        }
        Event::InitDone => *listed = true,
    }
}

impl State {
    fn new(kinds: Kinds) -> State {
        State {
            objects: Objects {
                synced: true,
                ..Objects::default()
            },
            listed: [false, false, false, !kinds.namespaces, !kinds.pods],
        }
    }

    fn apply(&mut self, u: Update) {
        let o = &mut self.objects;
        match u {
            Update::Service(e) => apply_event("Service", &mut o.services, &mut self.listed[0], *e),
            Update::Slice(e) => {
                apply_event("EndpointSlice", &mut o.slices, &mut self.listed[1], *e)
            }
            Update::Node(e) => apply_event("Node", &mut o.nodes, &mut self.listed[2], *e),
            Update::Namespace(e) => {
                apply_event("Namespace", &mut o.namespaces, &mut self.listed[3], *e)
            }
            Update::Pod(e) => apply_event("Pod", &mut o.pods, &mut self.listed[4], *e),
        }
    }

    fn complete(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }
}
