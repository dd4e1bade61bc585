//! The flow matrix of the Kubernetes "Networking on Windows" documentation, for a cluster as
//! built: which flows there are, and what the profile's Windows build says should happen to
//! each (a documented limitation is an expected failure, lifted under `unrestricted`).

use std::net::{IpAddr, Ipv4Addr};

use hns::{Limitation, Profile};
use serde::Serialize;

use super::topology::{
    CLUSTER_DOMAIN, EXTERNAL_IP, EXTERNAL_NAME_SERVICE, EXTERNAL_ZONE, EndpointState,
    HEADLESS_SERVICE, HTTP_PORT, Mode, NAMESPACE, OUTSIDE_IP, Os, UDP_PORT, cluster_ip,
};
use super::{NS_PREFIX, NodeState, PodState, State};

/// The transport of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
    Icmp,
}

/// One cell of the matrix.
#[derive(Clone, Debug, Serialize)]
pub struct Flow {
    /// What the documentation calls it.
    pub name: String,
    /// Who sends (pod, node or `external`).
    pub from: String,
    /// The namespace the client runs in.
    #[serde(skip)]
    pub netns: String,
    /// Where to: the address, or for a flow by name the address the name must lead to.
    pub to: IpAddr,
    /// The DNS name the client uses instead of the address (resolved by its pod's resolver).
    pub to_name: Option<String>,
    pub port: u16,
    pub proto: Proto,
    /// Whether the profile's build carries it.
    pub expect_pass: bool,
    /// The limitation that makes it fail, if one does.
    pub limitation: Option<String>,
    /// The source address the receiver should see, when that is part of the flow's point.
    pub expect_source: Option<IpAddr>,
    /// The source the receiver sees is the flow's point: it is carried only when the receiver
    /// sees `expect_source` (client address preservation), not merely when it answers.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub source_is_the_point: bool,
    /// Make this many connections; the flow is carried when every one reaches the same
    /// backend (session affinity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<u16>,
    /// The destination address the receiver must see (preserve-destination: the ingress IP,
    /// not its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect_destination: Option<IpAddr>,
    /// The HTTP status the answer must carry (a health check node port: 200 or 503).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<u16>,
    /// Run in the in-memory cluster only (its Service has more backends than the real cluster
    /// makes); the real cluster marks it skipped.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub in_memory_only: bool,
    /// What is done around the flow (an ACL row: a lone Block, an ACL update).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<super::policy_rows::Step>,
}

pub(super) fn flow(
    name: &str,
    from: &str,
    netns: &str,
    to: IpAddr,
    port: u16,
    proto: Proto,
) -> Flow {
    Flow {
        name: name.into(),
        from: from.into(),
        netns: netns.into(),
        to,
        to_name: None,
        port,
        proto,
        expect_pass: true,
        limitation: None,
        expect_source: None,
        source_is_the_point: false,
        connections: None,
        expect_destination: None,
        expect_status: None,
        in_memory_only: false,
        step: None,
    }
}

impl Flow {
    /// It may run at the same time as the other such flows: it changes nothing and asks
    /// nothing of what came before it (an ACL step changes an endpoint; the connections of a
    /// session-affinity flow must meet the same state one after another).
    pub fn runs_alongside(&self) -> bool {
        self.step.is_none() && self.connections.is_none()
    }

    pub(super) fn unless(mut self, profile: Profile, l: Limitation) -> Flow {
        if profile.imposes(l) {
            self.expect_pass = false;
            self.limitation = Some(l.as_str().to_string());
        }
        self
    }

    /// The same flow by `name`, which must lead to its address.
    fn by_name(mut self, name: &str) -> Flow {
        self.to_name = Some(name.to_string());
        self
    }

    fn seen_as(mut self, ip: IpAddr) -> Flow {
        self.expect_source = Some(ip);
        self
    }

    /// Carried only when the receiver sees the client as `ip`.
    fn keeps_client(mut self, ip: IpAddr) -> Flow {
        self.expect_source = Some(ip);
        self.source_is_the_point = true;
        self
    }

    /// The receiver must see `ip` as the destination.
    fn keeps_destination(mut self, ip: IpAddr) -> Flow {
        self.expect_destination = Some(ip);
        self
    }

    /// The answer must carry HTTP status `status`.
    fn answers(mut self, status: u16) -> Flow {
        self.expect_status = Some(status);
        self
    }

