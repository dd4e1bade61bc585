//! `--style npm`: NetworkPolicies as Azure NPM's Windows dataplane programs them. Peers become
//! network `SetPolicy` sets (`ns-<ns>`, `podlabel-<k>:<v>`, `nslabel-<k>:<v>` of namespace
//! sets, `all-namespaces`, `<policy>-in-ns-<ns>-<rule>-<peer>IN|OUT` for ipBlocks), named in
//! ACL addresses by ID; every ACL of a policy carries `Id` `azure-acl-<ns>-<name>`; Allow at
//! 222, a Block closing each isolated direction at 3000. A policy with a construct NPM refuses
//! on Windows (named port, NotIn/DoesNotExist, SCTP, except) is not applied at all.
//!
//! Two choices of winnet's, where NPM's own mapping cannot be enforced as written: addresses
//! follow HNS's convention (Local = the endpoint, Remote = the peer; NPM writes source and
//! destination, which its own tests mark as wrong), and a peer that NPM matches with several
//! sets at once (a namespace and labels) is one set holding their intersection, since an ACL
//! address list is a union.

use std::collections::{BTreeMap, BTreeSet};

use hcn::policy::{AclAction, AclDirection, PortRange};
use ipnet::IpNet;

use crate::acl::{Acl, IpSet, SetKind, set_id};
use crate::cluster::Cluster;
use crate::model::{
    Direction, Namespaces, Operator, Peer, Pod, Policy, PortMatch, Protocol, Selector,
};
use crate::problem::{Construct, Effect, Problem, Style};

pub const ALLOW_PRIORITY: u16 = 222;
pub const BLOCK_PRIORITY: u16 = 3000;

/// The ACL `Id` of every rule of a policy.
pub fn acl_id(p: &Policy) -> String {
    format!("azure-acl-{}-{}", p.namespace, p.name)
}

/// What NPM refuses in `p` (empty: it applies the policy).
pub fn refused(p: &Policy) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut push = |direction, rule, peer, construct| {
        out.push(Problem {
            policy: p.key(),
            direction,
            rule,
            peer,
            construct,
            effect: Effect::PolicySkipped,
            style: Style::Npm,
        })
    };
    if p.selector.has_negative() {
        push(None, None, None, Construct::NegativeSelector);
    }
    for dir in [Direction::Ingress, Direction::Egress] {
        for (r, rule) in p.rules(dir).unwrap_or_default().iter().enumerate() {
            for port in &rule.ports {
                if let PortMatch::Named(n) = &port.port {
                    push(Some(dir), Some(r), None, Construct::NamedPort(n.clone()));
                }
                if port.protocol == Protocol::Sctp {
                    push(Some(dir), Some(r), None, Construct::Sctp);
                }
            }
            for (i, peer) in rule.peers.iter().enumerate() {
                match peer {
                    Peer::IpBlock { except, .. } if !except.is_empty() => {
                        push(Some(dir), Some(r), Some(i), Construct::Except)
                    }
                    Peer::IpBlock {
                        cidr: IpNet::V6(_), ..
                    } => push(Some(dir), Some(r), Some(i), Construct::Ipv6),
                    Peer::Pods { namespaces, pods } => {
                        let ns_negative =
                            matches!(namespaces, Namespaces::Selected(s) if s.has_negative());
                        if ns_negative || pods.as_ref().is_some_and(Selector::has_negative) {
                            push(Some(dir), Some(r), Some(i), Construct::NegativeSelector)
                        }
                    }
                    Peer::IpBlock { .. } => {}
                }
            }
        }
    }
    out
}

/// The sets a plan names, by name.
#[derive(Default)]
pub struct Sets {
    pub by_name: BTreeMap<String, IpSet>,
}

impl Sets {
    fn ip_set(&mut self, name: String, members: BTreeSet<String>) -> String {
        self.insert(name, SetKind::IpSet, members)
    }

    fn insert(&mut self, name: String, kind: SetKind, members: BTreeSet<String>) -> String {
        let id = set_id(&name);
        self.by_name.insert(
            name.clone(),
            IpSet {
                id: id.clone(),
                name,
                kind,
                members: members.into_iter().collect(),
            },
        );
        id
    }

