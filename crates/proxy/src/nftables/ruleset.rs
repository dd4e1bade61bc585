//! The nftables ruleset of kube-proxy's `nftables` mode for one node, as a pure function of the
//! Services and EndpointSlices: one table per family (`ip kube-proxy`, `ip6 kube-proxy`) laid
//! out as kube-proxy lays it out — a `services` dispatch chain on the nat hooks, a chain per
//! service port that picks an endpoint at random (or the client's last one, with ClientIP
//! affinity), a chain per endpoint that DNATs to it, an `external-` chain per service port for
//! NodePorts, external IPs and load-balancer ingress IPs (masqueraded unless
//! externalTrafficPolicy is Local, which keeps only this node's endpoints), the masquerade mark
//! on the way out, and a reject for Services without endpoints.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::model::{Endpoint, Protocol, Service, ServicePort, ServiceType, Slice};
use crate::source::Snapshot;

/// The table kube-proxy owns in each family.
pub const TABLE: &str = "kube-proxy";
/// The packet mark that asks for masquerading on the way out (kube-proxy's bit 14).
const MASQUERADE_MARK: &str = "0x4000";
/// How long a client's affinity to an endpoint lasts (`sessionAffinityConfig`'s default).
const AFFINITY_SECONDS: u32 = 10800;

/// What the ruleset needs to know about this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinuxNode {
    /// This node's name (`--hostname-override`): endpoints with this `nodeName` are local.
    pub hostname: String,
    /// The pod network (`--cluster-cidr`): ClusterIP traffic from outside it is masqueraded.
    pub cluster_cidrs: Vec<IpNet>,
}

/// An address family's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn nft(self) -> &'static str {
        match self {
            Family::V4 => "ip",
            Family::V6 => "ip6",
        }
    }

    fn holds(self, ip: &IpAddr) -> bool {
        ip.is_ipv6() == (self == Family::V6)
    }

    fn loopback(self) -> &'static str {
        match self {
            Family::V4 => "127.0.0.0/8",
            Family::V6 => "::1",
        }
    }
}

/// One endpoint of a service port: its address and the port it listens on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Target {
    ip: IpAddr,
    port: u16,
    local: bool,
}

/// The whole ruleset for `snapshot` on `node`: both families' tables.
pub fn ruleset(snapshot: &Snapshot, node: &LinuxNode) -> String {
    let by_service = snapshot.slices_by_service();
    [Family::V4, Family::V6]
        .into_iter()
        .map(|family| {
            let services = snapshot.services.values().map(|svc| {
                let slices = by_service.get(&svc.key).cloned().unwrap_or_default();
                (svc, slices)
            });
            table(family, services, node)
        })
        .collect()
}

/// The chains and sets of one family's table.
#[derive(Default)]
struct Table {
    dispatch: Vec<String>,
    rejects: Vec<String>,
    chains: BTreeMap<String, Vec<String>>,
    sets: Vec<String>,
}

fn table<'a>(
    family: Family,
    services: impl Iterator<Item = (&'a Service, Vec<&'a Slice>)>,
    node: &LinuxNode,
) -> String {
    let mut t = Table::default();
    for (svc, slices) in services {
        if svc.service_type == ServiceType::ExternalName {
            continue;
        }
        let Some(vip) = svc.cluster_ips.iter().copied().find(|ip| family.holds(ip)) else {
            continue; // Headless, or no address of this family.
        };
        let slices: Vec<&Slice> = slices
            .into_iter()
            .filter(|s| s.ipv6 == (family == Family::V6))
            .collect();
        for port in &svc.ports {
            service_port(&mut t, family, svc, port, vip, &slices, node);
        }
    }
    render(family, &t)
}

