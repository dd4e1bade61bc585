//! The cluster as the DNS sees it: Services with their addresses, ports and ready endpoints,
//! the namespaces that exist, and the reverse map. Each change of the Kubernetes objects makes
//! a new view from the last one, redoing only the Service names whose objects changed (with
//! their PTR entries and their namespace): its maps are [`Shards`], so the new view shares
//! everything else with the old one, which queries go on reading (they never take a lock).
//! A change costs what it touches, not the size of the cluster.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kubesrc::{ByKey, Objects, Sourced};

pub use crate::entry::{Endpoint, PortName, ServiceEntry, Shape};
use crate::entry::{Sources, service_entry};
pub use crate::shards::Shards;

/// A namespace's Services by lower-case name.
pub type Services = Shards<String, Arc<ServiceEntry>>;

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

    /// The order of an address's claims: ClusterIPs first, then by Service name and endpoint,
    /// so a view made by changes equals one made at once.
    fn order(&self) -> (bool, &Name, Option<usize>) {
        (self.endpoint.is_some(), &self.entry.fqdn, self.endpoint)
    }
}

/// The immutable view queries are answered from.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Lower-case namespace -> lower-case Service name -> entry. A namespace is present when a
    /// Namespace object names it or (manifests without Namespaces) any Service or slice is in it.
    pub namespaces: Shards<String, Services>,
    /// Every PTR claim on an address, in [`PtrTarget::order`]; [`Cluster::ptr_targets`] is
    /// what is answered.
    pub reverse: Shards<IpAddr, Arc<[PtrTarget]>>,
    /// Whether the source has listed everything once; before, in-zone answers are SERVFAIL.
    pub synced: bool,
    /// Objects skipped, each with why.
    pub problems: Vec<String>,
    /// The zone's SOA serial: when this view was built (Unix seconds), as CoreDNS uses the
    /// time of the last change.
    pub serial: u32,
    index: Index,
}

/// What a view was made from, and how its objects group: what the next change starts from.
#[derive(Clone, Debug, Default)]
struct Index {
    objects: Arc<Objects>,
    /// The objects of each Service name (lower-case namespace, name).
    groups: Shards<Id, Arc<Group>>,
    /// How many Namespace objects and Service names hold each namespace in the view.
    holds: Shards<String, usize>,
    /// EndpointSlices without a Service, by key.
    slice_problems: BTreeMap<String, String>,
    /// What was skipped of each Service object, by key.
    service_problems: BTreeMap<String, Vec<String>>,
}

/// A Service name: lower-case namespace and name.
type Id = (String, String);

/// The objects of one Service name, by key.
#[derive(Clone, Debug, Default)]
struct Group {
    services: BTreeSet<String>,
    slices: BTreeSet<String>,
    /// Whether it makes its namespace exist.
    holds: bool,
}

/// A key whose object differs between two sources: its old and new object.
type Change<'a, K> = (
    &'a String,
    Option<&'a Arc<Sourced<K>>>,
    Option<&'a Arc<Sourced<K>>>,
);

impl Cluster {
    /// Builds the view of `objects` for `zone` (which must be a valid name).
    pub fn build(objects: &Objects, zone: &Name) -> Cluster {
        Cluster::rebuild(&Arc::new(objects.clone()), zone, None)
    }

    /// The view of `objects`: `previous` with the Service names whose objects changed since
    /// it was made redone (an object that did not change is the same `Arc`); every one when
    /// there is no previous view.
    pub fn rebuild(objects: &Arc<Objects>, zone: &Name, previous: Option<&Cluster>) -> Cluster {
        let mut view = previous.cloned().unwrap_or_default();
        view.update(objects, zone);
        view
    }

    /// The Service `name` in `ns` (both lower-case).
    pub fn service(&self, ns: &str, name: &str) -> Option<&Arc<ServiceEntry>> {
        self.namespaces.get(ns)?.get(name)
    }

    /// The PTR answer for `ip`: the Service owning it as a ClusterIP (the first by name, as
    /// CoreDNS takes one), else every endpoint at it, one per Service endpoint.
    pub fn ptr_targets(&self, ip: &IpAddr) -> Option<&[PtrTarget]> {
        let targets = self.reverse.get(ip)?;
        Some(match targets.first() {
            Some(t) if t.endpoint.is_none() => &targets[..1],
            _ => targets,
        })
    }

