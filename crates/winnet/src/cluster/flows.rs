//! The flow matrix of the Kubernetes "Networking on Windows" documentation, for a cluster as
//! built: which flows there are, and what the profile's Windows build says should happen to
//! each (a documented limitation is an expected failure, lifted under `unrestricted`).

use std::net::{IpAddr, Ipv4Addr};

use hns::{Limitation, Profile};
use serde::Serialize;

use super::topology::{HTTP_PORT, Mode, OUTSIDE_IP, Os, UDP_PORT, cluster_ip};
use super::{NS_PREFIX, State};

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
    /// Where to.
    pub to: IpAddr,
    pub port: u16,
    pub proto: Proto,
    /// Whether the profile's build carries it.
    pub expect_pass: bool,
    /// The limitation that makes it fail, if one does.
    pub limitation: Option<String>,
    /// The source address the receiver should see, when that is part of the flow's point.
    pub expect_source: Option<IpAddr>,
}

fn flow(name: &str, from: &str, netns: &str, to: IpAddr, port: u16, proto: Proto) -> Flow {
    Flow {
        name: name.into(),
        from: from.into(),
        netns: netns.into(),
        to,
        port,
        proto,
        expect_pass: true,
        limitation: None,
        expect_source: None,
    }
}

impl Flow {
    fn unless(mut self, profile: Profile, l: Limitation) -> Flow {
        if profile.imposes(l) {
            self.expect_pass = false;
            self.limitation = Some(l.as_str().to_string());
        }
        self
    }

    fn seen_as(mut self, ip: IpAddr) -> Flow {
        self.expect_source = Some(ip);
        self
    }
}

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
        out.push(flow(
            "pod -> ClusterIP",
            &client.name,
            &client.netns,
            cluster_ip,
            s.port,
            Proto::Tcp,
        ));
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
    out
}
