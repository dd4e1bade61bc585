//! The nftables table of a Linux node: Kubernetes' NetworkPolicy semantics, as
//! kube-network-policies enforces them, on the forwarded packets of the node's pods. Replies of
//! an allowed connection pass (conntrack); each local pod a policy isolates gets a chain per
//! isolated direction where every allowed peer and port `return`s and the rest is dropped; the
//! source's egress chain is passed before the destination's ingress chain. Peers are named
//! sets of addresses (pods' addresses, ipBlock CIDRs and their excepts).

use std::collections::BTreeSet;
use std::fmt::Write;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::cluster::Cluster;
use crate::model::{Direction, Peer, Pod, Policy, Port, PortMatch, Protocol, Rule};

/// The agent's own table (family `inet`); nothing else is touched.
pub const TABLE: &str = "winnet-policy";

/// The whole table for the pods of `node`.
pub fn ruleset(cluster: &Cluster, node: &str) -> String {
    let mut sets = String::new();
    let mut chains = String::new();
    let mut jumps = String::new();
    for pod in cluster.local_pods(node) {
        for dir in [Direction::Ingress, Direction::Egress] {
            let policies: Vec<(usize, &Policy)> = cluster
                .policies
                .iter()
                .enumerate()
                .filter(|(_, p)| p.selects(pod) && p.rules(dir).is_some())
                .collect();
            if policies.is_empty() {
                continue;
            }
            let chain = format!("{}-{}", dir.name(), pod.key());
            for ip in &pod.ips {
                let side = match dir {
                    Direction::Ingress => "daddr",
                    Direction::Egress => "saddr",
                };
                let _ = writeln!(jumps, "\t\t{} {side} {ip} jump {chain}", family(ip));
            }
            let mut body = String::new();
            for (i, policy) in policies {
                let rules = policy.rules(dir).unwrap_or_default();
                for (r, rule) in rules.iter().enumerate() {
                    let tag = format!("{chain}/{i}/{r}");
                    let ctx = RuleContext {
                        cluster,
                        policy,
                        pod,
                        dir,
                        tag: &tag,
                    };
                    rule_lines(&ctx, rule, &mut sets, &mut body);
                }
            }
            let _ = write!(
                chains,
                "\tchain {chain} {{\n{body}\t\tdrop comment \"isolated by NetworkPolicy\"\n\t}}\n"
            );
        }
    }
    // Egress jumps first: the source's policies decide before the destination's.
    let (egress, ingress): (Vec<&str>, Vec<&str>) =
        jumps.lines().partition(|l| l.contains("jump egress-"));
    let mut forward = String::new();
    for l in egress.into_iter().chain(ingress) {
        let _ = writeln!(forward, "{l}");
    }
    format!(
        "table inet {TABLE} {{\n{sets}\tchain forward {{\n\t\ttype filter hook forward priority filter - 5; policy accept;\n\t\tct state established,related accept\n{forward}\t}}\n{chains}}}\n"
    )
}

fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "ip" } else { "ip6" }
}

struct RuleContext<'a> {
    cluster: &'a Cluster,
    policy: &'a Policy,
    /// The local pod whose chain this is.
    pod: &'a Pod,
    dir: Direction,
    tag: &'a str,
}

/// The peer's side of a packet in this direction.
fn remote(dir: Direction) -> &'static str {
    match dir {
        Direction::Ingress => "saddr",
        Direction::Egress => "daddr",
    }
}

/// The lines of one rule: one per peer match and port.
fn rule_lines(ctx: &RuleContext<'_>, rule: &Rule, sets: &mut String, out: &mut String) {
    let peers: Vec<Vec<String>> = if rule.peers.is_empty() {
        vec![vec![String::new()]]
    } else {
        rule.peers
            .iter()
            .enumerate()
            .map(|(i, p)| peer_matches(ctx, p, &format!("{}/{i}", ctx.tag), sets))
            .collect()
    };
    let any_port = [None];
    let ports: Vec<Option<&Port>> = if rule.ports.is_empty() {
        any_port.to_vec()
    } else {
        rule.ports.iter().map(Some).collect()
    };
    for (i, matches) in peers.iter().enumerate() {
        let peer = rule.peers.get(i);
        for m in matches {
            for port in &ports {
                for p in port_matches(ctx, peer, *port) {
                    let _ = writeln!(out, "\t\t{m}{p}return");
                }
            }
        }
    }
}

