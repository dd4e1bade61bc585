//! A snapshot with the indexes the checks share: pod endpoints, remote endpoints, endpoints by
//! IP, objects by ID.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use hcn::{Endpoint, LoadBalancer, NamespaceType};

use crate::finding::{Finding, ObjectRef, ProblemKind, Repair};
use crate::snapshot::{NodeSnapshot, Pod};

/// The snapshot being checked, indexed.
pub struct Node<'a> {
    pub snap: &'a NodeSnapshot,
    /// Local endpoints attached to a pod's (guest) namespace, with that namespace's netns path.
    pub pod_endpoints: Vec<(&'a Endpoint, String)>,
    /// Endpoints flagged IsRemoteEndpoint (kube-proxy's, for backends on other nodes).
    pub remote_endpoints: Vec<&'a Endpoint>,
    /// Every endpoint by each of its IPs.
    pub by_ip: BTreeMap<IpAddr, Vec<&'a Endpoint>>,
    /// Every HNS object ID (all kinds), lower case.
    pub ids: HashSet<String>,
    /// Endpoints by ID.
    pub endpoints: HashMap<String, &'a Endpoint>,
}

impl<'a> Node<'a> {
    pub fn new(snap: &'a NodeSnapshot) -> Node<'a> {
        let hns = &snap.hns;
        let mut pod_endpoints = Vec::new();
        let mut remote_endpoints = Vec::new();
        let mut by_ip: BTreeMap<IpAddr, Vec<&Endpoint>> = BTreeMap::new();
        for e in &hns.endpoints {
            for ip in e.ips() {
                by_ip.entry(ip).or_default().push(e);
            }
            if e.is_remote() {
                remote_endpoints.push(e);
                continue;
            }
            let ns = hns
                .namespaces
                .iter()
                .find(|n| n.id == e.host_compute_namespace && !e.host_compute_namespace.is_nil());
            if let Some(ns) = ns
                && !matches!(
                    ns.namespace_type,
                    Some(NamespaceType::Host | NamespaceType::HostDefault)
                )
            {
                pod_endpoints.push((e, netns_path(ns)));
            }
        }
        let ids = hns
            .networks
            .iter()
            .map(|o| o.id.to_string())
            .chain(hns.endpoints.iter().map(|o| o.id.to_string()))
            .chain(hns.namespaces.iter().map(|o| o.id.to_string()))
            .chain(hns.load_balancers.iter().map(|o| o.id.to_string()))
            .chain(hns.routes.iter().map(|o| o.id.to_string()))
            .map(|s| s.to_ascii_lowercase())
            .collect();
        let endpoints = hns
            .endpoints
            .iter()
            .map(|e| (e.id.to_string().to_ascii_lowercase(), e))
            .collect();
        Node {
            snap,
            pod_endpoints,
            remote_endpoints,
            by_ip,
            ids,
            endpoints,
        }
    }

    /// The pod of this node with address `ip`.
    pub fn pod_with_ip(&self, ip: IpAddr) -> Option<&'a Pod> {
        self.snap.kube.pods.iter().find(|p| p.ip == Some(ip))
    }

    /// A finding on this node.
    pub fn finding(
        &self,
        kind: ProblemKind,
        summary: String,
        objects: Vec<ObjectRef>,
        breaks: String,
        fix: String,
    ) -> Finding {
        Finding {
            kind,
            node: self.snap.node.clone(),
            summary,
            objects,
            breaks,
            fix,
            source: None,
            repair: None,
        }
    }
}

/// The netns path of a HostComputeNamespace: its `LinuxNetns`, else the one hnsd makes
/// (`/run/netns/hcn-<id>`).
pub fn netns_path(ns: &hcn::Namespace) -> String {
    if ns.linux_netns.is_empty() {
        format!("/run/netns/{}{}", NETNS_PREFIX, ns.id)
    } else {
        ns.linux_netns.clone()
    }
}

/// The prefix of the namespaces hnsd makes for HostComputeNamespaces created without one.
pub const NETNS_PREFIX: &str = "hcn-";

/// An endpoint as a finding names it.
pub fn endpoint_ref(e: &Endpoint) -> ObjectRef {
    let ips: Vec<String> = e.ips().map(|i| i.to_string()).collect();
    let side = if e.is_remote() { "remote" } else { "local" };
    ObjectRef::new(
        "Endpoint",
        e.id.to_string(),
        format!("{} {side} {}", e.name, ips.join(",")),
    )
}

/// A load balancer as a finding names it: its frontend and the Service kube-proxy labelled.
pub fn lb_ref(lb: &LoadBalancer) -> ObjectRef {
    let mut detail = frontend_text(lb);
    if !lb.linux_service.is_empty() {
        detail = format!("{detail} for {}", lb.linux_service);
    }
    ObjectRef::new("LoadBalancer", lb.id.to_string(), detail)
}

/// `VIP:port/PROTO` of a load balancer (`*:port` for a NodePort on every node address).
pub fn frontend_text(lb: &LoadBalancer) -> String {
    let vip = lb
        .frontend_vips
        .first()
        .map_or("*".to_string(), |v| host(*v));
    match lb.port_mappings.first() {
        Some(pm) => format!("{vip}:{}/{}", pm.external_port, proto_name(pm.protocol)),
        None => vip,
    }
}

/// An address as it stands before `:port`: IPv6 in brackets.
pub fn host(ip: std::net::IpAddr) -> String {
    if ip.is_ipv6() {
        format!("[{ip}]")
    } else {
        ip.to_string()
    }
}

/// The name of an IP protocol number.
pub fn proto_name(p: u32) -> String {
    match p {
        6 => "TCP".into(),
        17 => "UDP".into(),
        132 => "SCTP".into(),
        1 => "ICMP".into(),
        n => n.to_string(),
    }
}

/// The repair of a stale remote endpoint.
pub fn delete_endpoint(e: &Endpoint) -> Repair {
    Repair::DeleteEndpoint {
        id: e.id.to_string(),
        ip: e.ips().map(|i| i.to_string()).collect::<Vec<_>>().join(","),
    }
}
