//! What the doctor knows of one node: the Kubernetes objects that concern it, its HNS objects,
//! its compiled switch and its kernel side. Plain data (serde), so a snapshot taken live and
//! one read back from a bundle are the same value, and the checks give the same findings.

use std::net::IpAddr;

use hcn::{Endpoint, LoadBalancer, Namespace, Network, SdnRoute};
use hns_client::switch::SwitchDump;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// One node, every layer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeSnapshot {
    /// The node's name, as Kubernetes knows it.
    pub node: String,
    /// The Windows build reproduced, and what it documents as unsupported.
    pub profile: ProfileFacts,
    /// The cluster's address plan, as kube-proxy and the CNI config are given it.
    pub cluster: ClusterFacts,
    /// Services (with their endpoints) and the pods of this node.
    pub kube: KubeView,
    /// The node's HNS objects as hnsd lists them.
    pub hns: HnsView,
    /// The compiled switch; `None` when hnsd has no data plane.
    pub switch: Option<SwitchDump>,
    /// Devices, addresses, routes, neighbours and resolv.conf; `None` when not collected.
    pub kernel: Option<KernelView>,
    /// flannel's leases and this node's subnet.env; `None` when flannel is not known (the
    /// flannel checks are skipped, not passed).
    pub flannel: Option<FlannelView>,
    /// The cluster DNS's answers for the Services' names; `None` when not asked (the DNS
    /// checks are skipped, not passed).
    pub dns: Option<DnsView>,
    /// What the node's NetworkPolicy agent plans; `None` when no NetworkPolicy source is known
    /// or neither NetworkPolicies nor agent ACLs are there (the plan checks are skipped).
    pub policy: Option<crate::planned::PolicyView>,
}

/// The cluster DNS as a pod of this node sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DnsView {
    /// The cluster DNS Service's ClusterIP (`kube-system/kube-dns`), asked on port 53.
    pub server: Option<IpAddr>,
    /// The network namespace the questions were asked from (a pod's).
    pub asked_from: String,
    /// One per Service with a ClusterIP and per family of its ClusterIPs.
    pub answers: Vec<DnsAnswer>,
}

/// The answer to `name` (A or AAAA).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DnsAnswer {
    /// The Service's `namespace/name`.
    pub service: String,
    /// `name.namespace.svc.DOMAIN.`
    pub name: String,
    /// `A` or `AAAA`.
    pub qtype: String,
    /// The addresses answered.
    pub addresses: Vec<IpAddr>,
    /// What came instead of addresses (`NXDOMAIN`, `timeout`, ...).
    pub error: Option<String>,
}

/// What flanneld agreed with the other nodes (its leases, from its store) and wrote for the
/// CNI plugin on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FlannelView {
    /// This node's public IP, which its own lease carries.
    pub public_ip: Option<IpAddr>,
    /// Every node's lease.
    pub leases: Vec<FlannelLease>,
    /// Where flanneld writes subnet.env on this node.
    pub subnet_file: String,
    /// Its text; `None` when it is missing.
    pub subnet_env: Option<String>,
}

/// One node's flannel lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlannelLease {
    pub subnet: ipnet::Ipv4Net,
    pub public_ip: IpAddr,
    /// `host-gw` or `vxlan`.
    pub backend: String,
}

/// The profile's documented limits that the checks need.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProfileFacts {
    /// `ws2019`, `ws2022`, `ws2025` or `unrestricted`.
    pub name: String,
    /// Most backends one load balancer takes, when the profile has a limit.
    pub backend_limit: Option<usize>,
    /// The build does not carry ICMP through OutBoundNAT to remote networks.
    pub no_icmp_through_nat: bool,
    /// An endpoint with any ACL denies what no ACL allows (ws2025 after its 2026 updates).
    pub acl_default_deny: bool,
}

/// The cluster's address plan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterFacts {
    /// The pods' addresses (kube-proxy's `--cluster-cidr`).
    pub cluster_cidr: Option<IpNet>,
    /// The Services' ClusterIPs.
    pub service_cidr: Option<IpNet>,
}

/// The Kubernetes side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KubeView {
    /// False when the Services could not be read (hnsd's own gauges): the Service checks are
    /// skipped, not passed.
    pub services_known: bool,
    pub services: Vec<Service>,
    /// The pods of this node on the pod network (host-network pods are not here).
    pub pods: Vec<Pod>,
    /// False when the pods could not be listed: the pod checks are skipped, not passed.
    pub pods_known: bool,
}