    /// An externalTrafficPolicy Local flow to a node with a local backend: the backend sees
    /// the client. winkernel makes such load balancers DSR whenever HNS has DSR
    /// (`localTrafficDSR`, whatever `--enable-dsr` says); where it has none, the profile's
    /// [`Limitation::LocalTrafficWithoutDsr`] says whether the client is kept.
    fn local_policy(self, profile: Profile, client: IpAddr) -> Flow {
        let f = self.keeps_client(client);
        if profile.features().dsr {
            f
        } else {
            f.unless(profile, Limitation::LocalTrafficWithoutDsr)
        }
    }

    /// Expected not to be carried, for `why` (Kubernetes semantics, not a Windows limitation).
    fn refused(mut self, why: &str) -> Flow {
        self.expect_pass = false;
        self.limitation = Some(why.to_string());
        self
    }

    /// `n` connections that must all reach one backend, which the profile's HNS does only
    /// from 12.0 (ws2022): earlier builds have no session affinity.
    fn sticky(mut self, n: u16, profile: Profile) -> Flow {
        self.connections = Some(n);
        if !profile.features().session_affinity {
            self.expect_pass = false;
            self.limitation = Some("NoSessionAffinity".into());
        }
        self
    }
}

/// The Service past the backend limit: kube-proxy asks for one load balancer with one
/// backend more than the build's HNS takes (64 on ws2019 and ws2022, 1024 on ws2025), and
/// where the build has no limit with as many as the largest limit refuses; hnsd's profile
/// table says which ([`Profile::max_lb_backends`]). The in-memory cluster makes it; its
/// backends are addresses of the external host ([`backend_past_limit`]), remote endpoints as
/// pods on other nodes would be.
pub const BACKEND_LIMIT_SERVICE: &str = "big";
/// Its ClusterIP.
pub const BACKEND_LIMIT_VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 100);

/// How many backends the Service past the backend limit has under `profile`.
pub fn backends_past_limit(profile: Profile) -> usize {
    let largest = Profile::ALL
        .iter()
        .filter_map(|p| p.max_lb_backends())
        .max()
        .unwrap_or(0);
    profile.max_lb_backends().unwrap_or(largest) + 1
}

/// Backend `k` of that Service: 10.201.<k / 250>.<k % 250 + 1>, an address of the external host.
pub fn backend_past_limit(k: usize) -> Ipv4Addr {
    let k = u32::try_from(k).unwrap_or(u32::MAX);
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 201, 0, 1)) + (k / 250) * 256 + k % 250)
}

/// The port of the Service past the backend limit.
pub const HTTP_SERVICE_PORT: u16 = 80;

/// How many connections a session-affinity flow makes.
pub const STICKY_CONNECTIONS: u16 = 20;