    /// Plain sets first, then nested ones (HNS needs members before the lists naming them).
    pub fn ordered(self) -> Vec<IpSet> {
        let mut v: Vec<IpSet> = self.by_name.into_values().collect();
        v.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        v
    }
}

fn v4_addresses<'a>(pods: impl Iterator<Item = &'a Pod>) -> BTreeSet<String> {
    pods.flat_map(|p| p.ips.iter())
        .filter(|ip| ip.is_ipv4())
        .map(ToString::to_string)
        .collect()
}

/// The set named for one requirement of a pod selector, and the addresses it holds.
fn label_set(
    sets: &mut Sets,
    cluster: &Cluster,
    req: &crate::model::Requirement,
) -> (String, BTreeSet<String>) {
    let of = |key: &str, value: Option<&str>| -> BTreeSet<String> {
        v4_addresses(cluster.pods.iter().filter(|p| match value {
            Some(v) => p.labels.get(key).map(String::as_str) == Some(v),
            None => p.labels.contains_key(key),
        }))
    };
    match (req.operator, req.values.len()) {
        (Operator::In, 1) => {
            let v = req.values.iter().next().map(String::as_str);
            let name = format!("podlabel-{}:{}", req.key, v.unwrap_or_default());
            let members = of(&req.key, v);
            sets.ip_set(name.clone(), members.clone());
            (name, members)
        }
        (Operator::In, _) => {
            let mut ids = BTreeSet::new();
            let mut all = BTreeSet::new();
            for v in &req.values {
                let members = of(&req.key, Some(v));
                all.extend(members.iter().cloned());
                ids.insert(sets.ip_set(format!("podlabel-{}:{v}", req.key), members));
            }
            let values: Vec<&str> = req.values.iter().map(String::as_str).collect();
            let name = format!("nestedlabel-{}:{}", req.key, values.join(":"));
            sets.insert(name.clone(), SetKind::Nested, ids);
            (name, all)
        }
        // Exists (negative operators are refused before).
        _ => {
            let name = format!("podlabel-{}", req.key);
            let members = of(&req.key, None);
            sets.ip_set(name.clone(), members.clone());
            (name, members)
        }
    }
}

/// The namespace sets a namespace selector names, and the addresses of their pods.
fn namespace_sets(
    sets: &mut Sets,
    cluster: &Cluster,
    sel: &Selector,
) -> Vec<(String, BTreeSet<String>)> {
    let mut ns_names: BTreeSet<String> = cluster.namespaces.keys().cloned().collect();
    ns_names.extend(cluster.pods.iter().map(|p| p.namespace.clone()));
    let ns_set = |sets: &mut Sets, ns: &str| -> (String, BTreeSet<String>) {
        let members = v4_addresses(cluster.pods.iter().filter(|p| p.namespace == ns));
        (sets.ip_set(format!("ns-{ns}"), members.clone()), members)
    };
    let list = |sets: &mut Sets, name: String, wanted: &dyn Fn(&str) -> bool| {
        let mut ids = BTreeSet::new();
        let mut all = BTreeSet::new();
        for ns in ns_names.iter().filter(|n| wanted(n)) {
            let (id, members) = ns_set(sets, ns);
            ids.insert(id);
            all.extend(members);
        }
        sets.insert(name.clone(), SetKind::Nested, ids);
        (name, all)
    };
    if sel.is_everything() {
        return vec![list(sets, "all-namespaces".into(), &|_| true)];
    }
    sel.requirements
        .iter()
        .map(|req| {
            let label = match (req.operator, req.values.len()) {
                (Operator::In, 1) => format!(
                    "{}:{}",
                    req.key,
                    req.values
                        .iter()
                        .next()
                        .map(String::as_str)
                        .unwrap_or_default()
                ),
                (Operator::In, _) => format!(
                    "{}:{}",
                    req.key,
                    req.values.iter().cloned().collect::<Vec<_>>().join(":")
                ),
                _ => req.key.clone(),
            };
            let wanted = |ns: &str| req.matches(&cluster.namespace_labels(ns));
            list(sets, format!("nslabel-{label}"), &wanted)
        })
        .collect()
}