#[allow(clippy::too_many_arguments)]
fn service_port(
    t: &mut Table,
    family: Family,
    svc: &Service,
    port: &ServicePort,
    vip: IpAddr,
    slices: &[&Slice],
    node: &LinuxNode,
) {
    let f = family.nft();
    let proto = match port.protocol {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    };
    let id = format!(
        "{}/{}/{proto}/{}",
        svc.key.namespace,
        svc.key.name,
        if port.name.is_empty() {
            format!("p{}", port.port)
        } else {
            port.name.clone()
        }
    );
    let targets = targets(port, slices, node);
    let externals: Vec<String> = svc
        .external_ips
        .iter()
        .chain(&svc.ingress_ips)
        .filter(|ip| family.holds(ip))
        .map(|ip| format!("{f} daddr {ip} {proto} dport {}", port.port))
        .chain(
            port.node_port
                .filter(|_| svc.service_type != ServiceType::ClusterIp)
                .map(|np| {
                    format!(
                        "fib daddr type local {f} daddr != {} {proto} dport {np}",
                        family.loopback()
                    )
                }),
        )
        .collect();
    let cluster_ip = format!("{f} daddr {vip} {proto} dport {}", port.port);
    if targets.is_empty() {
        // kube-proxy's "has no endpoints": refused, not left to time out.
        t.rejects.extend(
            std::iter::once(&cluster_ip)
                .chain(&externals)
                .map(|m| format!("{m} reject comment \"{id} has no endpoints\"")),
        );
        return;
    }
    let service = format!("service-{id}");
    let cluster: Vec<&Target> = targets
        .iter()
        .filter(|e| !svc.internal_policy_local || e.local)
        .collect();
    let mut chain = Vec::new();
    if !node.cluster_cidrs.is_empty() {
        let pods = cidrs(family, &node.cluster_cidrs);
        if !pods.is_empty() {
            chain.push(format!(
                "{f} saddr != {{ {pods} }} jump mark-for-masquerade"
            ));
        }
    }
    chain.extend(pick(t, family, &id, &cluster, svc.session_affinity, proto));
    t.chains.insert(service.clone(), chain);
    t.dispatch.push(format!("{cluster_ip} goto {service}"));
    if externals.is_empty() {
        return;
    }
    let external = format!("external-{id}");
    let mut chain = Vec::new();
    if svc.external_policy_local {
        // Pods and the node itself reach the Service as if by its ClusterIP; others only this
        // node's endpoints, keeping their address.
        let pods = cidrs(family, &node.cluster_cidrs);
        if !pods.is_empty() {
            chain.push(format!("{f} saddr {{ {pods} }} goto {service}"));
        }
        chain.push("fib saddr type local jump mark-for-masquerade".into());
        chain.push(format!("fib saddr type local goto {service}"));
        let local: Vec<&Target> = targets.iter().filter(|e| e.local).collect();
        let local_chain = format!("local-{id}");
        let picked = pick(t, family, &id, &local, svc.session_affinity, proto);
        t.chains.insert(local_chain.clone(), picked);
        chain.push(format!("goto {local_chain}"));
    } else {
        chain.push("jump mark-for-masquerade".into());
        chain.push(format!("goto {service}"));
    }
    t.chains.insert(external.clone(), chain);
    t.dispatch
        .extend(externals.iter().map(|m| format!("{m} goto {external}")));
}