/// The matrix for `state` under `profile`.
pub fn matrix(state: &State, profile: Profile) -> Vec<Flow> {
    let mut out = Vec::new();
    let wins: Vec<_> = state.nodes.iter().filter(|n| n.os == Os::Windows).collect();
    let linux = state.nodes.iter().find(|n| n.os == Os::Linux);
    let ext = format!("{NS_PREFIX}external");
    let Some(w1) = wins.first() else {
        return out;
    };
    let (Some(p1), p1b) = (w1.pods.first(), w1.pods.get(1)) else {
        return out;
    };
    let ip = |a: Ipv4Addr| IpAddr::V4(a);
    let svc = state
        .topology
        .as_ref()
        .and_then(|t| t.services.first().cloned());
    if let Some(q) = p1b {
        out.push(
            flow(
                "pod -> pod, same node",
                &q.name,
                &q.netns,
                ip(p1.ip),
                HTTP_PORT,
                Proto::Tcp,
            )
            .seen_as(ip(q.ip)),
        );
    }
    if let Some(w2) = wins.get(1)
        && let Some(p2) = w2.pods.first()
    {
        out.push(
            flow(
                "pod -> pod, across Windows nodes",
                &p1.name,
                &p1.netns,
                ip(p2.ip),
                HTTP_PORT,
                Proto::Tcp,
            )
            .seen_as(ip(p1.ip)),
        );
    }
    if let Some(l) = linux
        && let Some(pl) = l.pods.first()
    {
        out.push(
            flow(
                "Windows pod -> Linux pod",
                &p1.name,
                &p1.netns,
                ip(pl.ip),
                HTTP_PORT,
                Proto::Tcp,
            )
            .seen_as(ip(p1.ip)),
        );
        out.push(
            flow(
                "Linux pod -> Windows pod",
                &pl.name,
                &pl.netns,
                ip(p1.ip),
                HTTP_PORT,
                Proto::Tcp,
            )
            .seen_as(ip(pl.ip)),
        );
    }
    if let Some(s) = &svc {
        let cluster_ip = ip(cluster_ip(0).unwrap_or(Ipv4Addr::UNSPECIFIED));
        let client = p1b.unwrap_or(p1);
        let to_cluster_ip = flow(
            "pod -> ClusterIP",
            &client.name,
            &client.netns,
            cluster_ip,
            s.port,
            Proto::Tcp,
        );
        // With DSR (kube-proxy's --enable-dsr, where HNS has DSR) the backend sees the client
        // pod itself — unless the client is one of the Service's backends and the load balancer
        // sends it back to itself, which loopback DSR translates to the node's address.
        let dsr = state.topology.as_ref().is_some_and(|t| t.dsr) && profile.features().dsr;
        out.push(if dsr && !client.name.starts_with(&s.selector) {
            to_cluster_ip.seen_as(ip(client.ip))
        } else {
            to_cluster_ip
        });
        if let Some(pl) = linux.and_then(|l| l.pods.first()) {
            out.push(flow(
                "Linux pod -> ClusterIP",
                &pl.name,
                &pl.netns,
                cluster_ip,
                s.port,
                Proto::Tcp,
            ));
        }
        let services = state.topology.as_ref().map(|t| t.services.as_slice());
        for (k, sticky) in services.unwrap_or_default().iter().enumerate() {
            if !sticky.session_affinity {
                continue;
            }
            let Some(vip) = super::topology::cluster_ip(k) else {
                continue;
            };
            out.push(
                flow(
                    &format!("pod -> ClusterIP with ClientIP affinity ({})", sticky.name),
                    &client.name,
                    &client.netns,
                    ip(vip),
                    sticky.port,
                    Proto::Tcp,
                )
                .sticky(STICKY_CONNECTIONS, profile),
            );
        }
        for local in services.unwrap_or_default() {
            let (true, Some(np)) = (local.external_traffic_policy, local.node_port) else {
                continue;
            };
            for w in &wins {
                let has_backend = w.pods.iter().any(|p| p.name.starts_with(&local.selector));
                let name = format!(
                    "external -> NodePort, externalTrafficPolicy Local ({}), on {}",
                    local.name, w.name
                );
                let f = flow(&name, "external", &ext, ip(w.ip), np, Proto::Tcp);
                // Without a local backend the node has no load balancer for the port.
                out.push(if has_backend {
                    f.local_policy(profile, ip(EXTERNAL_IP))
                } else {
                    f.refused("NoLocalEndpoint")
                });
            }
        }
        if let Some(np) = s.node_port {
            for w in &wins {
                out.push(flow(
                    &format!("external -> NodePort on {}", w.name),
                    "external",
                    &ext,
                    ip(w.ip),
                    np,
                    Proto::Tcp,
                ));
            }
            out.push(
                flow(
                    "node -> NodePort on itself",
                    &w1.name,
                    &w1.netns,
                    ip(w1.ip),
                    np,
                    Proto::Tcp,
                )
                .unless(profile, Limitation::NodePortFromNode),
            );
        }
        if let Some(lb) = s.load_balancer_ip {
            out.push(flow(
                "external -> LoadBalancer ingress IP",
                "external",
                &ext,
                ip(lb),
                s.port,
                Proto::Tcp,
            ));
        }
        out.extend(traffic_policy_and_termination(state, &wins, client));
        out.push(
            flow(
                "node -> ClusterIP",
                &w1.name,
                &w1.netns,
                cluster_ip,
                s.port,
                Proto::Tcp,
            )
            .unless(profile, Limitation::ClusterIpFromNode),
        );
    }
    out.extend(preserve_destination_and_health_checks(state, profile));
    let outside = ip(OUTSIDE_IP);
    out.push(
        flow(
            "pod -> external by IP (TCP)",
            &p1.name,
            &p1.netns,
            outside,
            HTTP_PORT,
            Proto::Tcp,
        )
        .seen_as(ip(w1.ip)),
    );
    out.push(
        flow(
            "pod -> external by IP (UDP)",
            &p1.name,
            &p1.netns,
            outside,
            UDP_PORT,
            Proto::Udp,
        )
        .seen_as(ip(w1.ip)),
    );
    out.push(
        flow(
            "pod -> external by IP (ICMP)",
            &p1.name,
            &p1.netns,
            outside,
            0,
            Proto::Icmp,
        )
        .unless(profile, Limitation::IcmpThroughOutboundNat),
    );
    out.push(flow(
        "node -> pod on this node",
        &w1.name,
        &w1.netns,
        ip(p1.ip),
        HTTP_PORT,
        Proto::Tcp,
    ));
    if let Some(w2) = wins.get(1)
        && let Some(p2) = w2.pods.first()
    {
        let mode = state.topology.as_ref().map(|t| t.mode);
        let f = flow(
            "node -> pod on another node",
            &w1.name,
            &w1.netns,
            ip(p2.ip),
            HTTP_PORT,
            Proto::Tcp,
        );
        // Over VXLAN (overlay); host-gw routes the node's packets like any other.
        out.push(if mode == Some(Mode::Overlay) {
            f.unless(profile, Limitation::RemotePodFromNodeOnOverlay)
        } else {
            f
        });
    }
    out.push(
        flow(
            "pod -> node",
            &p1.name,
            &p1.netns,
            ip(w1.ip),
            HTTP_PORT,
            Proto::Tcp,
        )
        .seen_as(ip(p1.ip)),
    );
    let client = p1b.unwrap_or(p1);
    out.extend(by_name(state, profile, client, true));
    if let Some(pl) = linux.and_then(|l| l.pods.first()) {
        out.extend(by_name(state, profile, pl, false));
    }
    out.extend(dual_stack(state, profile));
    out.extend(super::policy_rows::rows(state, profile));
    out.push(backend_limit(client, profile));
    out
}