    fn update(&mut self, objects: &Arc<Objects>, zone: &Name) {
        let before = std::mem::replace(&mut self.index.objects, Arc::clone(objects));
        for (_, old, new) in diff(&before.namespaces, &objects.namespaces) {
            if let Some(ns) = old.and_then(|n| n.object.metadata.name.as_deref()) {
                self.release(&ns.to_ascii_lowercase());
            }
            if let Some(ns) = new.and_then(|n| n.object.metadata.name.as_deref()) {
                self.hold(ns.to_ascii_lowercase());
            }
        }
        let mut changed = BTreeSet::new();
        for (key, old, new) in diff(&before.slices, &objects.slices) {
            changed.extend(old.and_then(|s| self.list_slice(key, s, false)));
            changed.extend(new.and_then(|s| self.list_slice(key, s, true)));
        }
        for (key, old, new) in diff(&before.services, &objects.services) {
            changed.extend(old.map(|s| self.list_service(key, s, false)));
            changed.extend(new.map(|s| self.list_service(key, s, true)));
        }
        for id in changed {
            self.settle(id, zone);
        }
        self.synced = objects.synced;
        self.serial = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32);
        // The order of a pass over the objects: the source's, the slices', the Services'.
        self.problems = (objects.problems.iter())
            .chain(self.index.slice_problems.values())
            .chain(self.index.service_problems.values().flatten())
            .cloned()
            .collect();
    }

    /// Lists (or unlists) a slice under its Service name; one without is a problem.
    fn list_slice(
        &mut self,
        key: &str,
        slice: &Sourced<EndpointSlice>,
        listed: bool,
    ) -> Option<Id> {
        let Some(id) = slice_id(slice) else {
            let problem = format!(
                "{}: metadata.labels[\"kubernetes.io/service-name\"] is missing; skipped",
                slice.origin
            );
            match listed {
                true => self.index.slice_problems.insert(key.to_string(), problem),
                false => self.index.slice_problems.remove(key),
            };
            return None;
        };
        let slices = &mut self.group_mut(&id).slices;
        match listed {
            true => slices.insert(key.to_string()),
            false => slices.remove(key),
        };
        Some(id)
    }

    /// Lists (or unlists) a Service object under its Service name.
    fn list_service(&mut self, key: &str, service: &Sourced<Service>, listed: bool) -> Id {
        let id = service_id(service);
        self.index.service_problems.remove(key);
        let services = &mut self.group_mut(&id).services;
        match listed {
            true => services.insert(key.to_string()),
            false => services.remove(key),
        };
        id
    }

    fn group_mut(&mut self, id: &Id) -> &mut Group {
        Arc::make_mut(self.index.groups.get_or_default(id.clone()))
    }

    /// Redoes the Service name `id` from its objects: its entry, its PTR claims, whether it
    /// makes its namespace exist.
    fn settle(&mut self, id: Id, zone: &Name) {
        let group = self.index.groups.get(&id).cloned().unwrap_or_default();
        let old = self.service(&id.0, &id.1).cloned();
        let entry = self.entry_of(&group, old.as_ref(), zone);
        // Slices of an absent Service are served by nobody (CoreDNS indexes them by Service),
        // but their namespace exists; a Service that cannot be served takes its slices along.
        let holds = entry.is_some() || (group.services.is_empty() && !group.slices.is_empty());
        if holds && !group.holds {
            self.hold(id.0.clone());
        }
        let same = matches!((&old, &entry), (Some(a), Some(b)) if Arc::ptr_eq(a, b));
        if !same {
            if let Some(old) = &old {
                self.unclaim(old);
            }
            if let Some(services) = self.namespaces.get_mut(&id.0) {
                match &entry {
                    Some(e) => services.insert(id.1.clone(), Arc::clone(e)),
                    None => services.remove(&id.1),
                };
            }
            if let Some(entry) = &entry {
                self.claim(entry);
            }
        }
        if !holds && group.holds {
            self.release(&id.0);
        }
        if group.services.is_empty() && group.slices.is_empty() {
            self.index.groups.remove(&id);
        } else if group.holds != holds {
            self.group_mut(&id).holds = holds;
        }
    }

    /// The entry of a Service name as a pass over the objects makes it: its Service objects in
    /// key order, the first taking the name's slices, the last that can be served answering.
    fn entry_of(
        &mut self,
        group: &Group,
        old: Option<&Arc<ServiceEntry>>,
        zone: &Name,
    ) -> Option<Arc<ServiceEntry>> {
        let objects = Arc::clone(&self.index.objects);
        let mut slices: Vec<_> = (group.slices.iter())
            .filter_map(|k| objects.slices.get(k).cloned())
            .collect();
        let mut entry = None;
        for key in &group.services {
            let Some(service) = objects.services.get(key) else {
                continue;
            };
            let sources = Sources {
                service: Arc::clone(service),
                slices: std::mem::take(&mut slices),
            };
            let built = match old.filter(|e| e.sources == sources) {
                Some(e) => Ok(Arc::clone(e)),
                None => service_entry(sources, zone).map(Arc::new),
            };
            let problems = match built {
                Ok(e) => {
                    let problems = e.problems.clone();
                    entry = Some(e);
                    problems
                }
                Err(e) => vec![format!("{}: {e}; skipped", service.origin)],
            };
            if problems.is_empty() {
                self.index.service_problems.remove(key);
            } else {
                self.index.service_problems.insert(key.clone(), problems);
            }
        }
        entry
    }

    /// Adds `entry`'s PTR claims: its ClusterIPs and its endpoints' addresses.
    fn claim(&mut self, entry: &Arc<ServiceEntry>) {
        let mut by_ip: BTreeMap<IpAddr, Vec<PtrTarget>> = BTreeMap::new();
        for (ip, target) in claims(entry) {
            by_ip.entry(ip).or_default().push(target);
        }
        for (ip, mut targets) in by_ip {
            if let Some(others) = self.reverse.get(&ip) {
                targets.extend(others.iter().cloned());
            }
            targets.sort_by(|a, b| a.order().cmp(&b.order()));
            self.reverse.insert(ip, targets.into());
        }
    }

    /// Takes `entry`'s PTR claims away.
    fn unclaim(&mut self, entry: &Arc<ServiceEntry>) {
        let ips: BTreeSet<IpAddr> = claims(entry).into_iter().map(|(ip, _)| ip).collect();
        for ip in ips {
            let Some(targets) = self.reverse.get(&ip) else {
                continue;
            };
            let left: Vec<PtrTarget> = (targets.iter())
                .filter(|t| t.entry.fqdn != entry.fqdn)
                .cloned()
                .collect();
            if left.is_empty() {
                self.reverse.remove(&ip);
            } else {
                self.reverse.insert(ip, left.into());
            }
        }
    }

    /// One more reason for namespace `ns` to exist.
    fn hold(&mut self, ns: String) {
        let first = {
            let n = self.index.holds.get_or_default(ns.clone());
            *n += 1;
            *n == 1
        };
        if first {
            self.namespaces.insert(ns, Services::default());
        }
    }

    /// One reason fewer; the namespace goes with the last.
    fn release(&mut self, ns: &str) {
        let Some(n) = self.index.holds.get_mut(ns) else {
            return;
        };
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.index.holds.remove(ns);
            self.namespaces.remove(ns);
        }
    }
}

