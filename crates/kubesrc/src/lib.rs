//! The Kubernetes objects winnet's agents read, from one place: a kube API (list + watch with
//! `--kubeconfig`) or a folder of manifests (`--manifests DIR`, re-read on change). The source
//! yields the raw k8s-openapi objects; each consumer (kube-proxy, the cluster DNS) turns them into
//! its own model, so there is one reader of the API and of manifests, and no shared model.
//! Pods are read too, for `winnet doctor`, when asked ([`Kinds::pods`]).

pub mod kube;
pub mod manifests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
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
    /// Documents that could not be read, each with the reason; the rest is here.
    pub problems: Vec<String>,
    /// False until every watched kind has been listed once (a manifest folder is synced at once).
    pub synced: bool,
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
}

/// Starts the source; the receiver holds the newest objects, updated after every change.
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
