//! Whether the objects held are ones HNS could hold together: every reference resolves, nothing
//! is claimed twice. Writes keep this by their plans; the store checks it on every object it
//! loads (a hand edit or a bug may have broken it), and a repair applies each problem's fix.

use std::fmt;

use hcn::Guid;

use super::{Kind, Object, State, frontends};
use crate::profile::Profile;

/// Something wrong with one object, and what a repair does about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub kind: Kind,
    /// The object's ID (or, for a row that is not an object, its key in the store).
    pub id: String,
    pub what: String,
    pub fix: Fix,
}

/// What a repair does with an object that has a [`Problem`].
// An object is put back whole; boxing it buys nothing for a list read once.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Fix {
    /// It cannot be kept.
    Drop,
    /// It is kept as this: without the reference that does not resolve.
    Keep(Object),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.kind.singular(), self.id, self.what)?;
        match &self.fix {
            Fix::Drop => f.write_str(" (a repair drops it)"),
            Fix::Keep(_) => f.write_str(" (a repair drops the reference)"),
        }
    }
}

impl Problem {
    pub fn new(kind: Kind, id: impl fmt::Display, what: impl Into<String>, fix: Fix) -> Problem {
        Problem {
            kind,
            id: id.to_string(),
            what: what.into(),
            fix,
        }
    }
}

impl State {
    /// A state holding `objects`, whatever they are: [`State::problems`] says what is wrong.
    pub(crate) fn holding(profile: Profile, objects: impl IntoIterator<Item = Object>) -> State {
        let mut state = State::new(profile);
        let mut puts: Vec<super::Change> = objects.into_iter().map(super::Change::Put).collect();
        // Networks first, so their address pools see their endpoints' addresses as taken.
        puts.sort_by_key(|c| match c {
            super::Change::Put(o) => Kind::ALL.iter().position(|k| *k == o.kind()),
            super::Change::Delete(..) => None,
        });
        state.apply(&puts);
        state
    }

    /// Every reference that does not resolve and every claim made twice, at most one per
    /// object, in ID order of each kind. Empty for any state built by planned writes.
    pub fn problems(&self) -> Vec<Problem> {
        let mut found = Vec::new();
        for n in self.networks.values() {
            let owner = self.network_names.get(&n.name.to_ascii_lowercase());
            if let Some(other) = owner.filter(|o| **o != n.id) {
                found.push(Problem::new(
                    Kind::Network,
                    n.id,
                    format!("its Name {:?} is also the name of network {other}", n.name),
                    Fix::Drop,
                ));
            }
        }
        found.extend(
            self.endpoints
                .values()
                .filter_map(|e| self.endpoint_problem(e)),
        );
        for ns in self.namespaces.values() {
            let stray: Vec<Guid> = ns
                .endpoint_ids()
                .filter(|ep| {
                    self.endpoints.get(ep).map(|e| e.host_compute_namespace) != Some(ns.id)
                })
                .collect();
            if let Some(first) = stray.first() {
                let mut kept = ns.clone();
                kept.resources
                    .retain(|r| !r.data.id.is_some_and(|id| stray.contains(&id)));
                found.push(Problem::new(
                    Kind::Namespace,
                    ns.id,
                    format!("it lists endpoint {first}, which does not exist or is not in it"),
                    Fix::Keep(Object::Namespace(kept)),
                ));
            }
        }
        for lb in self.load_balancers.values() {
            if let Some(f) = frontends(lb)
                .into_iter()
                .find(|f| self.frontends.get(f) != Some(&lb.id))
            {
                found.push(Problem::new(
                    Kind::LoadBalancer,
                    lb.id,
                    format!(
                        "protocol {} port {} is also load balanced by another",
                        f.protocol, f.port
                    ),
                    Fix::Drop,
                ));
                continue;
            }
            let mut kept = lb.clone();
            kept.host_compute_endpoints
                .retain(|ep| self.endpoints.contains_key(ep));
            if let Some(missing) = lb
                .host_compute_endpoints
                .iter()
                .find(|ep| !self.endpoints.contains_key(ep))
            {
                // Kept even with no backend left, as deleting its last endpoint leaves it.
                found.push(Problem::new(
                    Kind::LoadBalancer,
                    lb.id,
                    format!("its backend endpoint {missing} does not exist"),
                    Fix::Keep(Object::LoadBalancer(kept)),
                ));
            }
        }
        for r in self.routes.values() {
            if let Some(missing) = r
                .host_compute_endpoints
                .iter()
                .find(|ep| !self.endpoints.contains_key(ep))
            {
                let mut kept = r.clone();
                kept.host_compute_endpoints
                    .retain(|ep| self.endpoints.contains_key(ep));
                found.push(Problem::new(
                    Kind::Route,
                    r.id,
                    format!("its endpoint {missing} does not exist"),
                    Fix::Keep(Object::Route(kept)),
                ));
            }
        }
        found
    }

    fn endpoint_problem(&self, e: &hcn::Endpoint) -> Option<Problem> {
        let net = e.host_compute_network;
        let drop = |what: String| Some(Problem::new(Kind::Endpoint, e.id, what, Fix::Drop));
        if !self.networks.contains_key(&net) {
            return drop(format!("its network {net} does not exist"));
        }
        if let Some(ip) = e
            .ips()
            .find(|ip| self.ips.get(&(net, e.is_remote(), *ip)) != Some(&e.id))
        {
            return drop(format!("its address {ip} is also held by another endpoint"));
        }
        if let Some(mac) = e
            .mac_address
            .filter(|m| !e.is_remote() && self.macs.get(&(net, *m)) != Some(&e.id))
        {
            return drop(format!("its MAC {mac} is also held by another endpoint"));
        }
        let ns = e.host_compute_namespace;
        let listed = self
            .namespaces
            .get(&ns)
            .is_some_and(|n| n.endpoint_ids().any(|id| id == e.id));
        if !ns.is_nil() && !listed {
            let mut kept = e.clone();
            kept.host_compute_namespace = Guid::default();
            return Some(Problem::new(
                Kind::Endpoint,
                e.id,
                format!("its namespace {ns} does not exist or does not list it"),
                Fix::Keep(Object::Endpoint(kept)),
            ));
        }
        None
    }
}