/// A pod to the ClusterIP of the Service past the backend limit: refused where the build has
/// a limit (HNS's "invalid number of destinations", so no load balancer), carried where it
/// has none.
fn backend_limit(client: &PodState, profile: Profile) -> Flow {
    let n = backends_past_limit(profile);
    let limit = profile
        .max_lb_backends()
        .map_or("no limit".to_string(), |m| format!("HNS takes {m}"));
    let mut f = flow(
        &format!("pod -> ClusterIP, {n} backends, {limit} ({BACKEND_LIMIT_SERVICE})"),
        &client.name,
        &client.netns,
        IpAddr::V4(BACKEND_LIMIT_VIP),
        HTTP_SERVICE_PORT,
        Proto::Tcp,
    );
    f.in_memory_only = true;
    if profile.max_lb_backends().is_some() {
        f.expect_pass = false;
        f.limitation = Some("BackendLimit".into());
    }
    f
}

/// The dual-stack rows of a `dualStack` cluster (issue 15): IPv6 from a Windows pod to a pod
/// on its node and on the next Windows node, and to the IPv6 ClusterIP of every dual-stack
/// Service. The profile decides: kube-proxy programs IPv6 Services only with HNS's
/// IPv6DualStack (11.10, from ws2022), and on Overlay only where HNS carries IPv6 there
/// ([`Limitation::Ipv6OnOverlay`], which every Windows build has). Where a profile lifts it
/// (`unrestricted`), the operator makes the Overlay network dual-stack and sdnoverlay gives
/// pods both families (lab::dual_stack), so the rows are expected to work as on L2Bridge.
fn dual_stack(state: &State, profile: Profile) -> Vec<Flow> {
    let Some(t) = state.topology.as_ref().filter(|t| t.dual_stack) else {
        return Vec::new();
    };
    let wins: Vec<_> = state.nodes.iter().filter(|n| n.os == Os::Windows).collect();
    let Some(w1) = wins.first() else {
        return Vec::new();
    };
    let (Some(p1), Some(client)) = (w1.pods.first(), w1.pods.get(1)) else {
        return Vec::new();
    };
    // Where a pod has no IPv6 address (an overlay pod on Windows), the address its node's
    // IPv6 prefix would have given it: the row then shows the refusal.
    let v6 = |p: &PodState, node: &super::NodeState| -> IpAddr {
        IpAddr::V6(p.ip6.unwrap_or_else(|| {
            let prefix = node.subnet.map(super::topology::pod_prefix_v6);
            let host = u128::from(p.ip.octets()[3]);
            prefix.map_or(std::net::Ipv6Addr::UNSPECIFIED, |n| {
                std::net::Ipv6Addr::from(u128::from(n.network()) + host)
            })
        }))
    };
    let expect = |f: Flow| -> Flow {
        if t.mode == Mode::Overlay {
            return f.unless(profile, Limitation::Ipv6OnOverlay);
        }
        f
    };
    let from = v6(client, w1);
    let tcp = |name: &str, to: IpAddr, port: u16| {
        flow(name, &client.name, &client.netns, to, port, Proto::Tcp)
    };
    let mut out = vec![expect(
        tcp("IPv6 pod -> pod, same node", v6(p1, w1), HTTP_PORT).seen_as(from),
    )];
    if let Some(w2) = wins.get(1)
        && let Some(p2) = w2.pods.first()
    {
        out.push(expect(
            tcp(
                "IPv6 pod -> pod, across Windows nodes",
                v6(p2, w2),
                HTTP_PORT,
            )
            .seen_as(from),
        ));
    }
    for (k, s) in t.services.iter().enumerate() {
        let (true, Some(vip)) = (s.dual_stack(), super::topology::cluster_ip_v6(k)) else {
            continue;
        };
        let name = format!("IPv6 pod -> ClusterIP of a dual-stack Service ({})", s.name);
        let f = expect(tcp(&name, IpAddr::V6(vip), s.port));
        // kube-proxy's dual-stack mode needs HNS's IPv6DualStack (11.10); without it the
        // IPv6 ClusterIP is not programmed.
        out.push(if f.expect_pass && !profile.features().ipv6_dual_stack {
            f.refused("NoIpv6DualStack")
        } else {
            f
        });
    }
    out
}