/// The address matches of a peer (one per family it has addresses of; none matches nothing).
fn peer_matches(ctx: &RuleContext<'_>, peer: &Peer, name: &str, sets: &mut String) -> Vec<String> {
    let side = remote(ctx.dir);
    let (include, except): (Vec<IpNet>, Vec<IpNet>) = match peer {
        Peer::IpBlock { cidr, except } => (vec![*cidr], except.clone()),
        Peer::Pods { .. } => {
            let ips = ctx
                .cluster
                .peer_pods(ctx.policy, peer)
                .flat_map(|p| p.ips.iter().map(|ip| IpNet::from(*ip)));
            (
                ips.collect::<BTreeSet<_>>().into_iter().collect(),
                Vec::new(),
            )
        }
    };
    let mut out = Vec::new();
    for (fam, v4) in [("ip", true), ("ip6", false)] {
        let of = |l: &[IpNet]| -> Vec<IpNet> {
            l.iter()
                .filter(|n| matches!(n, IpNet::V4(_)) == v4)
                .copied()
                .collect()
        };
        let (inc, exc) = (of(&include), of(&except));
        if inc.is_empty() {
            continue;
        }
        let set = format!("{name}/{fam}");
        define_set(sets, &set, v4, &inc);
        let mut m = format!("{fam} {side} @{set} ");
        if !exc.is_empty() {
            let ex = format!("{set}/except");
            define_set(sets, &ex, v4, &exc);
            m.push_str(&format!("{fam} {side} != @{ex} "));
        }
        out.push(m);
    }
    out
}

fn define_set(sets: &mut String, name: &str, v4: bool, members: &[IpNet]) {
    let kind = if v4 { "ipv4_addr" } else { "ipv6_addr" };
    let elements: Vec<String> = members.iter().map(ToString::to_string).collect();
    let _ = write!(
        sets,
        "\tset {name} {{\n\t\ttype {kind}\n\t\tflags interval\n\t\tauto-merge\n\t\telements = {{ {} }}\n\t}}\n",
        elements.join(", ")
    );
}

fn proto(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// The port matches of a ports entry (empty strings: any); a named port resolves on the
/// destination pod: this pod inbound, each peer pod that has it outbound.
fn port_matches(ctx: &RuleContext<'_>, peer: Option<&Peer>, port: Option<&Port>) -> Vec<String> {
    let Some(port) = port else {
        return vec![String::new()];
    };
    let p = proto(port.protocol);
    match &port.port {
        PortMatch::Any => vec![format!("meta l4proto {p} ")],
        PortMatch::Range { first, last } if first == last => vec![format!("{p} dport {first} ")],
        PortMatch::Range { first, last } => vec![format!("{p} dport {first}-{last} ")],
        PortMatch::Named(name) => match ctx.dir {
            Direction::Ingress => ctx
                .pod
                .named_port(name, port.protocol)
                .map(|n| format!("{p} dport {n} "))
                .into_iter()
                .collect(),
            Direction::Egress => ctx
                .cluster
                .pods
                .iter()
                .filter_map(|d| Some((d, d.named_port(name, port.protocol)?)))
                .flat_map(|(d, n)| d.ips.iter().map(move |ip| (*ip, n)))
                .filter(|(ip, _)| peer.is_none_or(|peer| peer_has(ctx, peer, *ip)))
                .map(|(ip, n)| format!("{} daddr {ip} {p} dport {n} ", family(&ip)))
                .collect(),
        },
    }
}

fn peer_has(ctx: &RuleContext<'_>, peer: &Peer, ip: IpAddr) -> bool {
    match peer {
        Peer::IpBlock { cidr, except } => {
            cidr.contains(&ip) && !except.iter().any(|e| e.contains(&ip))
        }
        Peer::Pods { .. } => ctx
            .cluster
            .pod_by_ip(ip)
            .is_some_and(|p| ctx.cluster.peer_has_pod(ctx.policy, peer, p)),
    }
}
