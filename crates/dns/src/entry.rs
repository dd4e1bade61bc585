//! One Service's DNS data, made from its Service object and EndpointSlices: its shape, ports
//! and ready endpoints, and what of its objects cannot be served.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kubesrc::Sourced;

use crate::answer::Outcome;
use crate::names;

/// A Service port (or an EndpointSlice port) as DNS names it: `_<name>._<protocol>`.
#[derive(Clone, Debug, PartialEq)]
pub struct PortName {
    /// Lower-case port name; empty when unnamed.
    pub name: String,
    /// Lower-case protocol (`tcp`, `udp`, `sctp`).
    pub protocol: String,
    /// The port number; -1 when the object lists no ports (CoreDNS's sentinel: A records, no SRV).
    pub port: i32,
}

impl PortName {
    /// A port as an object lists it (protocol defaults to TCP, as in Kubernetes).
    fn new(name: Option<&str>, protocol: Option<&str>, port: i32) -> PortName {
        PortName {
            name: name.unwrap_or("").to_ascii_lowercase(),
            protocol: protocol.unwrap_or("TCP").to_ascii_lowercase(),
            port,
        }
    }
}

/// A ready endpoint address of a Service.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    /// The label it is known by under its Service: `hostname`, else the dashed IP.
    pub label: String,
    pub ip: IpAddr,
    /// `<label>.<svc>.<ns>.svc.<zone>`.
    pub fqdn: Name,
    /// The ports of the slice the address is in.
    pub ports: Arc<[PortName]>,
}

/// What a Service name resolves to.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// A/AAAA = the cluster IPs.
    ClusterIp(Vec<IpAddr>),
    /// A/AAAA = the ready endpoints.
    Headless,
    /// A CNAME to this name; `None` when `externalName` is an IP (CoreDNS answers nothing then).
    ExternalName(Option<Name>),
}

/// One Service's DNS data.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceEntry {
    pub shape: Shape,
    pub ports: Vec<PortName>,
    pub endpoints: Vec<Endpoint>,
    /// `<svc>.<ns>.svc.<zone>`.
    pub fqdn: Name,
    /// The objects it was built from: an entry whose objects did not change is reused by the
    /// next view instead of being built again.
    pub(crate) sources: Sources,
    /// What was skipped in its slices.
    pub(crate) problems: Vec<String>,
    /// The answers to its own name for A, AAAA and SRV, made at the first question for each
    /// ([`crate::answer`]); they go with the entry, so a changed Service starts afresh.
    pub(crate) answers: [OnceLock<Outcome>; 3],
}

/// A Service object and its EndpointSlices, compared by identity (the source hands out the same
/// `Arc` for an object that did not change).
#[derive(Clone, Debug)]
pub(crate) struct Sources {
    pub(crate) service: Arc<Sourced<Service>>,
    pub(crate) slices: Vec<Arc<Sourced<EndpointSlice>>>,
}

