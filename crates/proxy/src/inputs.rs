//! What the proxy last planned from: the Services and EndpointSlices of the last sync, and
//! which slices each Service has. A new snapshot is compared with them in one ordered walk
//! (both sides are sorted maps), so that a sync finds the few Services a change touched
//! without grouping or looking up all 2,000 of them again.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::iter::Peekable;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{Service, ServiceKey, Slice};
use crate::source::Snapshot;

/// The objects of the last sync.
#[derive(Default)]
pub(crate) struct Inputs {
    services: BTreeMap<ServiceKey, Service>,
    /// By `namespace/slice-name`, as in [`Snapshot::slices`].
    slices: BTreeMap<String, Slice>,
    /// Each Service's slices, by their keys in `slices`.
    slices_of: BTreeMap<ServiceKey, BTreeSet<String>>,
    /// Which Services have an endpoint at each address, and in how many slice entries: what
    /// an HNS change at an address touches, found without walking every slice.
    services_at: BTreeMap<IpAddr, BTreeMap<ServiceKey, usize>>,
}

/// What a snapshot changed against the last one.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Changes {
    /// Services whose object or one of whose slices was added, changed or removed; some may
    /// no longer exist (a slice left behind by its Service).
    pub touched: BTreeSet<ServiceKey>,
    /// Services no longer in the snapshot.
    pub gone: Vec<ServiceKey>,
}

impl Inputs {
    /// Takes `snapshot` as the last sync's objects; what it changed.
    pub fn take(&mut self, snapshot: &Snapshot) -> Changes {
        let mut changes = Changes::default();
        for (key, old, new) in differing(&self.slices, &snapshot.slices) {
            if let Some(old) = old {
                changes.touched.insert(old.service.clone());
                self.unindex(&old);
                if let Some(keys) = self.slices_of.get_mut(&old.service) {
                    keys.remove(&key);
                    if keys.is_empty() {
                        self.slices_of.remove(&old.service);
                    }
                }
            }
            match new {
                Some(new) => {
                    changes.touched.insert(new.service.clone());
                    self.index(&new);
                    let of = self.slices_of.entry(new.service.clone()).or_default();
                    of.insert(key.clone());
                    self.slices.insert(key, new);
                }
                None => {
                    self.slices.remove(&key);
                }
            }
        }
        for (key, _, new) in differing(&self.services, &snapshot.services) {
            match new {
                Some(new) => {
                    self.services.insert(key.clone(), new);
                    changes.touched.insert(key);
                }
                None => {
                    self.services.remove(&key);
                    changes.gone.push(key);
                }
            }
        }
        changes
    }

    /// The slices of Service `key` in `snapshot` (the one last taken), in key order.
    pub fn slices_of<'a>(&self, key: &ServiceKey, snapshot: &'a Snapshot) -> Vec<&'a Slice> {
        self.slices_of
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|k| snapshot.slices.get(k))
            .collect()
    }

    /// The Services of the last sync with an endpoint at one of `addresses` or inside one of
    /// `prefixes`: each costs a lookup (a range for a prefix), not a walk of every slice.
    pub fn services_at(
        &self,
        addresses: &BTreeSet<IpAddr>,
        prefixes: &[IpNet],
    ) -> BTreeSet<ServiceKey> {
        let at = addresses.iter().filter_map(|ip| self.services_at.get(ip));
        let inside = prefixes
            .iter()
            .flat_map(|p| self.services_at.range(p.network()..=p.broadcast()))
            .map(|(_, of)| of);
        at.chain(inside).flat_map(|of| of.keys().cloned()).collect()
    }

    /// Counts `slice`'s endpoints in [`Inputs::services_at`].
    fn index(&mut self, slice: &Slice) {
        for e in &slice.endpoints {
            let of = self.services_at.entry(e.ip).or_default();
            *of.entry(slice.service.clone()).or_default() += 1;
        }
    }

    /// Uncounts `slice`'s endpoints from [`Inputs::services_at`].
    fn unindex(&mut self, slice: &Slice) {
        for e in &slice.endpoints {
            let Some(of) = self.services_at.get_mut(&e.ip) else {
                continue;
            };
            if let Some(n) = of.get_mut(&slice.service) {
                *n -= 1;
                if *n == 0 {
                    of.remove(&slice.service);
                }
            }
            if of.is_empty() {
                self.services_at.remove(&e.ip);
            }
        }
    }

    /// Every Service of the last sync.
    pub fn keys(&self) -> impl Iterator<Item = &ServiceKey> {
        self.services.keys()
    }
}

/// The entries of two sorted maps that differ: each key with its value in `old` and in `new`
/// (`None` where it is absent), cloned; equal entries cost one comparison each.
fn differing<K: Ord + Clone, V: PartialEq + Clone>(
    old: &BTreeMap<K, V>,
    new: &BTreeMap<K, V>,
) -> Vec<(K, Option<V>, Option<V>)> {
    let (mut a, mut b) = (old.iter().peekable(), new.iter().peekable());
    let mut out = Vec::new();
    loop {
        match order(&mut a, &mut b) {
            None => return out,
            Some(Ordering::Less) => {
                if let Some((k, v)) = a.next() {
                    out.push((k.clone(), Some(v.clone()), None));
                }
            }
            Some(Ordering::Greater) => {
                if let Some((k, v)) = b.next() {
                    out.push((k.clone(), None, Some(v.clone())));
                }
            }
            Some(Ordering::Equal) => {
                if let (Some((k, old)), Some((_, new))) = (a.next(), b.next())
                    && old != new
                {
                    out.push((k.clone(), Some(old.clone()), Some(new.clone())));
                }
            }
        }
    }
}