/// The set ID an ACL names for `peer`.
fn peer_set(
    sets: &mut Sets,
    cluster: &Cluster,
    policy: &Policy,
    peer: &Peer,
    dir: Direction,
    rule: usize,
    index: usize,
) -> String {
    let mut parts: Vec<(String, BTreeSet<String>)> = Vec::new();
    match peer {
        Peer::IpBlock { cidr, .. } => {
            let suffix = match dir {
                Direction::Ingress => "IN",
                Direction::Egress => "OUT",
            };
            let name = format!(
                "{}-in-ns-{}-{rule}-{index}{suffix}",
                policy.name, policy.namespace
            );
            return sets.ip_set(name, BTreeSet::from([cidr.to_string()]));
        }
        Peer::Pods { namespaces, pods } => {
            match namespaces {
                Namespaces::Own => {
                    let ns = &policy.namespace;
                    let members = v4_addresses(cluster.pods.iter().filter(|p| &p.namespace == ns));
                    sets.ip_set(format!("ns-{ns}"), members.clone());
                    parts.push((format!("ns-{ns}"), members));
                }
                Namespaces::Selected(sel) => parts.extend(namespace_sets(sets, cluster, sel)),
            }
            for req in pods.iter().flat_map(|s| s.requirements.iter()) {
                parts.push(label_set(sets, cluster, req));
            }
        }
    }
    if parts.len() == 1 {
        return set_id(&parts[0].0);
    }
    let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
    let mut both = parts[0].1.clone();
    for (_, m) in &parts[1..] {
        both.retain(|a| m.contains(a));
    }
    sets.ip_set(names.join("&"), both)
}

/// The ACLs of `policy` on one endpoint it selects.
pub fn policy_acls(sets: &mut Sets, cluster: &Cluster, policy: &Policy) -> Vec<Acl> {
    policy_acls_by_rule(sets, cluster, policy)
        .into_iter()
        .map(|(_, _, acl)| acl)
        .collect()
}

/// [`policy_acls`], each ACL with the direction and the index of the rule that made it
/// (`None`: the Block closing the direction).
pub fn policy_acls_by_rule(
    sets: &mut Sets,
    cluster: &Cluster,
    policy: &Policy,
) -> Vec<(Direction, Option<usize>, Acl)> {
    let mut out = Vec::new();
    let id = acl_id(policy);
    for dir in [Direction::Ingress, Direction::Egress] {
        let Some(rules) = policy.rules(dir) else {
            continue;
        };
        let direction = match dir {
            Direction::Ingress => AclDirection::In,
            Direction::Egress => AclDirection::Out,
        };
        for (r, rule) in rules.iter().enumerate() {
            let remotes: Vec<Vec<String>> = if rule.peers.is_empty() {
                vec![Vec::new()]
            } else {
                rule.peers
                    .iter()
                    .enumerate()
                    .map(|(i, p)| vec![peer_set(sets, cluster, policy, p, dir, r, i)])
                    .collect()
            };
            let ports: Vec<(Option<u8>, Vec<PortRange>)> = if rule.ports.is_empty() {
                vec![(None, Vec::new())]
            } else {
                rule.ports
                    .iter()
                    .map(|p| (Some(p.protocol.number()), expand(&p.port)))
                    .collect()
            };
            for remote in &remotes {
                for (protocol, port_list) in &ports {
                    let mut acl = Acl::any(AclAction::Allow, direction, ALLOW_PRIORITY);
                    acl.id = id.clone();
                    acl.protocol = *protocol;
                    acl.remote_addresses = remote.clone();
                    // The destination port: the endpoint's inbound, the peer's outbound.
                    match dir {
                        Direction::Ingress => acl.local_ports = port_list.clone(),
                        Direction::Egress => acl.remote_ports = port_list.clone(),
                    }
                    out.push((dir, Some(r), acl));
                }
            }
        }
        let mut block = Acl::any(AclAction::Block, direction, BLOCK_PRIORITY);
        block.id = id.clone();
        out.push((dir, None, block));
    }
    out
}

/// A port entry as NPM writes it: each port of a range listed (`80,81,82`).
fn expand(p: &PortMatch) -> Vec<PortRange> {
    match p {
        PortMatch::Range { first, last } => (*first..=*last).map(PortRange::one).collect(),
        PortMatch::Any | PortMatch::Named(_) => Vec::new(),
    }
}
