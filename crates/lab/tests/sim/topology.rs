//! The two-node clusters the flow tests run on: pods a and b on node1, pod d on node2, and
//! Services as kube-proxy would program them.
#![allow(dead_code)]

use std::net::IpAddr;

use hns::Profile;
use lab::sim::cluster::addr;
use lab::{Cluster, Exchange, PodOptions, Service, Who};

/// ClusterIP of the Service backed by pod b (on node1).
pub const WEB_LOCAL: &str = "10.96.0.10";
/// ClusterIP of the Service backed by pod d (on node2).
pub const WEB_REMOTE: &str = "10.96.0.20";
/// NodePort of the Service backed by pod b.
pub const NODE_PORT: u16 = 30080;
/// LoadBalancer ingress IP of the Service backed by pod b, routed by the router via node1.
pub const INGRESS: &str = "192.168.77.200";

/// A two-node cluster with three pods and two Services.
pub struct Topo {
    pub c: Cluster,
    pub a: Who,
    pub b: Who,
    pub d: Who,
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Which flannel backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    HostGw,
    Vxlan,
}

/// `nodes` Windows nodes of `profile` with their pod network made by flanneld's `backend`.
pub fn flannel_cluster(nodes: usize, profile: Profile, backend: Backend) -> Cluster {
    let mut c = Cluster::new(nodes, profile).unwrap();
    match backend {
        Backend::HostGw => c.flannel_host_gw().unwrap(),
        Backend::Vxlan => c.flannel_vxlan().unwrap(),
    }
    c
}

pub fn topo(backend: Backend, profile: Profile) -> Topo {
    let mut c = flannel_cluster(2, profile, backend);
    let a = c.add_pod(0, "a", PodOptions::default()).unwrap();
    let b = c.add_pod(0, "b", PodOptions::default()).unwrap();
    let d = c.add_pod(1, "d", PodOptions::default()).unwrap();
    let mut local = Service::tcp("default/web", ip(WEB_LOCAL), 80, 8080, vec![b]);
    local.node_port = Some(NODE_PORT);
    local.ingress_ip = Some(ip(INGRESS));
    c.add_service(&local).unwrap();
    c.add_service(&Service::tcp(
        "default/api",
        ip(WEB_REMOTE),
        80,
        8080,
        vec![d],
    ))
    .unwrap();
    c.external_route(format!("{INGRESS}/32").parse().unwrap(), addr::node(0));
    Topo { c, a, b, d }
}

impl Topo {
    pub fn ip(&self, w: Who) -> IpAddr {
        self.c.ip_of(w).unwrap()
    }
}

/// Asserts the request arrived at `at` from `src` to `dst:port`, and the client got its answer.
pub fn delivered(ex: &Exchange, at: Who, src: IpAddr, dst: IpAddr, port: u16) {
    let (who, p) = ex
        .request
        .as_ref()
        .unwrap_or_else(|| panic!("not delivered:\n{ex}"));
    assert_eq!(*who, at, "arrived elsewhere:\n{ex}");
    assert_eq!(p.src, src, "source as seen by the receiver:\n{ex}");
    assert_eq!(p.dst, dst, "destination as seen by the receiver:\n{ex}");
    assert_eq!(p.dst_port(), port, "port as seen by the receiver:\n{ex}");
    assert!(ex.ok(), "no reply:\n{ex}");
    assert!(ex.drops.is_empty(), "drops:\n{ex}");
}
