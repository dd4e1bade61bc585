//! The cluster view made change by change equals the view made at once from the same objects:
//! after random sequences of Services, EndpointSlices and Namespaces added, replaced and
//! removed (with names differing in case only, Services that cannot be served, slices of no
//! Service, endpoints at another Service's ClusterIP), the namespaces, every Service's entry,
//! every PTR claim and answer, and the problems are the same.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use dns::cluster::{Cluster, ServiceEntry};
use hickory_proto::rr::Name;
use kubesrc::Objects;
use proptest::prelude::*;

const NAMES: [&str; 3] = ["a", "b", "A"];
const NAMESPACES: [&str; 3] = ["default", "ns1", "NS1"];
const SPECS: [&str; 5] = [
    "{clusterIP: 10.96.0.1, ports: [{name: http, port: 80}]}",
    "{clusterIP: 10.96.0.2}",
    "{clusterIP: None}",
    "{type: ExternalName, externalName: example.com}",
    "{clusterIP: nope}",
];
const ENDPOINTS: [&str; 4] = [
    "- {addresses: [10.244.0.1]}\n",
    "- {addresses: [10.244.0.1, 10.96.0.1], hostname: h}\n",
    "- {addresses: [10.244.0.2], conditions: {ready: false}}\n- {addresses: [bad]}\n",
    "- {addresses: [10.244.0.2]}\n- {addresses: [10.244.0.2]}\n",
];

/// One object as a manifest document, chosen by `(kind, a, b, c)`.
fn document(kind: u8, a: usize, b: usize, c: usize) -> String {
    let ns = NAMESPACES[b % 3];
    match kind % 3 {
        0 => format!(
            "kind: Service\napiVersion: v1\nmetadata: {{name: {}, namespace: {ns}}}\nspec: {}\n",
            NAMES[a % 3],
            SPECS[c % 5]
        ),
        1 => {
            let label = match a % 4 {
                3 => String::new(),
                i => format!(", labels: {{kubernetes.io/service-name: {}}}", NAMES[i]),
            };
            format!(
                "kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: s{}, namespace: {ns}{label}}}\naddressType: IPv4\nendpoints:\n{}",
                c % 2,
                ENDPOINTS[(a + c) % 4]
            )
        }
        _ => format!("kind: Namespace\napiVersion: v1\nmetadata: {{name: {ns}}}\n"),
    }
}

/// Adds (or replaces with a new object) or removes the document's object.
fn apply(objects: &mut Objects, text: &str, remove: bool) {
    let mut one = Objects::default();
    kubesrc::manifests::load_text(text, "change.yaml", &mut one);
    assert!(one.problems.is_empty(), "{:?}", one.problems);
    if remove {
        for k in one.services.keys() {
            objects.services.remove(k);
        }
        for k in one.slices.keys() {
            objects.slices.remove(k);
        }
        for k in one.namespaces.keys() {
            objects.namespaces.remove(k);
        }
    } else {
        objects.services.extend(one.services);
        objects.slices.extend(one.slices);
        objects.namespaces.extend(one.namespaces);
    }
}

type Entries = BTreeMap<String, BTreeMap<String, Arc<ServiceEntry>>>;
/// Each address's PTR claims and its answer, as names.
type Reverse = BTreeMap<IpAddr, (Vec<String>, Vec<String>)>;

/// What a view answers from, in a fixed order.
fn contents(view: &Cluster) -> (Entries, Reverse) {
    let entries = (view.namespaces.iter())
        .map(|(ns, services)| {
            let services = services.iter().map(|(n, e)| (n.clone(), Arc::clone(e)));
            (ns.clone(), services.collect())
        })
        .collect();
    let names = |targets: &[dns::cluster::PtrTarget]| -> Vec<String> {
        targets.iter().map(|t| t.name().to_ascii()).collect()
    };
    let reverse = (view.reverse.iter())
        .map(|(ip, claims)| {
            let answer = view.ptr_targets(ip).map(names).unwrap_or_default();
            (*ip, (names(claims), answer))
        })
        .collect();
    (entries, reverse)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_view_made_by_changes_equals_one_made_at_once(
        steps in prop::collection::vec((0u8..3, 0usize..12, 0usize..12, 0usize..12, any::<bool>()), 1..40)
    ) {
        let zone = Name::from_ascii("cluster.local.").unwrap();
        let mut objects = Objects { synced: true, ..Objects::default() };
        let mut view = Cluster::build(&objects, &zone);
        for (kind, a, b, c, remove) in steps {
            apply(&mut objects, &document(kind, a, b, c), remove);
            let source = Arc::new(objects.clone());
            view = Cluster::rebuild(&source, &zone, Some(&view));
            let whole = Cluster::build(&objects, &zone);
            prop_assert_eq!(contents(&view), contents(&whole));
            prop_assert_eq!(&view.problems, &whole.problems);
            prop_assert_eq!(view.synced, whole.synced);
        }
    }
}
