//! The cluster as the DNS sees it: Services with their addresses, ports and ready endpoints,
//! the namespaces that exist, and the reverse map — built once per change of the Kubernetes
//! objects, then only read (queries never take a lock on it).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kubesrc::Objects;

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
}

/// The immutable view queries are answered from.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Lower-case namespace -> lower-case Service name -> entry. A namespace is present when a
    /// Namespace object names it or (manifests without Namespaces) any Service or slice is in it.
    pub namespaces: HashMap<String, HashMap<String, ServiceEntry>>,
    /// PTR targets: ClusterIP -> its Service's name (first wins, as CoreDNS), else endpoints.
    pub reverse: HashMap<IpAddr, Vec<Name>>,
    /// Whether the source has listed everything once; before, in-zone answers are SERVFAIL.
    pub synced: bool,
    /// Objects skipped, each with why.
    pub problems: Vec<String>,
    /// The zone's SOA serial: when this view was built (Unix seconds), as CoreDNS uses the
    /// time of the last change.
    pub serial: u32,
}

impl Cluster {
    /// Builds the view of `objects` for `zone` (which must be a valid name).
    pub fn build(objects: &Objects, zone: &Name) -> Cluster {
        let mut cluster = Cluster {
            synced: objects.synced,
            problems: objects.problems.clone(),
            serial: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as u32),
            ..Cluster::default()
        };
        for ns in objects.namespaces.values() {
            if let Some(name) = &ns.object.metadata.name {
                cluster
                    .namespaces
                    .entry(name.to_ascii_lowercase())
                    .or_default();
            }
        }
        for s in objects.services.values() {
            match service_entry(&s.object, zone) {
                Ok((ns, name, entry)) => {
                    cluster
                        .namespaces
                        .entry(ns)
                        .or_default()
                        .insert(name, entry);
                }
                Err(e) => cluster.problems.push(format!("{}: {e}; skipped", s.origin)),
            }
        }
        for s in objects.slices.values() {
            if let Err(e) = cluster.add_slice(&s.object) {
                cluster.problems.push(format!("{}: {e}; skipped", s.origin));
            }
        }
        cluster.index_reverse();
        cluster
    }

    fn add_slice(&mut self, slice: &EndpointSlice) -> Result<(), String> {
        let ns = slice
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
            .to_ascii_lowercase();
        let svc = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
            .ok_or("metadata.labels[\"kubernetes.io/service-name\"] is missing")?
            .to_ascii_lowercase();
        let services = self.namespaces.entry(ns).or_default();
        // Slices of an absent Service are kept by nobody (CoreDNS indexes them by Service).
        let Some(entry) = services.get_mut(&svc) else {
            return Ok(());
        };
        if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
            return Ok(()); // FQDN slices carry no addresses DNS serves
        }
        let ports = slice_ports(slice);
        let mut skipped = Vec::new();
        for (i, ep) in slice.endpoints.iter().enumerate() {
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
        if skipped.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{} (the other endpoints are served)",
                skipped.join("; ")
            ))
        }
    }

    fn index_reverse(&mut self) {
        let mut reverse: HashMap<IpAddr, Vec<Name>> = HashMap::new();
        let mut by_cluster_ip: HashSet<IpAddr> = HashSet::new();
        for services in self.namespaces.values() {
            for entry in services.values() {
                if let Shape::ClusterIp(ips) = &entry.shape {
                    for ip in ips {
                        if by_cluster_ip.insert(*ip) {
                            reverse.insert(*ip, vec![entry.fqdn.clone()]);
                        }
                    }
                }
            }
        }
        for services in self.namespaces.values() {
            for entry in services.values() {
                for ep in &entry.endpoints {
                    if !by_cluster_ip.contains(&ep.ip) {
                        reverse.entry(ep.ip).or_default().push(ep.fqdn.clone());
                    }
                }
            }
        }
        self.reverse = reverse;
    }

    /// The Service `name` in `ns` (both lower-case).
    pub fn service(&self, ns: &str, name: &str) -> Option<&ServiceEntry> {
        self.namespaces.get(ns)?.get(name)
    }
}

fn slice_ports(slice: &EndpointSlice) -> Arc<[PortName]> {
    let ports: Vec<PortName> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| PortName {
            name: p.name.as_deref().unwrap_or("").to_ascii_lowercase(),
            protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
            port: p.port.unwrap_or(-1),
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

/// A Service's namespace, name and entry; an error names the field that cannot be served.
fn service_entry(svc: &Service, zone: &Name) -> Result<(String, String, ServiceEntry), String> {
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
        .map(|p| PortName {
            name: p.name.as_deref().unwrap_or("").to_ascii_lowercase(),
            protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
            port: p.port,
        })
        .collect();
    if ports.is_empty() {
        ports.push(no_ports());
    }
    let entry = ServiceEntry {
        shape,
        ports,
        endpoints: Vec::new(),
        fqdn,
    };
    Ok((ns, name, entry))
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