/// A Service with the endpoints of its EndpointSlices.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    /// `ClusterIP`, `NodePort`, `LoadBalancer` (ExternalName Services are not here).
    pub service_type: String,
    /// Empty for a headless Service.
    pub cluster_ips: Vec<IpAddr>,
    /// `externalIPs` and the load balancer's ingress addresses.
    pub external_ips: Vec<IpAddr>,
    pub ports: Vec<ServicePort>,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
    pub health_check_node_port: Option<u16>,
    pub endpoints: Vec<ServiceEndpoint>,
}

impl Service {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The addresses that should receive traffic: ready endpoints, else — for a Service with
    /// an external or ingress address, as winkernel falls back — serving terminating ones.
    pub fn serving_ips(&self) -> Vec<IpAddr> {
        let ready: Vec<IpAddr> = self
            .endpoints
            .iter()
            .filter(|e| e.ready)
            .map(|e| e.ip)
            .collect();
        if !ready.is_empty() || self.external_ips.is_empty() {
            return dedup(ready);
        }
        dedup(
            self.endpoints
                .iter()
                .filter(|e| e.serving)
                .map(|e| e.ip)
                .collect(),
        )
    }
}

fn dedup(mut v: Vec<IpAddr>) -> Vec<IpAddr> {
    v.sort();
    v.dedup();
    v
}

/// One port of a Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServicePort {
    pub name: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    pub port: u16,
    pub node_port: Option<u16>,
}

impl ServicePort {
    /// The protocol as HNS numbers it.
    pub fn hns_protocol(&self) -> u32 {
        match self.protocol.to_ascii_uppercase().as_str() {
            "UDP" => 17,
            "SCTP" => 132,
            _ => 6,
        }
    }
}

/// An endpoint of a Service (one address).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceEndpoint {
    pub ip: IpAddr,
    pub node: Option<String>,
    pub ready: bool,
    pub serving: bool,
}

/// A pod of this node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub ip: Option<IpAddr>,
    /// Its network namespace, as the runtime gave it to CNI (a path or a name).
    pub netns: Option<String>,
    /// Its containers' exec probes (liveness, readiness, startup).
    pub exec_probes: Vec<ExecProbe>,
}

/// A probe that runs a command in a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExecProbe {
    pub container: String,
    /// `liveness`, `readiness` or `startup`.
    pub probe: String,
    /// The command and its arguments, as `exec.command` lists them.
    pub command: Vec<String>,
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The node's HNS objects.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HnsView {
    pub networks: Vec<Network>,
    pub endpoints: Vec<Endpoint>,
    pub namespaces: Vec<Namespace>,
    pub load_balancers: Vec<LoadBalancer>,
    pub routes: Vec<SdnRoute>,
}

/// The kernel side of the node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelView {
    /// The node's own namespace.
    pub node: NetnsView,
    /// The namespace of each HostComputeNamespace of the node that has one.
    pub pods: Vec<NetnsView>,
    /// Every named network namespace on the machine (`ip netns`).
    pub named_netns: Vec<String>,
    /// Named namespaces that other nodes' hnsd own (several nodes can share a machine).
    pub owned_elsewhere: Vec<String>,
}

/// One network namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetnsView {
    /// Its path (`/run/netns/NAME`), or empty for the node's.
    pub path: String,
    /// False when the path names no namespace.
    pub exists: bool,
    pub links: Vec<LinkView>,
    pub addresses: Vec<IpNet>,
    /// `destination via gateway` or `destination dev`.
    pub routes: Vec<String>,
    pub neighbors: Vec<(IpAddr, String)>,
    /// The resolv.conf a process in it reads.
    pub resolv_conf: Option<String>,
    /// The resolv.conf hnsd writes for the endpoint in it.
    pub expected_resolv_conf: Option<String>,
    /// Processes running in it (a live pod has at least one).
    pub processes: usize,
}

/// A network interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LinkView {
    pub name: String,
    pub mac: Option<String>,
    pub up: bool,
    /// `tun` for a TAP, `veth`, ...; `None` for physical devices and `lo`.
    pub kind: Option<String>,
}
