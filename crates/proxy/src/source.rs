//! Where Services and EndpointSlices come from: a folder of manifests (reloaded on change), or a
//! kube API (watch). Both produce whole [`Snapshot`]s; the proxy diffs them per Service.

pub mod kube;
pub mod manifests;

use std::collections::BTreeMap;
use std::net::IpAddr;

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
}
