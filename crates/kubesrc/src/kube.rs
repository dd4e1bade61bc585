//! Services, EndpointSlices, Nodes (and Namespaces, Pods and NetworkPolicies when asked) from a kube API server, through
//! kube-rs watchers (retried with backoff). Objects are published only when every watched kind
//! is listed: a relist in progress, or one that failed, keeps the objects of the last complete
//! list, with the failure in [`Objects::errors`] until the kind is listed again.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::WatchStreamExt;
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
    NetworkPolicy(Box<Event<NetworkPolicy>>),
    /// A kind's watch or list failed (it is retried).
    Failed(Kind, String),
}

/// The watched kinds, as indexes of [`State::listed`] and [`State::errors`].
#[derive(Clone, Copy, Debug)]
enum Kind {
    Service,
    Slice,
    Node,
    Namespace,
    Pod,
    NetworkPolicy,
}

impl Kind {
    /// The kind's name, as objects of it are named in messages.
    fn object(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::Slice => "EndpointSlice",
            Kind::Node => "Node",
            Kind::Namespace => "Namespace",
            Kind::Pod => "Pod",
            Kind::NetworkPolicy => "NetworkPolicy",
        }
    }
}

/// How many kinds can be watched (the length of [`Kind`]).
const KINDS: usize = 6;

/// How long a watch failure is reported after the last one (retries back off to 30 s).
const ERROR_TTL: Duration = Duration::from_secs(60);

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
    spawn_watch(
        Api::<Service>::all(client.clone()),
        Kind::Service,
        tx.clone(),
        |e| Update::Service(Box::new(e)),
    );
    spawn_watch(
        Api::<EndpointSlice>::all(client.clone()),
        Kind::Slice,
        tx.clone(),
        |e| Update::Slice(Box::new(e)),
    );
    spawn_watch(
        Api::<Node>::all(client.clone()),
        Kind::Node,
        tx.clone(),
        |e| Update::Node(Box::new(e)),
    );
    if kinds.namespaces {
        spawn_watch(
            Api::<Namespace>::all(client.clone()),
            Kind::Namespace,
            tx.clone(),
            |e| Update::Namespace(Box::new(e)),
        );
    }
    if kinds.pods {
        spawn_watch(
            Api::<Pod>::all(client.clone()),
            Kind::Pod,
            tx.clone(),
            |e| Update::Pod(Box::new(e)),
        );
    }
    if kinds.network_policies {
        spawn_watch(
            Api::<NetworkPolicy>::all(client),
            Kind::NetworkPolicy,
            tx,
            |e| Update::NetworkPolicy(Box::new(e)),
        );
    }
    let (out, objects) = channel::channel(Arc::new(Objects::default()));
    tokio::spawn(async move {
        let mut state = State::new(kinds);
        loop {
            // A watch that recovered without news (a re-watch brings no event) says nothing:
            // its error is dropped once no failure has come for ERROR_TTL.
            let first = if state.failing() {
                match tokio::time::timeout(ERROR_TTL, rx.recv()).await {
                    Ok(first) => first,
                    Err(_) => {
                        state.errors = Default::default();
                        if let Some(objects) = state.publish()
                            && !crate::publish(&out, objects)
                        {
                            return;
                        }
                        continue;
                    }
                }
            } else {
                rx.recv().await
            };
            let Some(first) = first else {
                return;
            };
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
            let Some(objects) = state.publish() else {
                continue;
            };
            if !crate::publish(&out, objects) {
                return;
            }
        }
    });
    Ok(objects)
}

fn spawn_watch<K>(api: Api<K>, kind: Kind, tx: mpsc::Sender<Update>, wrap: fn(Event<K>) -> Update)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        // Backoff: an API server that refuses or is down is not asked in a tight loop.
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = stream.next().await {
            let update = match ev {
                Ok(e) => wrap(e),
                Err(e) => Update::Failed(kind, format!("watching {}s: {e}", kind.object())),
            };
            if tx.send(update).await.is_err() {
                return;
            }
        }
    });
}

/// The objects as the watchers last reported them, which kinds have been listed, and what is
/// failing.
struct State {
    /// Mid-relist, a kind's map holds only what the relist has brought so far.
    objects: Objects,
    /// Per [`Kind`]: listed completely at least once, and not relisting. A kind not watched
    /// counts as listed.
    listed: [bool; KINDS],
    /// Per [`Kind`]: its watch's last failure, until the kind is heard from again.
    errors: [Option<String>; KINDS],
    /// The objects of the last complete list, and the errors as last published.
    published: Option<Arc<Objects>>,
    published_errors: Vec<String>,
}

/// Applies one event of `kind` to its map; returns `kind`.
fn apply_event<K: kube::Resource + Clone>(
    kind: Kind,
    map: &mut ByKey<K>,
    listed: &mut [bool; KINDS],
    ev: Event<K>,
) -> Kind {
    match ev {
        Event::Apply(o) | Event::InitApply(o) => {
            let k = key(&o);
            let origin = format!("{} {}", kind.object(), k.trim_start_matches('/'));
            map.insert(k, Arc::new(Sourced { origin, object: o }));
        }
        Event::Delete(o) => {
            map.remove(&key(&o));
        }
        Event::Init => {
            *map = BTreeMap::new();
            listed[kind as usize] = false;
        }
        Event::InitDone => listed[kind as usize] = true,
    }
    kind
}