impl PartialEq for Sources {
    fn eq(&self, other: &Sources) -> bool {
        Arc::ptr_eq(&self.service, &other.service)
            && self.slices.len() == other.slices.len()
            && self
                .slices
                .iter()
                .zip(&other.slices)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// Adds a slice's ready addresses to `entry`; what cannot be served goes to `problems`.
fn add_slice(entry: &mut ServiceEntry, slice: &Sourced<EndpointSlice>) {
    if !matches!(slice.object.address_type.as_str(), "IPv4" | "IPv6") {
        return; // FQDN slices carry no addresses DNS serves
    }
    let ports = slice_ports(&slice.object);
    let mut skipped = Vec::new();
    for (i, ep) in slice.object.endpoints.iter().enumerate() {
        // Only `ready` counts (nil = ready); serving and terminating are ignored, as CoreDNS.
        if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
            continue;
        }
        for (j, addr) in ep.addresses.iter().enumerate() {
            let Ok(ip) = addr.parse::<IpAddr>() else {
                skipped.push(format!(
                    "endpoints[{i}].addresses[{j}]: {addr:?} is not an IP"
                ));
                continue;
            };
            let label = match &ep.hostname {
                Some(h) => h.to_ascii_lowercase(),
                None => names::dashed_ip(ip),
            };
            match names::child(&label, &entry.fqdn) {
                Ok(fqdn) => entry.endpoints.push(Endpoint {
                    label,
                    ip,
                    fqdn,
                    ports: Arc::clone(&ports),
                }),
                Err(e) => skipped.push(format!("endpoints[{i}].hostname: {e}")),
            }
        }
    }
    if !skipped.is_empty() {
        entry.problems.push(format!(
            "{}: {} skipped (the other endpoints are served)",
            slice.origin,
            skipped.join("; ")
        ));
    }
}

fn slice_ports(slice: &EndpointSlice) -> Arc<[PortName]> {
    let ports: Vec<PortName> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| {
            PortName::new(
                p.name.as_deref(),
                p.protocol.as_deref(),
                p.port.unwrap_or(-1),
            )
        })
        .collect();
    if ports.is_empty() {
        return Arc::from(vec![no_ports()]);
    }
    Arc::from(ports)
}

fn no_ports() -> PortName {
    PortName {
        name: String::new(),
        protocol: String::new(),
        port: -1,
    }
}

/// A Service's entry with its slices' endpoints; an error names the field that cannot be served.
pub(crate) fn service_entry(sources: Sources, zone: &Name) -> Result<ServiceEntry, String> {
    let svc = &sources.service.object;
    let name = svc
        .metadata
        .name
        .as_deref()
        .ok_or("metadata.name is missing")?;
    let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
    names::label(name).map_err(|e| format!("metadata.name: {e}"))?;
    names::label(ns).map_err(|e| format!("metadata.namespace: {e}"))?;
    let (name, ns) = (name.to_ascii_lowercase(), ns.to_ascii_lowercase());
    let fqdn = names::service_fqdn(&name, &ns, zone)?;
    let spec = svc.spec.as_ref().ok_or("spec is missing")?;
    let shape = if spec.type_.as_deref() == Some("ExternalName") {
        let target = spec
            .external_name
            .as_deref()
            .ok_or("spec.externalName is missing for type ExternalName")?;
        if target.parse::<IpAddr>().is_ok() {
            Shape::ExternalName(None)
        } else {
            let target = names::absolute(target).map_err(|e| format!("spec.externalName: {e}"))?;
            Shape::ExternalName(Some(target))
        }
    } else {
        cluster_ips(spec)?
    };
    let mut ports: Vec<PortName> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| PortName::new(p.name.as_deref(), p.protocol.as_deref(), p.port))
        .collect();
    if ports.is_empty() {
        ports.push(no_ports());
    }
    let mut entry = ServiceEntry {
        shape,
        ports,
        endpoints: Vec::new(),
        fqdn,
        sources: sources.clone(),
        problems: Vec::new(),
        answers: Default::default(),
    };
    for slice in &sources.slices {
        add_slice(&mut entry, slice);
    }
    Ok(entry)
}

fn cluster_ips(spec: &k8s_openapi::api::core::v1::ServiceSpec) -> Result<Shape, String> {
    let listed = spec.cluster_ips.clone().unwrap_or_default();
    let all: Vec<String> = if listed.is_empty() {
        spec.cluster_ip.iter().cloned().collect()
    } else {
        listed
    };
    if all.iter().any(|s| s == "None") {
        return Ok(Shape::Headless);
    }
    let mut ips = Vec::new();
    for (i, s) in all.iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        let ip = s
            .parse()
            .map_err(|_| format!("spec.clusterIPs[{i}]: {s:?} is not an IP address"))?;
        ips.push(ip);
    }
    Ok(Shape::ClusterIp(ips))
}
