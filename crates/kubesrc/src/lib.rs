//! The Kubernetes objects winnet's agents read, from one place: a kube API (list + watch with
//! `--kubeconfig`) or a folder of manifests (`--manifests DIR`, re-read on change). The source
//! yields the raw k8s-openapi objects; each consumer (kube-proxy, the cluster DNS) turns them into
//! its own model, so there is one reader of the API and of manifests, and no shared model.
//! Pods are read too, for `winnet doctor` and the NetworkPolicy agent, when asked ([`Kinds::pods`]),
//! and NetworkPolicies for that agent ([`Kinds::network_policies`]).

pub mod kube;
pub mod manifests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use tokio::sync::watch;

/// One object and where it came from (`file document N (Kind name)` or `Kind namespace/name`),
/// so a consumer that rejects it can say where the bad object is.
#[derive(Clone, Debug, PartialEq)]
pub struct Sourced<K> {
    pub origin: String,
    pub object: K,
}

/// Objects by `namespace/name` (`/name` for cluster-scoped kinds).
pub type ByKey<K> = BTreeMap<String, Arc<Sourced<K>>>;

/// Everything the source knows of the cluster at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Objects {
    pub services: ByKey<Service>,
    pub slices: ByKey<EndpointSlice>,
    pub nodes: ByKey<Node>,
    /// Only filled when [`Kinds::namespaces`] asked for them (manifests always carry theirs).
    pub namespaces: ByKey<Namespace>,
    /// Only filled when [`Kinds::pods`] asked for them (manifests always carry theirs).
    pub pods: ByKey<Pod>,
    /// Only filled when [`Kinds::network_policies`] asked for them (manifests always carry theirs).
    pub network_policies: ByKey<NetworkPolicy>,
    /// Documents skipped (unknown kinds, or bad documents of a text read on its own), each
    /// with the reason; the rest is here.
    pub problems: Vec<String>,
    /// Reads that are failing now (the folder, a file, a watch), each with the reason. The
    /// objects they would have changed are kept as last read well: a source never turns a read
    /// error into "no objects".
    pub errors: Vec<String>,
    /// True once everything has been read well once: every watched kind listed, or the folder
    /// listed and each of its files read whole. Until then the objects are incomplete and must
    /// not be acted on (a proxy must not delete what they lack). It stays true through later
    /// errors, which keep the last good objects and are in [`Objects::errors`].
    pub synced: bool,
}

impl Objects {
    /// Whether it holds no object of any kind.
    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
            && self.slices.is_empty()
            && self.nodes.is_empty()
            && self.namespaces.is_empty()
            && self.pods.is_empty()
            && self.network_policies.is_empty()
    }
}

/// Where the objects come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A folder of manifests, checked for changes every `poll`.
    Manifests { dir: PathBuf, poll: Duration },
    /// A kube API server reached with the kubeconfig at `path`; a burst of events is published
    /// once it has been quiet for `settle`.
    Kubeconfig { path: PathBuf, settle: Duration },
}

/// Which optional kinds to watch (Services, EndpointSlices and Nodes always are).
#[derive(Clone, Copy, Debug, Default)]
pub struct Kinds {
    /// Namespaces: the DNS needs them, kube-proxy does not (and its RBAC may not allow them).
    pub namespaces: bool,
    /// Pods: `winnet doctor` compares them with HNS endpoints; kube-proxy does not need them.
    pub pods: bool,
    /// NetworkPolicies: the NetworkPolicy agent (`winnet policy`) enforces them.
    pub network_policies: bool,
}

/// Starts the source; the receiver holds the newest objects, updated after every change (of
/// the objects or of the errors).
pub async fn watch(source: &Source, kinds: Kinds) -> Result<watch::Receiver<Arc<Objects>>, String> {
    match source {
        Source::Manifests { dir, poll } => Ok(manifests::watch(dir.clone(), *poll)),
        Source::Kubeconfig { path, settle } => kube::watch(path, kinds, *settle).await,
    }
}

/// `namespace/name` of an object (`/name` when it has no namespace).
pub fn key<K: ::kube::Resource>(o: &K) -> String {
    let m = o.meta();
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or(""),
        m.name.as_deref().unwrap_or("")
    )
}

/// Sends `objects` to the consumers, logging the read errors that are new and, when the last
/// one went, that reading works again: what a source says when it keeps its last good objects.
/// False when no one listens any more.
pub(crate) fn publish(out: &watch::Sender<Arc<Objects>>, objects: Arc<Objects>) -> bool {
    report_errors(&out.borrow().errors, &objects.errors);
    out.send(objects).is_ok()
}

pub(crate) fn report_errors(before: &[String], after: &[String]) {
    for e in after.iter().filter(|e| !before.contains(e)) {
        tracing::warn!("{e}; the last good objects are kept");
    }
    if after.is_empty() && !before.is_empty() {
        tracing::info!("the Kubernetes objects are read well again");
    }
}