impl State {
    fn new(kinds: Kinds) -> State {
        State {
            objects: Objects {
                synced: true,
                ..Objects::default()
            },
            listed: [
                false,
                false,
                false,
                !kinds.namespaces,
                !kinds.pods,
                !kinds.network_policies,
            ],
            errors: Default::default(),
            published: None,
            published_errors: Vec::new(),
        }
    }

    fn apply(&mut self, u: Update) {
        let (o, l) = (&mut self.objects, &mut self.listed);
        let kind = match u {
            Update::Service(e) => apply_event(Kind::Service, &mut o.services, l, *e),
            Update::Slice(e) => apply_event(Kind::Slice, &mut o.slices, l, *e),
            Update::Node(e) => apply_event(Kind::Node, &mut o.nodes, l, *e),
            Update::Namespace(e) => apply_event(Kind::Namespace, &mut o.namespaces, l, *e),
            Update::Pod(e) => apply_event(Kind::Pod, &mut o.pods, l, *e),
            Update::NetworkPolicy(e) => {
                apply_event(Kind::NetworkPolicy, &mut o.network_policies, l, *e)
            }
            Update::Failed(kind, error) => {
                self.errors[kind as usize] = Some(error);
                return;
            }
        };
        // Heard from: its failure is over.
        self.errors[kind as usize] = None;
    }

    /// Whether a watch failure is being reported.
    fn failing(&self) -> bool {
        self.errors.iter().any(Option::is_some)
    }

    fn complete(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }

    /// What to send after a burst: every kind's current list when all are complete; else,
    /// when the errors changed, the last complete objects (or, before any, none: not synced)
    /// with them. A relist in progress, or a kind not yet listed once, would look like objects
    /// deleted, so its partial state is never sent.
    fn publish(&mut self) -> Option<Arc<Objects>> {
        let errors: Vec<String> = self.errors.iter().flatten().cloned().collect();
        let objects = if self.complete() {
            let objects = Arc::new(Objects {
                errors: errors.clone(),
                ..self.objects.clone()
            });
            self.published = Some(Arc::clone(&objects));
            objects
        } else if errors != self.published_errors {
            let kept = self.published.as_deref().cloned().unwrap_or_default();
            Arc::new(Objects {
                errors: errors.clone(),
                ..kept
            })
        } else {
            return None;
        };
        self.published_errors = errors;
        Some(objects)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str) -> Service {
        let mut s = Service::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("default".into());
        s
    }

    fn list<K>(wrap: fn(Box<Event<K>>) -> Update, items: Vec<K>) -> Vec<Update> {
        let mut events = vec![wrap(Box::new(Event::Init))];
        events.extend(
            items
                .into_iter()
                .map(|i| wrap(Box::new(Event::InitApply(i)))),
        );
        events.push(wrap(Box::new(Event::InitDone)));
        events
    }

    fn names(o: &Objects) -> Vec<&str> {
        o.services.keys().map(String::as_str).collect()
    }

    #[test]
    fn a_relist_that_fails_keeps_the_last_complete_objects_and_says_so() {
        let mut state = State::new(Kinds::default());
        // Before the first complete list: nothing, and a failure is published unsynced.
        state.apply(Update::Failed(Kind::Node, "watching Nodes: 403".into()));
        let early = state.publish().expect("the error is news");
        assert!(!early.synced && early.errors == ["watching Nodes: 403"]);
        for u in list(Update::Service, vec![service("web"), service("db")])
            .into_iter()
            .chain(list(Update::Slice, vec![]))
            .chain(list(Update::Node, vec![]))
        {
            state.apply(u);
        }
        let good = state.publish().expect("complete");
        assert!(good.synced && good.errors.is_empty());
        assert_eq!(names(&good), ["default/db", "default/web"]);
        // The Services watch expires (410): a relist starts, brings one object, then fails.
        state.apply(Update::Service(Box::new(Event::Init)));
        state.apply(Update::Service(Box::new(Event::InitApply(service("db")))));
        state.apply(Update::Failed(
            Kind::Service,
            "watching Services: 500".into(),
        ));
        let kept = state.publish().expect("the error is news");
        assert!(kept.synced);
        assert_eq!(names(&kept), ["default/db", "default/web"], "nothing lost");
        assert_eq!(kept.errors, ["watching Services: 500"]);
        assert!(state.publish().is_none(), "nothing new");
        // The relist succeeds: its objects, and the error is gone.
        for u in list(Update::Service, vec![service("db")]) {
            state.apply(u);
        }
        let relisted = state.publish().expect("complete");
        assert_eq!(names(&relisted), ["default/db"]);
        assert!(relisted.errors.is_empty());
    }
}