/// The endpoints of one service port with the port each listens on: ready ones, else (all
/// terminating) the serving ones, as kube-proxy categorizes them.
fn targets(port: &ServicePort, slices: &[&Slice], node: &LinuxNode) -> Vec<Target> {
    let mut all: Vec<(&Endpoint, u16)> = Vec::new();
    for slice in slices {
        let Some(sp) = slice
            .ports
            .iter()
            .find(|p| p.name == port.name && p.protocol == port.protocol)
        else {
            continue;
        };
        all.extend(slice.endpoints.iter().map(|e| (e, sp.port)));
    }
    let ready: Vec<&(&Endpoint, u16)> = all.iter().filter(|(e, _)| e.ready).collect();
    let usable = if ready.is_empty() {
        all.iter().filter(|(e, _)| e.serving).collect()
    } else {
        ready
    };
    let mut out: Vec<Target> = usable
        .into_iter()
        .map(|(e, p)| Target {
            ip: e.ip,
            port: *p,
            local: e.node_name.as_deref() == Some(node.hostname.as_str()),
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The rules that send a connection to one of `targets` (making their endpoint chains): the
/// client's affinity first, then a random pick; `drop` when there is none.
fn pick(
    t: &mut Table,
    family: Family,
    id: &str,
    targets: &[&Target],
    affinity: bool,
    proto: &str,
) -> Vec<String> {
    if targets.is_empty() {
        return vec![format!("drop comment \"{id} has no local endpoints\"")];
    }
    let f = family.nft();
    let mut rules = Vec::new();
    let mut arms = Vec::new();
    for (k, e) in targets.iter().enumerate() {
        let name = endpoint_chain(id, e);
        let set = format!("affinity-{}", &name["endpoint-".len()..]);
        let mut chain = vec![format!("{f} saddr {} jump mark-for-masquerade", e.ip)];
        if affinity {
            chain.push(format!("update @{set} {{ {f} saddr }}"));
            rules.push(format!("{f} saddr @{set} goto {name}"));
            let kind = match family {
                Family::V4 => "ipv4_addr",
                Family::V6 => "ipv6_addr",
            };
            t.sets.push(format!(
                "set {set} {{\n    type {kind}\n    flags dynamic,timeout\n    timeout {AFFINITY_SECONDS}s\n  }}"
            ));
        }
        let to = match e.ip {
            IpAddr::V4(ip) => format!("{ip}:{}", e.port),
            IpAddr::V6(ip) => format!("[{ip}]:{}", e.port),
        };
        chain.push(format!("meta l4proto {proto} dnat to {to}"));
        t.chains.insert(name.clone(), chain);
        arms.push(format!("{k} : goto {name}"));
    }
    rules.push(format!(
        "numgen random mod {} vmap {{ {} }}",
        targets.len(),
        arms.join(", ")
    ));
    rules
}

/// An endpoint's chain name (nftables names take no `:`, so an IPv6 address's become `.`).
fn endpoint_chain(id: &str, e: &Target) -> String {
    let ip = e.ip.to_string().replace(':', ".");
    format!("endpoint-{id}__{ip}/{}", e.port)
}

fn cidrs(family: Family, nets: &[IpNet]) -> String {
    nets.iter()
        .filter(|n| family.holds(&n.addr()))
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn render(family: Family, t: &Table) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "table {} {TABLE} {{", family.nft());
    let _ = writeln!(
        out,
        "  comment \"rendered by winnet proxy --proxy-mode nftables\""
    );
    for s in &t.sets {
        let _ = writeln!(out, "  {s}");
    }
    let mut chain = |name: &str, hook: Option<&str>, rules: &[String]| {
        let _ = writeln!(out, "  chain {name} {{");
        if let Some(h) = hook {
            let _ = writeln!(out, "    {h}");
        }
        for r in rules {
            let _ = writeln!(out, "    {r}");
        }
        let _ = writeln!(out, "  }}");
    };
    chain(
        "mark-for-masquerade",
        None,
        &[format!("meta mark set meta mark | {MASQUERADE_MARK}")],
    );
    chain(
        "masquerading",
        None,
        &[
            format!("meta mark & {MASQUERADE_MARK} == 0 return"),
            format!("meta mark set meta mark ^ {MASQUERADE_MARK}"),
            "masquerade fully-random".into(),
        ],
    );
    let nat =
        |hook: &str, prio: &str| format!("type nat hook {hook} priority {prio}; policy accept;");
    // Numbers, not names: nft takes `dstnat` only on prerouting. -100 is dstnat's value; the
    // filter chains run just before it, while a Service address is still the destination.
    let filter = |hook: &str| format!("type filter hook {hook} priority -110; policy accept;");
    let jump_services = ["jump services".to_string()];
    chain(
        "nat-prerouting",
        Some(&nat("prerouting", "dstnat")),
        &jump_services,
    );
    chain("nat-output", Some(&nat("output", "-100")), &jump_services);
    chain(
        "nat-postrouting",
        Some(&nat("postrouting", "srcnat")),
        &["jump masquerading".to_string()],
    );
    let check = ["ct state new jump endpoints-check".to_string()];
    for hook in ["input", "forward", "output"] {
        chain(&format!("filter-{hook}"), Some(&filter(hook)), &check);
    }
    chain("endpoints-check", None, &t.rejects);
    chain("services", None, &t.dispatch);
    for (name, rules) in &t.chains {
        chain(name, None, rules);
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{endpoint, service, snapshot};

    fn node() -> LinuxNode {
        LinuxNode {
            hostname: "linux-1".into(),
            cluster_cidrs: vec!["10.244.0.0/16".parse().expect("cidr")],
        }
    }

    /// The chain named `name` of the IPv4 table, its rules one a line.
    fn chain<'a>(rules: &'a str, name: &str) -> Vec<&'a str> {
        rules
            .lines()
            .skip_while(|l| l.trim() != format!("chain {name} {{"))
            .skip(1)
            .take_while(|l| l.trim() != "}")
            .map(str::trim)
            .collect()
    }

    #[test]
    fn a_cluster_ip_picks_an_endpoint_at_random_and_dnats_to_it() {
        let snap = snapshot(
            vec![service("web", "10.96.1.1")],
            &[(
                "web",
                vec![
                    endpoint("10.244.1.10", "win-1"),
                    endpoint("10.244.3.10", "linux-1"),
                ],
            )],
        );
        let r = ruleset(&snap, &node());
        assert_eq!(
            chain(&r, "services"),
            ["ip daddr 10.96.1.1 tcp dport 80 goto service-default/web/tcp/http"]
        );
        assert_eq!(
            chain(&r, "service-default/web/tcp/http"),
            [
                "ip saddr != { 10.244.0.0/16 } jump mark-for-masquerade",
                "numgen random mod 2 vmap { 0 : goto endpoint-default/web/tcp/http__10.244.1.10/8080, 1 : goto endpoint-default/web/tcp/http__10.244.3.10/8080 }",
            ]
        );
        assert_eq!(
            chain(&r, "endpoint-default/web/tcp/http__10.244.3.10/8080"),
            [
                "ip saddr 10.244.3.10 jump mark-for-masquerade",
                "meta l4proto tcp dnat to 10.244.3.10:8080",
            ]
        );
        assert!(r.contains("table ip6 kube-proxy {"), "both families: {r}");
        assert!(
            chain(&r, "endpoints-check").is_empty(),
            "nothing is refused: {r}"
        );
    }

    #[test]
    fn a_service_without_endpoints_is_refused_not_left_to_time_out() {
        let r = ruleset(&snapshot(vec![service("gone", "10.96.1.9")], &[]), &node());
        assert_eq!(
            chain(&r, "endpoints-check"),
            [
                "ip daddr 10.96.1.9 tcp dport 80 reject comment \"default/gone/tcp/http has no endpoints\""
            ]
        );
        assert!(chain(&r, "services").is_empty());
    }

    #[test]
    fn external_traffic_policy_local_keeps_the_client_on_this_nodes_endpoints_only() {
        let mut svc = service("local", "10.96.1.3");
        svc.service_type = ServiceType::LoadBalancer;
        svc.ports[0].node_port = Some(30081);
        svc.ingress_ips = vec!["192.168.77.201".parse().expect("ip")];
        svc.external_policy_local = true;
        let eps = vec![
            endpoint("10.244.1.10", "win-1"),
            endpoint("10.244.3.10", "linux-1"),
        ];
        let r = ruleset(
            &snapshot(vec![svc.clone()], &[("local", eps.clone())]),
            &node(),
        );
        assert_eq!(
            chain(&r, "services"),
            [
                "ip daddr 10.96.1.3 tcp dport 80 goto service-default/local/tcp/http",
                "ip daddr 192.168.77.201 tcp dport 80 goto external-default/local/tcp/http",
                "fib daddr type local ip daddr != 127.0.0.0/8 tcp dport 30081 goto external-default/local/tcp/http",
            ]
        );
        let external = chain(&r, "external-default/local/tcp/http");
        assert_eq!(external.last(), Some(&"goto local-default/local/tcp/http"));
        assert_eq!(
            chain(&r, "local-default/local/tcp/http"),
            [
                "numgen random mod 1 vmap { 0 : goto endpoint-default/local/tcp/http__10.244.3.10/8080 }"
            ],
            "only linux-1's endpoint, and no masquerade mark on the way"
        );
        svc.external_policy_local = false;
        let r = ruleset(&snapshot(vec![svc], &[("local", eps)]), &node());
        assert_eq!(
            chain(&r, "external-default/local/tcp/http"),
            [
                "jump mark-for-masquerade",
                "goto service-default/local/tcp/http"
            ]
        );
    }

    #[test]
    fn client_ip_affinity_sends_a_client_back_to_its_last_endpoint() {
        let mut svc = service("sticky", "10.96.1.2");
        svc.session_affinity = true;
        let r = ruleset(
            &snapshot(
                vec![svc],
                &[("sticky", vec![endpoint("10.244.1.10", "win-1")])],
            ),
            &node(),
        );
        let set = "affinity-default/sticky/tcp/http__10.244.1.10/8080";
        assert!(r.contains(&format!("set {set} {{")), "{r}");
        assert_eq!(
            chain(&r, "service-default/sticky/tcp/http")[1],
            format!("ip saddr @{set} goto endpoint-default/sticky/tcp/http__10.244.1.10/8080")
        );
        assert!(
            chain(&r, "endpoint-default/sticky/tcp/http__10.244.1.10/8080")
                .contains(&format!("update @{set} {{ ip saddr }}").as_str())
        );
    }
}
