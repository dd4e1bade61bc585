//! `--style calico`: NetworkPolicies as Calico turns them into its own rules (one rule per
//! peer and protocol; a named port a rule of its own; `except` as a negated net; selectors as
//! IP sets of the pods they select), rendered by felix's Windows dataplane ([`super::felix`]):
//! per endpoint the node -> endpoint Allow, then each direction's list closed by a Block. A
//! direction no policy isolates gets the namespace profile's Allow-all before its Block.

use std::collections::BTreeMap;

use ipnet::IpNet;

use super::felix::{self, CalicoRule, PolicySet};
use crate::acl::Acl;
use crate::cluster::Cluster;
use crate::model::{Direction, Peer, Pod, Policy, PortMatch, Protocol, Rule};
use crate::problem::{Construct, Effect, Problem, Style};

/// Felix's policy set ID of a NetworkPolicy (`policy-<ns>/knp.default.<name>`).
pub fn policy_set_id(p: &Policy) -> String {
    format!("policy-{}/knp.default.{}", p.namespace, p.name)
}

/// Felix's policy set ID of a namespace's profile.
pub fn profile_set_id(namespace: &str) -> String {
    format!("profile-kns.{namespace}")
}

/// The Calico rules of one policy and direction, with what felix will skip.
pub fn calico_rules(
    cluster: &Cluster,
    policy: &Policy,
    dir: Direction,
    problems: &mut Vec<Problem>,
) -> Vec<CalicoRule> {
    let mut out = Vec::new();
    for (r, rule) in policy.rules(dir).unwrap_or_default().iter().enumerate() {
        let groups = port_groups(rule);
        let peers: Vec<Option<&Peer>> = if rule.peers.is_empty() {
            vec![None]
        } else {
            rule.peers.iter().map(Some).collect()
        };
        for (p, peer) in peers.iter().enumerate() {
            for (g, group) in groups.iter().enumerate() {
                let mut c = CalicoRule::allow(format!("{}{r}.{p}.{g}", prefix(dir)));
                c.protocol = group.protocol.map(Protocol::number);
                c.dst_ports = group.ports.clone();
                let place = |construct| Problem {
                    policy: policy.key(),
                    direction: Some(dir),
                    rule: Some(r),
                    peer: peer.is_some().then_some(p),
                    construct,
                    effect: Effect::RuleSkipped,
                    style: Style::Calico,
                };
                if let Some(name) = &group.named {
                    c.named_ports = true;
                    problems.push(place(Construct::NamedPort(name.clone())));
                }
                if let Some(peer) = peer {
                    peer_match(cluster, policy, peer, dir, &mut c);
                    if !c.not_src_net.is_empty() || !c.not_dst_net.is_empty() {
                        problems.push(place(Construct::Except));
                    }
                    if let Peer::IpBlock {
                        cidr: IpNet::V6(_), ..
                    } = peer
                    {
                        problems.push(place(Construct::Ipv6));
                    }
                }
                out.push(c);
            }
        }
    }
    out
}

fn prefix(dir: Direction) -> &'static str {
    match dir {
        Direction::Ingress => "in",
        Direction::Egress => "eg",
    }
}

/// The peer as the rule's source (ingress) or destination (egress).
fn peer_match(cluster: &Cluster, policy: &Policy, peer: &Peer, dir: Direction, c: &mut CalicoRule) {
    let (nets, not_nets, set) = match dir {
        Direction::Ingress => (&mut c.src_net, &mut c.not_src_net, &mut c.src_ip_set),
        Direction::Egress => (&mut c.dst_net, &mut c.not_dst_net, &mut c.dst_ip_set),
    };
    match peer {
        Peer::IpBlock { cidr, except } => {
            nets.push(*cidr);
            not_nets.extend(except.iter().copied());
            if matches!(cidr, IpNet::V6(_)) {
                c.ip_version = 6;
            }
        }
        Peer::Pods { .. } => {
            let members = cluster
                .peer_pods(policy, peer)
                .flat_map(|pod| pod.ips.iter().map(|ip| IpNet::from(*ip)))
                .collect();
            *set = Some(members);
        }
    }
}

/// A rule's ports as Calico splits them: one group per protocol with its numbered ports
/// (none: every port), and one per named port.
struct PortGroup {
    protocol: Option<Protocol>,
    ports: Vec<hcn::policy::PortRange>,
    named: Option<String>,
}

fn port_groups(rule: &Rule) -> Vec<PortGroup> {
    if rule.ports.is_empty() {
        return vec![PortGroup {
            protocol: None,
            ports: Vec::new(),
            named: None,
        }];
    }
    let mut numbered: Vec<(Protocol, Option<Vec<hcn::policy::PortRange>>)> = Vec::new();
    let mut named = Vec::new();
    for port in &rule.ports {
        let range = match &port.port {
            PortMatch::Named(n) => {
                named.push(PortGroup {
                    protocol: Some(port.protocol),
                    ports: Vec::new(),
                    named: Some(n.clone()),
                });
                continue;
            }
            PortMatch::Any => None,
            PortMatch::Range { first, last } => Some(hcn::policy::PortRange {
                first: *first,
                last: *last,
            }),
        };
        let at = match numbered.iter().position(|(p, _)| *p == port.protocol) {
            Some(i) => i,
            None => {
                numbered.push((port.protocol, Some(Vec::new())));
                numbered.len() - 1
            }
        };
        // Every port of the protocol absorbs its listed ones.
        match (&mut numbered[at].1, range) {
            (Some(list), Some(r)) => list.push(r),
            (slot, None) => *slot = None,
            (None, Some(_)) => {}
        }
    }
    let mut groups: Vec<PortGroup> = numbered
        .into_iter()
        .map(|(protocol, ports)| PortGroup {
            protocol: Some(protocol),
            ports: ports.unwrap_or_default(),
            named: None,
        })
        .collect();
    groups.extend(named);
    groups
}

/// The whole ACL list of `pod`'s endpoint.
pub fn endpoint_acls(
    cluster: &Cluster,
    pod: &Pod,
    host_addresses: &[IpNet],
    rules: &BTreeMap<(String, Direction), Vec<CalicoRule>>,
) -> Vec<Acl> {
    let mut acls: Vec<Acl> = felix::host_to_endpoint(host_addresses)
        .into_iter()
        .collect();
    let profile_rules = [CalicoRule::allow("allow-all")];
    let profile = profile_set_id(&pod.namespace);
    for dir in [Direction::Ingress, Direction::Egress] {
        let selecting: Vec<(String, &Policy)> = cluster
            .policies
            .iter()
            .filter(|p| p.selects(pod) && p.rules(dir).is_some())
            .map(|p| (policy_set_id(p), p))
            .collect();
        let sets: Vec<PolicySet<'_>> = if selecting.is_empty() {
            vec![PolicySet {
                id: &profile,
                rules: &profile_rules,
            }]
        } else {
            selecting
                .iter()
                .map(|(id, p)| PolicySet {
                    id,
                    rules: rules
                        .get(&(p.key(), dir))
                        .map(Vec::as_slice)
                        .unwrap_or_default(),
                })
                .collect()
        };
        acls.extend(felix::direction_rules(&sets, dir == Direction::Ingress));
    }
    acls
}