/// The rows of `internalTrafficPolicy: Local` and of endpoints that are not ready, as
/// kube-proxy's winkernel proxier treats them (the same under every profile: these are
/// Kubernetes' rules and winkernel's, not a Windows build's). An ITP Local Service is asked
/// from a pod on each Windows node: it answers where the node has a backend, and elsewhere
/// its traffic is dropped. A Service whose endpoints are terminating but serving answers only
/// when it has a load balancer ingress IP (winkernel falls back to them only then); one whose
/// endpoints do not serve does not answer either, unless it has an ingress IP (winkernel then
/// filters no endpoint out).
fn traffic_policy_and_termination(
    state: &State,
    wins: &[&NodeState],
    client: &PodState,
) -> Vec<Flow> {
    let mut out = Vec::new();
    let services = state.topology.as_ref().map(|t| t.services.as_slice());
    for (k, s) in services.unwrap_or_default().iter().enumerate() {
        let Some(vip) = cluster_ip(k).map(IpAddr::V4) else {
            continue;
        };
        if s.internal_traffic_policy {
            for w in wins {
                let backend = |p: &&PodState| p.name.starts_with(&s.selector);
                let Some(from) = w.pods.iter().find(|p| !backend(p)) else {
                    continue;
                };
                let name = format!(
                    "pod -> ClusterIP, internalTrafficPolicy Local ({}), from {}",
                    s.name, w.name
                );
                let f = flow(&name, &from.name, &from.netns, vip, s.port, Proto::Tcp);
                out.push(if w.pods.iter().any(|p| backend(&p)) {
                    f
                } else {
                    f.refused("NoLocalEndpoint")
                });
            }
        }
        let ingress = s.load_balancer_ip.is_some();
        let (what, refusal) = match s.endpoints {
            EndpointState::Ready => continue,
            EndpointState::Terminating => ("every endpoint terminating", "NoReadyEndpoint"),
            EndpointState::NotServing => ("no endpoint serving", "NoServingEndpoint"),
        };
        let with = if ingress { ", with an ingress IP" } else { "" };
        let f = flow(
            &format!("pod -> ClusterIP, {what}{with} ({})", s.name),
            &client.name,
            &client.netns,
            vip,
            s.port,
            Proto::Tcp,
        );
        // With an ingress IP winkernel takes the serving ones when all are terminating, and
        // every endpoint when none serves; without one, only ready endpoints.
        out.push(if ingress { f } else { f.refused(refusal) });
        if let Some(lb) = s.load_balancer_ip {
            let ext = format!("{NS_PREFIX}external");
            out.push(flow(
                &format!("external -> LoadBalancer ingress IP, {what} ({})", s.name),
                "external",
                &ext,
                IpAddr::V4(lb),
                s.port,
                Proto::Tcp,
            ));
        }
    }
    out
}

