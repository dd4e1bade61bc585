//! The cluster as the DNS sees it: Services with their addresses, ports and ready endpoints,
//! the namespaces that exist, and the reverse map — built once per change of the Kubernetes
//! objects, then only read (queries never take a lock on it).

use std::borrow::Cow;
use std::sync::OnceLock;

use hashbrown::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kubesrc::{Objects, Sourced};

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
    sources: Sources,
    /// What was skipped in its slices.
    problems: Vec<String>,
    /// The answers to its own name for A, AAAA and SRV, made at the first question for each
    /// ([`crate::answer`]); they go with the entry, so a changed Service starts afresh.
    pub(crate) answers: [OnceLock<Outcome>; 3],
}

/// A Service object and its EndpointSlices, compared by identity (the source hands out the same
/// `Arc` for an object that did not change).
#[derive(Clone, Debug)]
struct Sources {
    service: Arc<Sourced<Service>>,
    slices: Vec<Arc<Sourced<EndpointSlice>>>,
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

/// What a PTR names: a Service, or one of its endpoints (shared with the entry, not copied).
#[derive(Clone, Debug)]
pub struct PtrTarget {
    entry: Arc<ServiceEntry>,
    endpoint: Option<usize>,
}

impl PtrTarget {
    /// The name the PTR record points at.
    pub fn name(&self) -> &Name {
        match self.endpoint.and_then(|i| self.entry.endpoints.get(i)) {
            Some(ep) => &ep.fqdn,
            None => &self.entry.fqdn,
        }
    }
}

/// The immutable view queries are answered from.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Lower-case namespace -> lower-case Service name -> entry. A namespace is present when a
    /// Namespace object names it or (manifests without Namespaces) any Service or slice is in it.
    pub namespaces: HashMap<String, HashMap<String, Arc<ServiceEntry>>>,
    /// PTR targets: ClusterIP -> its Service's name (first wins, as CoreDNS), else endpoints.
    pub reverse: HashMap<IpAddr, Vec<PtrTarget>>,
    /// Whether the source has listed everything once; before, in-zone answers are SERVFAIL.
    pub synced: bool,
    /// Objects skipped, each with why.
    pub problems: Vec<String>,
    /// The zone's SOA serial: when this view was built (Unix seconds), as CoreDNS uses the
    /// time of the last change.
    pub serial: u32,
}

type SliceGroups<'a> = HashMap<(Cow<'a, str>, Cow<'a, str>), Vec<Arc<Sourced<EndpointSlice>>>>;

/// Lower-case, without copying what already is (Kubernetes names are).
fn lower(s: &str) -> Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(s.to_ascii_lowercase())
    } else {
        Cow::Borrowed(s)
    }
}

impl Cluster {
    /// Builds the view of `objects` for `zone` (which must be a valid name).
    pub fn build(objects: &Objects, zone: &Name) -> Cluster {
        Cluster::rebuild(objects, zone, None)
    }

    /// Builds the view of `objects`, reusing the entries of `previous` whose objects are the
    /// same, so one changed slice among thousands costs one Service.
    pub fn rebuild(objects: &Objects, zone: &Name, previous: Option<&Cluster>) -> Cluster {
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
        let mut groups = cluster.group_slices(objects);
        for s in objects.services.values() {
            let meta = &s.object.metadata;
            let ns = lower(meta.namespace.as_deref().unwrap_or("default"));
            let name = lower(meta.name.as_deref().unwrap_or(""));
            let slices = groups
                .remove(&(ns.clone(), name.clone()))
                .unwrap_or_default();
            let sources = Sources {
                service: Arc::clone(s),
                slices,
            };
            let reused = previous
                .and_then(|p| p.service(&ns, &name))
                .filter(|e| e.sources == sources)
                .cloned();
            let entry = match reused {
                Some(e) => e,
                None => match service_entry(sources, zone) {
                    Ok(e) => Arc::new(e),
                    Err(e) => {
                        cluster.problems.push(format!("{}: {e}; skipped", s.origin));
                        continue;
                    }
                },
            };
            cluster.problems.extend(entry.problems.iter().cloned());
            let services = match cluster.namespaces.get_mut(ns.as_ref()) {
                Some(services) => services,
                None => cluster.namespaces.entry(ns.into_owned()).or_default(),
            };
            services.insert(name.into_owned(), entry);
        }
        // Slices of an absent Service are served by nobody (CoreDNS indexes them by Service),
        // but their namespace exists.
        for (ns, _) in groups.into_keys() {
            cluster.namespaces.entry(ns.into_owned()).or_default();
        }
        cluster.index_reverse();
        cluster
    }

