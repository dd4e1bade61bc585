//! Where the proxy's Services and EndpointSlices come from: the shared Kubernetes source
//! (`kubesrc`: a folder of manifests, or a kube API watch), turned into the proxy's whole
//! [`Snapshot`]s; the proxy diffs them per Service.

pub mod kube;
pub mod manifests;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kubesrc::Objects;
use tokio::sync::watch;

use crate::model::{Service, ServiceKey, Slice};

/// Everything the proxy knows of the cluster at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub services: BTreeMap<ServiceKey, Service>,
    /// By `namespace/slice-name`.
    pub slices: BTreeMap<String, Slice>,
    /// Node name -> its addresses (InternalIP first).
    pub nodes: BTreeMap<String, Vec<IpAddr>>,
    /// Objects that could not be used, each with the reason; the rest is programmed.
    pub problems: Vec<String>,
    /// Reads of the source failing now; the objects are its last good ones meanwhile.
    pub source_errors: Vec<String>,
    /// Whether the source has been read whole once. A proxy syncs nothing before: a first
    /// sync adopts what HNS holds and deletes what the objects lack.
    pub synced: bool,
}

impl Snapshot {
    /// The slices of each Service.
    pub fn slices_by_service(&self) -> BTreeMap<&ServiceKey, Vec<&Slice>> {
        let mut by: BTreeMap<&ServiceKey, Vec<&Slice>> = BTreeMap::new();
        for s in self.slices.values() {
            by.entry(&s.service).or_default().push(s);
        }
        by
    }

    /// Adds the proxy's view of `objects`; objects the proxy cannot use become problems.
    pub fn absorb(&mut self, objects: &Objects) {
        self.problems.extend(objects.problems.iter().cloned());
        self.source_errors.extend(objects.errors.iter().cloned());
        self.synced |= objects.synced;
        for s in objects.services.values() {
            match Service::from_k8s(&s.object) {
                Ok(svc) => {
                    self.services.insert(svc.key.clone(), svc);
                }
                Err(e) => self.problems.push(format!("{}: {e}; skipped", s.origin)),
            }
        }
        for (k, s) in &objects.slices {
            match Slice::from_k8s(&s.object) {
                Ok(slice) => {
                    self.slices.insert(k.clone(), slice);
                }
                Err(e) => self.problems.push(format!("{}: {e}; skipped", s.origin)),
            }
        }
        for n in objects.nodes.values() {
            if let Some(name) = &n.object.metadata.name {
                self.nodes.insert(name.clone(), node_addresses(&n.object));
            }
        }
    }

    /// The proxy's view of `objects`.
    pub fn from_objects(objects: &Objects) -> Snapshot {
        let mut snap = Snapshot::default();
        snap.absorb(objects);
        snap
    }
}

/// A Node's addresses, InternalIP first.
pub fn node_addresses(n: &Node) -> Vec<IpAddr> {
    let mut addrs: Vec<(bool, IpAddr)> = n
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|a| {
            a.address
                .parse()
                .ok()
                .map(|ip| (a.type_ != "InternalIP", ip))
        })
        .collect();
    addrs.sort_by_key(|(external, _)| *external);
    addrs.into_iter().map(|(_, ip)| ip).collect()
}

/// Waits for the source's first whole read and returns it; `None` when the source stopped.
/// Until then the proxy programs nothing (an unreadable source is not "no Services"); it says
/// once why it waits, and hands each snapshot to `seen` (for the metrics).
pub async fn first_synced(
    snapshots: &mut watch::Receiver<Snapshot>,
    seen: impl Fn(&Snapshot),
) -> Option<Snapshot> {
    let mut said = false;
    loop {
        let snapshot = snapshots.borrow_and_update().clone();
        seen(&snapshot);
        if snapshot.synced {
            return Some(snapshot);
        }
        if !said && !snapshot.source_errors.is_empty() {
            tracing::warn!(
                errors = ?snapshot.source_errors,
                "the Kubernetes objects cannot be read yet; nothing is programmed or removed until they are"
            );
            said = true;
        }
        snapshots.changed().await.ok()?;
    }
}

/// Follows the shared source's objects as proxy snapshots, until either side goes.
fn follow(mut objects: watch::Receiver<Arc<Objects>>) -> watch::Receiver<Snapshot> {
    let first = Snapshot::from_objects(&objects.borrow_and_update());
    let (tx, rx) = watch::channel(first);
    tokio::spawn(async move {
        while objects.changed().await.is_ok() {
            let snap = Snapshot::from_objects(&objects.borrow_and_update());
            if tx.send(snap).is_err() {
                return;
            }
        }
    });
    rx
}