/// The rows of the load-balancer Service settings (issue 15): through a preserve-destination
/// Service's ingress IP the backend sees the client and the ingress IP as the destination; an
/// externalTrafficPolicy Local Service's ingress IP keeps the client; and its health check
/// node port answers 200 on a node with a local backend, 503 on one without. The external
/// load balancer hands every ingress IP to the first Windows node.
fn preserve_destination_and_health_checks(state: &State, profile: Profile) -> Vec<Flow> {
    let mut out = Vec::new();
    let Some(t) = state.topology.as_ref() else {
        return out;
    };
    let ext = format!("{NS_PREFIX}external");
    let client = IpAddr::V4(EXTERNAL_IP);
    let first = state.nodes.iter().find(|n| n.os == Os::Windows);
    let local_on =
        |n: &super::NodeState, selector: &str| n.pods.iter().any(|p| p.name.starts_with(selector));
    for s in &t.services {
        let Some(lb) = s.load_balancer_ip else {
            continue;
        };
        let to_ingress = |what: &str| {
            let name = format!("external -> LoadBalancer ingress IP, {what} ({})", s.name);
            flow(&name, "external", &ext, IpAddr::V4(lb), s.port, Proto::Tcp)
        };
        if s.preserve_destination {
            // winkernel: DSR + PreserveDIP on the ingress load balancer when HNS has DSR
            // (whatever --enable-dsr says); else an ordinary, translated one.
            let f = to_ingress("preserve-destination");
            out.push(if profile.features().dsr {
                f.keeps_client(client).keeps_destination(IpAddr::V4(lb))
            } else {
                f
            });
        }
        if s.external_traffic_policy {
            let f = to_ingress("externalTrafficPolicy Local");
            out.push(if first.is_some_and(|n| local_on(n, &s.selector)) {
                f.local_policy(profile, client)
            } else {
                f.refused("NoLocalEndpoint")
            });
        }
        let Some(port) = t.health_check_port(s) else {
            continue;
        };
        for n in &state.nodes {
            let name = format!(
                "external -> health check node port ({}), on {}",
                s.name, n.name
            );
            let f = flow(&name, "external", &ext, IpAddr::V4(n.ip), port, Proto::Tcp);
            out.push(f.answers(if local_on(n, &s.selector) { 200 } else { 503 }));
        }
    }
    out
}

/// The flows by name from `client` (on a Windows node when `windows`): through its pod's
/// resolver (Windows nodes: hnsd's DNS client; Linux: glibc with kubelet's resolv.conf) to the
/// `kube-dns` Service. Names with a dot are not suffixed by the Windows DNS Client
/// ([`Limitation::WindowsDnsClient`]), so `web-2.peers` and `web.default` fail from a Windows
/// pod unless the profile lifts it.
fn by_name(state: &State, profile: Profile, client: &PodState, windows: bool) -> Vec<Flow> {
    let Some(s) = state.topology.as_ref().and_then(|t| t.services.first()) else {
        return Vec::new();
    };
    let who = if windows { "pod" } else { "Linux pod" };
    let rule = |f: Flow| {
        if windows {
            f.unless(profile, Limitation::WindowsDnsClient)
        } else {
            f
        }
    };
    let tcp = |what: &str, to: Ipv4Addr, port: u16, name: &str| {
        flow(
            &format!("{who} -> {what}"),
            &client.name,
            &client.netns,
            IpAddr::V4(to),
            port,
            Proto::Tcp,
        )
        .by_name(name)
    };
    let mut out = Vec::new();
    if let Some(peer) = headless_peer(state, &s.selector) {
        let short = format!("{}.{HEADLESS_SERVICE}", peer.name);
        let fqdn = format!("{short}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}");
        out.push(tcp("pod by name (FQDN)", peer.ip, HTTP_PORT, &fqdn));
        out.push(rule(tcp(
            "pod by name (host.svc)",
            peer.ip,
            HTTP_PORT,
            &short,
        )));
    }
    if let Some(vip) = cluster_ip(0) {
        let ns_name = format!("{}.{NAMESPACE}", s.name);
        let fqdn = format!("{ns_name}.svc.{CLUSTER_DOMAIN}");
        out.push(tcp("Service by single-label name", vip, s.port, &s.name));
        out.push(rule(tcp("Service by svc.namespace", vip, s.port, &ns_name)));
        out.push(tcp("Service by FQDN", vip, s.port, &fqdn));
    }
    let www = format!("www.{EXTERNAL_ZONE}");
    out.push(tcp("external by DNS name", OUTSIDE_IP, HTTP_PORT, &www));
    out.push(tcp(
        "ExternalName Service",
        OUTSIDE_IP,
        HTTP_PORT,
        EXTERNAL_NAME_SERVICE,
    ));
    out
}