    /// Slices by the (namespace, Service) they belong to, in the source's order.
    fn group_slices<'a>(&mut self, objects: &'a Objects) -> SliceGroups<'a> {
        let mut groups = SliceGroups::new();
        for s in objects.slices.values() {
            let meta = &s.object.metadata;
            let ns = lower(meta.namespace.as_deref().unwrap_or("default"));
            match meta
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
            {
                Some(svc) => groups
                    .entry((ns, lower(svc)))
                    .or_default()
                    .push(Arc::clone(s)),
                None => self.problems.push(format!(
                    "{}: metadata.labels[\"kubernetes.io/service-name\"] is missing; skipped",
                    s.origin
                )),
            }
        }
        groups
    }

    fn index_reverse(&mut self) {
        let mut reverse: HashMap<IpAddr, Vec<PtrTarget>> = HashMap::new();
        for services in self.namespaces.values() {
            for entry in services.values() {
                if let Shape::ClusterIp(ips) = &entry.shape {
                    for ip in ips {
                        reverse.entry(*ip).or_insert_with(|| {
                            vec![PtrTarget {
                                entry: Arc::clone(entry),
                                endpoint: None,
                            }]
                        });
                    }
                }
            }
        }
        for services in self.namespaces.values() {
            for entry in services.values() {
                for (i, ep) in entry.endpoints.iter().enumerate() {
                    let targets = reverse.entry(ep.ip).or_default();
                    // A ClusterIP answers alone; endpoints gather one PTR per Service.
                    if targets.first().is_none_or(|t| t.endpoint.is_some()) {
                        targets.push(PtrTarget {
                            entry: Arc::clone(entry),
                            endpoint: Some(i),
                        });
                    }
                }
            }
        }
        self.reverse = reverse;
    }

    /// The Service `name` in `ns` (both lower-case).
    pub fn service(&self, ns: &str, name: &str) -> Option<&Arc<ServiceEntry>> {
        self.namespaces.get(ns)?.get(name)
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
fn service_entry(sources: Sources, zone: &Name) -> Result<ServiceEntry, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    const WEB: &str = "kind: Service\napiVersion: v1\nmetadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.20}\n";
    const DB: &str = "kind: Service\napiVersion: v1\nmetadata: {name: db, namespace: default}\nspec: {clusterIP: None}\n---\n\
        kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {name: db-1, namespace: default, labels: {kubernetes.io/service-name: db}}\n\
        addressType: IPv4\nendpoints:\n- {addresses: [10.244.1.5]}\n";

    fn objects(texts: &[&str]) -> Objects {
        let mut o = Objects::default();
        for t in texts {
            kubesrc::manifests::load_text(t, "t.yaml", &mut o);
        }
        o
    }

    #[test]
    fn an_unchanged_service_is_reused_and_a_changed_one_rebuilt() {
        let zone = Name::from_ascii("cluster.local.").unwrap();
        let first = objects(&[WEB, DB]);
        let before = Cluster::build(&first, &zone);
        // Same objects for web, a new slice object for db.
        let mut second = first.clone();
        let changed = objects(&[&DB.replace("10.244.1.5", "10.244.1.6")]);
        second.slices = changed.slices;
        let after = Cluster::rebuild(&second, &zone, Some(&before));
        let (web0, web1) = (
            before.service("default", "web").unwrap(),
            after.service("default", "web").unwrap(),
        );
        assert!(Arc::ptr_eq(web0, web1), "web did not change: reused");
        let db = after.service("default", "db").unwrap();
        assert!(!Arc::ptr_eq(before.service("default", "db").unwrap(), db));
        assert_eq!(db.endpoints[0].ip, "10.244.1.6".parse::<IpAddr>().unwrap());
        assert_eq!(
            after
                .reverse
                .get(&db.endpoints[0].ip)
                .map(|t| t[0].name().to_ascii()),
            Some("10-244-1-6.db.default.svc.cluster.local.".to_string())
        );
        assert!(
            !after
                .reverse
                .contains_key(&"10.244.1.5".parse::<IpAddr>().unwrap())
        );
    }
}
