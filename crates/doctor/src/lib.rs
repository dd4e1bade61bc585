//! `winnet doctor`'s core: a node's layers compared. A [`NodeSnapshot`] holds what Kubernetes
//! wants (Services, their endpoints, the node's pods), what HNS holds (hnsd's objects), what
//! the switch does (compiled ports, layers, rules with their owners and counters) and what the
//! kernel has (TAPs in their namespaces, addresses, routes, neighbours, resolv.conf). Each check
//! in [`checks`] is a pure function over it that returns [`Finding`]s: the problem's kind, the
//! objects involved, the flows it breaks and the fix.
//!
//! A crate of its own because it is pure data in, data out: the live collection (netlink,
//! hnsd's socket, the Kubernetes source) lives in `winnet`, a bundle is a serialized snapshot,
//! and the same checks answer both — so `doctor --bundle` says what the live run said. Unit
//! tests build snapshots by hand, without root.

pub mod checks;
pub mod finding;
pub mod node;
pub mod planned;
pub mod render;
pub mod snapshot;

pub use finding::{Finding, ObjectRef, ProblemKind, Repair};
pub use snapshot::NodeSnapshot;

/// Every problem on the node of `snap`, in report order (by kind, then by objects).
pub fn diagnose(snap: &NodeSnapshot) -> Vec<Finding> {
    let node = node::Node::new(snap);
    let mut out = Vec::new();
    checks::endpoints::check(&node, &mut out);
    checks::loadbalancers::check(&node, &mut out);
    checks::switch::check(&node, &mut out);
    checks::kernel::check(&node, &mut out);
    checks::nat::check(&node, &mut out);
    checks::snat::check(&node, &mut out);
    checks::known::check(&node, &mut out);
    checks::flannel::check(&node, &mut out);
    checks::dns::check(&node, &mut out);
    checks::policy::check(&node, &mut out);
    out.sort_by(|a, b| (a.kind, &a.objects).cmp(&(b.kind, &b.objects)));
    out
}

/// Every problem of every node in `snaps`, with what only a comparison between the nodes
/// shows (a NetworkPolicy applied on one node and not on another), per node in their order.
pub fn diagnose_nodes(snaps: &[NodeSnapshot]) -> Vec<(String, Vec<Finding>)> {
    let mut across = checks::policy::across_nodes(snaps);
    snaps
        .iter()
        .map(|s| {
            let mut found = diagnose(s);
            found.extend(across.extract_if(.., |f| f.node == s.node));
            found.sort_by(|a, b| (a.kind, &a.objects).cmp(&(b.kind, &b.objects)));
            (s.node.clone(), found)
        })
        .collect()
}

/// Findings per kind, every kind present (zero when none): what the gauges export.
pub fn counts(findings: &[Finding]) -> Vec<(ProblemKind, usize)> {
    ProblemKind::ALL
        .iter()
        .map(|k| (*k, findings.iter().filter(|f| f.kind == *k).count()))
        .collect()
}