/// The pod a headless-Service name points at: one of the first Service's pods, on the second
/// Windows node when there is one (so the flow crosses nodes).
fn headless_peer<'a>(state: &'a State, selector: &str) -> Option<&'a PodState> {
    let mut pods = state
        .nodes
        .iter()
        .filter(|n| n.os == Os::Windows)
        .flat_map(|n| {
            n.pods
                .iter()
                .filter(move |p| p.name.starts_with(selector))
                .map(move |p| (n, p))
        });
    let first = pods.next()?;
    Some(
        pods.find(|(n, _)| n.name != first.0.name)
            .unwrap_or(first)
            .1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeState;
    use crate::cluster::topology::Topology;

    fn state(profile: &str) -> State {
        state_with(
            profile,
            "services: [{name: web, selector: web, port: 80, targetPort: 8080}]\n",
        )
    }

    fn state_with(profile: &str, rest: &str) -> State {
        let t = Topology::parse(
            &format!(
                "mode: l2bridge\nprofile: {profile}\nnodes:\n\
                 - {{name: win-1, os: windows, pods: [web-1, client-1]}}\n\
                 - {{name: win-2, os: windows, pods: [web-2]}}\n\
                 - {{name: linux-1, os: linux, pods: [web-3]}}\n{rest}"
            ),
            "t",
        )
        .expect("topology");
        let node = |name: &str, os, k: u8, pods: &[&str]| NodeState {
            name: name.into(),
            os,
            netns: format!("wn-{name}"),
            ip: Ipv4Addr::new(192, 168, 77, k),
            mac: String::new(),
            subnet: None,
            source_vip: None,
            pods: pods
                .iter()
                .enumerate()
                .map(|(j, p)| {
                    PodState::new(
                        &lab::workloads::PodSpec::plain(p),
                        format!("wn-{name}-{p}"),
                        Ipv4Addr::new(10, 244, k, 10 + j as u8),
                        None,
                    )
                })
                .collect(),
        };
        State {
            topology: Some(t),
            nodes: vec![
                node("win-1", Os::Windows, 1, &["web-1", "client-1", "coredns-1"]),
                node("win-2", Os::Windows, 2, &["web-2", "coredns-2"]),
                node("linux-1", Os::Linux, 3, &["web-3"]),
            ],
            ..State::default()
        }
    }

    /// [`state`] on a dual-stack cluster in `mode`, with a dual-stack Service; the pods of
    /// Windows nodes have IPv6 addresses on L2Bridge only.
    fn dual_state(mode: &str, profile: &str) -> State {
        let mut st = state(profile);
        let mut t = st.topology.take().expect("topology");
        t.mode = mode.parse().expect("mode");
        t.dual_stack = true;
        let mut dual = t.services[0].clone();
        dual.name = "dual".into();
        dual.ip_family_policy = crate::cluster::topology::IpFamilyPolicy::RequireDualStack;
        t.services.push(dual);
        for n in &mut st.nodes {
            n.subnet = Some(
                ipnet::Ipv4Net::new(Ipv4Addr::new(10, 244, n.ip.octets()[3], 0), 24)
                    .expect("subnet"),
            );
            for p in &mut n.pods {
                if n.os == Os::Windows && t.mode == Mode::L2bridge {
                    let prefix = crate::cluster::topology::pod_prefix_v6(n.subnet.expect("subnet"));
                    p.ip6 = Some(std::net::Ipv6Addr::from(
                        u128::from(prefix.network()) + u128::from(p.ip.octets()[3]),
                    ));
                }
            }
        }
        st.topology = Some(t);
        st
    }

    fn ipv6_rows(flows: &[Flow]) -> Vec<(&str, bool, Option<&str>)> {
        flows
            .iter()
            .filter(|f| f.name.starts_with("IPv6"))
            .map(|f| (f.name.as_str(), f.expect_pass, f.limitation.as_deref()))
            .collect()
    }

    #[test]
    fn the_ipv6_rows_expect_what_the_profile_and_the_mode_say() {
        let st = dual_state("l2bridge", "ws2025");
        let flows = matrix(&st, Profile::Ws2025);
        let rows = ipv6_rows(&flows);
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert!(rows.iter().all(|r| r.1), "{rows:?}");
        let across = flows
            .iter()
            .find(|f| f.name == "IPv6 pod -> pod, across Windows nodes")
            .expect("row");
        assert_eq!(across.to, "fd00:10:244:2::a".parse::<IpAddr>().unwrap());
        assert_eq!(
            across.expect_source,
            Some("fd00:10:244:1::b".parse().unwrap()),
            "the receiver sees the client pod's own IPv6 address"
        );
        let vip = flows
            .iter()
            .find(|f| f.name.contains("dual-stack Service (dual)"))
            .expect("row");
        assert_eq!(vip.to, "fd00:10:96::101".parse::<IpAddr>().unwrap());

        let old = ipv6_rows(&matrix(&dual_state("l2bridge", "ws2019"), Profile::Ws2019))
            .into_iter()
            .filter(|r| !r.1)
            .map(|r| (r.0.to_string(), r.2.map(str::to_string)))
            .collect::<Vec<_>>();
        assert_eq!(
            old,
            [(
                "IPv6 pod -> ClusterIP of a dual-stack Service (dual)".to_string(),
                Some("NoIpv6DualStack".to_string())
            )]
        );
        let overlay = matrix(&dual_state("overlay", "ws2025"), Profile::Ws2025);
        assert!(
            ipv6_rows(&overlay)
                .iter()
                .all(|r| !r.1 && r.2 == Some("Ipv6OnOverlay")),
            "{overlay:?}"
        );
        let open = matrix(
            &dual_state("overlay", "unrestricted"),
            Profile::Unrestricted,
        );
        let open = ipv6_rows(&open);
        assert_eq!(open.len(), 3, "{open:?}");
        assert!(open.iter().all(|r| r.1), "{open:?}");
        assert!(ipv6_rows(&matrix(&state("ws2025"), Profile::Ws2025)).is_empty());
    }

    fn named(flows: &[Flow]) -> Vec<(String, String, bool, Option<String>, IpAddr)> {
        flows
            .iter()
            .filter_map(|f| {
                let n = f.to_name.clone()?;
                Some((f.from.clone(), n, f.expect_pass, f.limitation.clone(), f.to))
            })
            .collect()
    }

    #[test]
    fn a_windows_pod_fails_only_the_dotted_short_names_and_only_under_ws_profiles() {
        let rows = named(&matrix(&state("ws2022"), Profile::Ws2022));
        assert_eq!(rows.len(), 14, "seven names from each client: {rows:?}");
        let failing: Vec<(&str, &str)> = rows
            .iter()
            .filter(|r| !r.2)
            .map(|r| (r.0.as_str(), r.1.as_str()))
            .collect();
        assert_eq!(
            failing,
            [("client-1", "web-2.peers"), ("client-1", "web.default")]
        );
        assert!(
            rows.iter()
                .filter(|r| !r.2)
                .all(|r| r.3.as_deref() == Some("WindowsDnsClient"))
        );
        let peer = rows.iter().find(|r| r.1 == "web-2.peers").expect("row");
        assert_eq!(
            peer.4,
            IpAddr::V4(Ipv4Addr::new(10, 244, 2, 10)),
            "pod web-2"
        );
        let ext = rows.iter().find(|r| r.1 == "outside").expect("row");
        assert_eq!(ext.4, IpAddr::V4(OUTSIDE_IP));
        let open = named(&matrix(&state("unrestricted"), Profile::Unrestricted));
        assert!(open.iter().all(|r| r.2), "{open:?}");
    }

    #[test]
    fn the_load_balancer_rows_expect_what_winkernel_and_the_health_checks_give() {
        let services = "services:\n\
             - {name: web, selector: web, port: 80, targetPort: 8080}\n\
             - {name: local, selector: web-1, port: 80, targetPort: 8080, nodePort: 30081, externalTrafficPolicy: Local, loadBalancerIP: 192.168.77.201}\n\
             - {name: preserve, selector: web-1, port: 8080, targetPort: 8080, loadBalancerIP: 192.168.77.202, preserveDestination: true}\n";
        for (dsr, profile) in [("", Profile::Ws2025), ("dsr: false\n", Profile::Ws2019)] {
            let rows = matrix(
                &state_with(profile.as_str(), &format!("{dsr}{services}")),
                profile,
            );
            let row = |name: &str| {
                rows.iter()
                    .find(|f| f.name == name)
                    .unwrap_or_else(|| panic!("no row {name}: {rows:#?}"))
            };
            let cluster_ip = row("pod -> ClusterIP");
            assert_eq!(
                cluster_ip.expect_source.is_some(),
                dsr.is_empty(),
                "the client pod itself only with --enable-dsr: {cluster_ip:?}"
            );
            let preserve =
                row("external -> LoadBalancer ingress IP, preserve-destination (preserve)");
            assert_eq!(
                preserve.expect_destination,
                Some(IpAddr::V4(Ipv4Addr::new(192, 168, 77, 202)))
            );
            assert_eq!(preserve.expect_source, Some(IpAddr::V4(EXTERNAL_IP)));
            // DSR for ETP Local whatever --enable-dsr says (every profile's HNS has DSR).
            let local =
                row("external -> LoadBalancer ingress IP, externalTrafficPolicy Local (local)");
            assert!(local.expect_pass && local.source_is_the_point, "{local:?}");
            let health: Vec<(String, Option<u16>)> = rows
                .iter()
                .filter(|f| {
                    f.name
                        .starts_with("external -> health check node port (local)")
                })
                .map(|f| (f.to.to_string(), f.expect_status))
                .collect();
            assert_eq!(
                health,
                [
                    ("192.168.77.1".to_string(), Some(200)),
                    ("192.168.77.2".to_string(), Some(503)),
                    ("192.168.77.3".to_string(), Some(503)),
                ],
                "every node (the fixture's addresses), 200 only where the backend is"
            );
            assert!(rows.iter().all(|f| f.port != 0 || f.proto == Proto::Icmp));
        }
    }
}