/// Which side's next key comes first (`Less`: `a`'s, only it has one left, or it is smaller);
/// `None` when both are done.
fn order<'a, K: Ord + 'a, V: 'a>(
    a: &mut Peekable<impl Iterator<Item = (&'a K, &'a V)>>,
    b: &mut Peekable<impl Iterator<Item = (&'a K, &'a V)>>,
) -> Option<Ordering> {
    match (a.peek(), b.peek()) {
        (None, None) => None,
        (Some(_), None) => Some(Ordering::Less),
        (None, Some(_)) => Some(Ordering::Greater),
        (Some((x, _)), Some((y, _))) => Some(x.cmp(y)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{endpoint, key, service, snapshot};

    /// Services a, b, c; a's slice holds `a`, b's holds `b` (addresses).
    fn three(a: &[&str], b: &[&str]) -> Snapshot {
        let eps = |ips: &[&str]| ips.iter().map(|ip| endpoint(ip, "win-2")).collect();
        let services = ["a", "b", "c"].iter().enumerate();
        let services = services.map(|(i, n)| service(n, &format!("10.96.0.{}", i + 1)));
        snapshot(services.collect(), &[("a", eps(a)), ("b", eps(b))])
    }

    fn keys(names: &[&str]) -> BTreeSet<ServiceKey> {
        names.iter().map(|n| key(n)).collect()
    }

    #[test]
    fn only_the_services_a_change_touched_are_named() {
        let mut inputs = Inputs::default();
        let first = inputs.take(&three(&["10.244.2.2"], &["10.244.2.3"]));
        assert_eq!(first.touched, keys(&["a", "b", "c"]));
        // Nothing changed: nothing touched.
        let same = inputs.take(&three(&["10.244.2.2"], &["10.244.2.3"]));
        assert_eq!(same, Changes::default());
        // One endpoint more in b's slice: only b.
        let snap = three(&["10.244.2.2"], &["10.244.2.3", "10.244.3.4"]);
        assert_eq!(inputs.take(&snap).touched, keys(&["b"]));
        let of_b = inputs.slices_of(&key("b"), &snap);
        assert_eq!(of_b, vec![&snap.slices["default/b-1"]]);
        // c removed: gone, not touched.
        let mut snap = snap.clone();
        snap.services.remove(&key("c"));
        let removed = inputs.take(&snap);
        assert_eq!(removed.gone, vec![key("c")]);
        assert!(removed.touched.is_empty());
        assert_eq!(inputs.keys().count(), 2);
    }

    #[test]
    fn an_address_names_the_services_whose_slices_list_it() {
        let mut inputs = Inputs::default();
        let ips = |list: &[&str]| list.iter().map(|ip| ip.parse().expect("ip")).collect();
        let net = |p: &str| vec![p.parse::<IpNet>().expect("prefix")];
        inputs.take(&three(&["10.244.2.2", "10.244.3.4"], &["10.244.3.4"]));
        let shared = inputs.services_at(&ips(&["10.244.3.4"]), &[]);
        assert_eq!(shared, keys(&["a", "b"]));
        assert_eq!(inputs.services_at(&ips(&["10.244.9.9"]), &[]), keys(&[]));
        assert_eq!(
            inputs.services_at(&ips(&[]), &net("10.244.2.0/24")),
            keys(&["a"])
        );
        assert_eq!(
            inputs.services_at(&ips(&[]), &net("10.244.0.0/16")),
            keys(&["a", "b"])
        );
        // a no longer lists 10.244.3.4: only b does; and 10.244.2.2 is gone with a's slice.
        inputs.take(&three(&["10.244.2.2"], &["10.244.3.4"]));
        assert_eq!(inputs.services_at(&ips(&["10.244.3.4"]), &[]), keys(&["b"]));
        let mut snap = three(&["10.244.2.2"], &["10.244.3.4"]);
        snap.slices.remove("default/a-1");
        inputs.take(&snap);
        assert_eq!(inputs.services_at(&ips(&["10.244.2.2"]), &[]), keys(&[]));
        assert_eq!(inputs.services_at.len(), 1, "nothing left behind");
    }

    #[test]
    fn a_slice_moved_to_another_service_touches_both() {
        let mut inputs = Inputs::default();
        let mut snap = three(&["10.244.2.2"], &["10.244.2.3"]);
        inputs.take(&snap);
        let slice = snap.slices.get_mut("default/a-1").expect("a's slice");
        slice.service = key("c");
        assert_eq!(inputs.take(&snap).touched, keys(&["a", "c"]));
        assert!(inputs.slices_of(&key("a"), &snap).is_empty());
        assert_eq!(
            inputs.slices_of(&key("c"), &snap),
            vec![&snap.slices["default/a-1"]]
        );
        // The slice removed: its Service is touched, and has none.
        snap.slices.remove("default/a-1");
        assert_eq!(inputs.take(&snap).touched, keys(&["c"]));
        assert!(inputs.slices_of(&key("c"), &snap).is_empty());
    }
}