/// The addresses `entry` answers PTR questions for, each with what it names.
fn claims(entry: &Arc<ServiceEntry>) -> Vec<(IpAddr, PtrTarget)> {
    let mut claims = Vec::new();
    if let Shape::ClusterIp(ips) = &entry.shape {
        claims.extend(ips.iter().map(|ip| {
            let target = PtrTarget {
                entry: Arc::clone(entry),
                endpoint: None,
            };
            (*ip, target)
        }));
    }
    claims.extend(entry.endpoints.iter().enumerate().map(|(i, ep)| {
        let target = PtrTarget {
            entry: Arc::clone(entry),
            endpoint: Some(i),
        };
        (ep.ip, target)
    }));
    claims
}

fn service_id(s: &Sourced<Service>) -> Id {
    let meta = &s.object.metadata;
    (
        meta.namespace
            .as_deref()
            .unwrap_or("default")
            .to_ascii_lowercase(),
        meta.name.as_deref().unwrap_or("").to_ascii_lowercase(),
    )
}

/// The Service name a slice belongs to, if it names one.
fn slice_id(s: &Sourced<EndpointSlice>) -> Option<Id> {
    let meta = &s.object.metadata;
    let service = meta.labels.as_ref()?.get("kubernetes.io/service-name")?;
    Some((
        meta.namespace
            .as_deref()
            .unwrap_or("default")
            .to_ascii_lowercase(),
        service.to_ascii_lowercase(),
    ))
}

/// The keys whose object is not the same between `old` and `new`: a walk over both, comparing
/// pointers (the source hands out the same `Arc` for an object that did not change).
fn diff<'a, K>(old: &'a ByKey<K>, new: &'a ByKey<K>) -> Vec<Change<'a, K>> {
    let mut changes = Vec::new();
    if std::ptr::eq(old, new) {
        return changes;
    }
    let (mut a, mut b) = (old.iter().peekable(), new.iter().peekable());
    loop {
        let order = match (a.peek(), b.peek()) {
            (None, None) => return changes,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((ka, _)), Some((kb, _))) => ka.cmp(kb),
        };
        match order {
            Ordering::Less => {
                if let Some((k, v)) = a.next() {
                    changes.push((k, Some(v), None));
                }
            }
            Ordering::Greater => {
                if let Some((k, v)) = b.next() {
                    changes.push((k, None, Some(v)));
                }
            }
            Ordering::Equal => {
                if let (Some((k, va)), Some((_, vb))) = (a.next(), b.next())
                    && !Arc::ptr_eq(va, vb)
                {
                    changes.push((k, Some(va), Some(vb)));
                }
            }
        }
    }
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
        let after = Cluster::rebuild(&Arc::new(second), &zone, Some(&before));
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
