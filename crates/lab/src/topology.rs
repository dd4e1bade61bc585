//! The topology file of `winnet cluster up`: the network mode, the Windows build, the nodes
//! with their pods, and the Services; and the addresses everything gets.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use anyhow::{Context, bail};
use hns::Profile;
use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;

/// flannel's network mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// flannel host-gw: L2Bridge `cbr0`, routes to other nodes' pod subnets via their address.
    L2bridge,
    /// flannel vxlan: Overlay `flannel.4096`, VNI 4096 on UDP 4789.
    Overlay,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s.to_ascii_lowercase().as_str() {
            "l2bridge" => Ok(Mode::L2bridge),
            "overlay" => Ok(Mode::Overlay),
            _ => Err(format!("unknown mode {s:?}: write l2bridge or overlay")),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::L2bridge => "l2bridge",
            Mode::Overlay => "overlay",
        })
    }
}

/// A node's operating system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Os {
    Windows,
    Linux,
}

/// A node as the file gives it.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    pub name: String,
    pub os: Os,
    #[serde(default)]
    pub pods: Vec<String>,
}

/// A Service as the file gives it.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceSpec {
    pub name: String,
    /// Pods whose name starts with this are its endpoints.
    pub selector: String,
    pub port: u16,
    pub target_port: u16,
    pub node_port: Option<u16>,
    #[serde(rename = "loadBalancerIP")]
    pub load_balancer_ip: Option<Ipv4Addr>,
    /// `sessionAffinity: ClientIP`: a client's connections stay on one backend.
    #[serde(default, with = "affinity")]
    pub session_affinity: bool,
    /// `externalTrafficPolicy: Local`: NodePort traffic goes only to the node's own backends,
    /// keeping the client's address.
    #[serde(default, with = "local_policy")]
    pub external_traffic_policy: bool,
    /// `internalTrafficPolicy: Local`: traffic from pods to the ClusterIP goes only to the
    /// client's node's own backends, and is dropped on a node without one.
    #[serde(default, with = "local_policy")]
    pub internal_traffic_policy: bool,
    /// The conditions the cluster writes for the Service's endpoints (default `Ready`).
    #[serde(default)]
    pub endpoints: EndpointState,
    /// `ipFamilyPolicy`: `SingleStack` (IPv4, the default) or `PreferDualStack` /
    /// `RequireDualStack` (an IPv4 and an IPv6 ClusterIP, on a `dualStack` cluster).
    #[serde(default)]
    pub ip_family_policy: IpFamilyPolicy,
    /// `spec.healthCheckNodePort` of a LoadBalancer Service with externalTrafficPolicy Local:
    /// the port kube-proxy answers on with this node's local endpoint count (200 or 503), so
    /// that a cloud load balancer sends traffic only to nodes with a backend. Kubernetes
    /// allocates one when left out; so does the cluster ([`ServiceSpec::health_check_port`]).
    pub health_check_node_port: Option<u16>,
    /// The annotation `preserve-destination: "true"`: through the load-balancer ingress IP the
    /// backend sees the ingress IP as the destination (winkernel: DSR with PreserveDIP).
    #[serde(default)]
    pub preserve_destination: bool,
}

impl ServiceSpec {
    /// Whether Kubernetes gives the Service a health check node port: type LoadBalancer with
    /// externalTrafficPolicy Local.
    pub fn needs_health_check(&self) -> bool {
        self.load_balancer_ip.is_some() && self.external_traffic_policy
    }
}

/// A Service's `ipFamilyPolicy`, as Kubernetes spells it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum IpFamilyPolicy {
    #[default]
    SingleStack,
    PreferDualStack,
    RequireDualStack,
}

impl ServiceSpec {
    /// The Service has an IPv6 ClusterIP besides its IPv4 one.
    pub fn dual_stack(&self) -> bool {
        self.ip_family_policy != IpFamilyPolicy::SingleStack
    }
}

/// Where a Service's backends stand, as their EndpointSlice conditions say: what the
/// EndpointSlice controller writes for pods that run, are being deleted while they still
/// answer (a preStop drain), or are being deleted and answer no more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum EndpointState {
    /// ready, serving, not terminating.
    #[default]
    Ready,
    /// ready false, serving true, terminating true.
    Terminating,
    /// ready false, serving false, terminating true.
    NotServing,
}

impl EndpointState {
    /// The (ready, serving, terminating) conditions.
    pub fn conditions(self) -> (bool, bool, bool) {
        match self {
            EndpointState::Ready => (true, true, false),
            EndpointState::Terminating => (false, true, true),
            EndpointState::NotServing => (false, false, true),
        }
    }
}

/// `externalTrafficPolicy` and `internalTrafficPolicy` as Kubernetes spells them: `Local` or
/// `Cluster`.
mod local_policy {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(local: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if *local { "Local" } else { "Cluster" })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        match String::deserialize(d)?.as_str() {
            "Local" => Ok(true),
            "Cluster" => Ok(false),
            other => Err(serde::de::Error::custom(format!(
                "traffic policy {other:?}: write Local or Cluster"
            ))),
        }
    }
}

/// `sessionAffinity` as Kubernetes spells it: `ClientIP` or `None`.
mod affinity {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(on: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if *on { "ClientIP" } else { "None" })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        match String::deserialize(d)?.as_str() {
            "ClientIP" => Ok(true),
            "None" => Ok(false),
            other => Err(serde::de::Error::custom(format!(
                "sessionAffinity {other:?}: write ClientIP or None"
            ))),
        }
    }
}

/// The topology file.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub mode: Mode,
    #[serde(with = "profile_name")]
    pub profile: Profile,
    /// kube-proxy's `--enable-dsr` on every Windows node: on unless the file says `dsr: false`,
    /// as today's distributions run Windows nodes (AKS, OpenShift, capz CI). A Linux node runs
    /// its own kube-proxy (nftables), so its pods' Service traffic never crosses a Windows
    /// node's load balancer and DSR replies from any node reach them.
    #[serde(default = "dsr_on")]
    pub dsr: bool,
    /// The cluster is dual-stack (`dualStack: true`): pod CIDRs and Service CIDRs of both
    /// families ([`CLUSTER_CIDR_V6`], [`SERVICE_CIDR_V6`]), IPv6 on the fabric. Windows pods
    /// get both families where Windows gives them (L2Bridge); see docs/cluster.md, "Dual-stack".
    #[serde(default, rename = "dualStack")]
    pub dual_stack: bool,
    /// The dynamic port range every Windows node's hnsd draws SNAT ports from
    /// (`dynamicPortRange: start=60000,num=255`, netsh's words); Windows' default (49152,
    /// 16384 ports) when absent.
    #[serde(
        default,
        rename = "dynamicPortRange",
        with = "port_range",
        skip_serializing_if = "Option::is_none"
    )]
    pub dynamic_port_range: Option<hns_client::switch::DynamicPortRange>,
    pub nodes: Vec<NodeSpec>,
    #[serde(default)]
    pub services: Vec<ServiceSpec>,
}

fn dsr_on() -> bool {
    true
}

mod port_range {
    use hns_client::switch::DynamicPortRange;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(r: &Option<DynamicPortRange>, s: S) -> Result<S::Ok, S::Error> {
        match r {
            Some(r) => s.serialize_str(&r.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DynamicPortRange>, D::Error> {
        let Some(s) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        s.parse()
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("dynamicPortRange {s:?}: {e}")))
    }
}

mod profile_name {
    use hns::Profile;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Profile, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&p.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Profile, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("profile {s:?}: {e}")))
    }
}

/// Kubernetes' default node-port range (`--service-node-port-range`).
pub const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// The fabric's prefix (the nodes' underlay).
pub const FABRIC: &str = "192.168.77.0/24";
/// The external host's address on the fabric (the nodes' default gateway).
pub const EXTERNAL_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);
/// The external host's own DNS zone (served by Knot DNS on [`EXTERNAL_IP`]).
pub const EXTERNAL_ZONE: &str = "example.test";
/// The headless Service over the first Service's pods, whose endpoints carry the pods' names
/// as hostnames: `web-2.peers` is pod web-2 (the Pod -> Pod (Name) flow).
pub const HEADLESS_SERVICE: &str = "peers";
/// The ExternalName Service: a CNAME to `www.<EXTERNAL_ZONE>`.
pub const EXTERNAL_NAME_SERVICE: &str = "outside";
/// The cluster DNS's Service (kubeadm's name for CoreDNS's Service) at [`DNS_SERVICE_IP`].
pub const DNS_SERVICE: &str = "kube-dns";
/// The cluster DNS pods' names: `coredns-1` on the first Windows node, `coredns-2` on the
/// second (reserved: a topology may not name its pods so).
pub const DNS_POD_PREFIX: &str = "coredns-";
/// How many DNS pods the cluster runs (one on each of the first Windows nodes).
pub const DNS_PODS: usize = 2;
/// The cluster's DNS domain.
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The Kubernetes namespace of every object of the local cluster.
pub const NAMESPACE: &str = "default";

/// The DNS search list kubelet gives a pod of [`NAMESPACE`] (ClusterFirst, no host searches):
/// `<ns>.svc.<zone>`, `svc.<zone>`, `<zone>`.
pub fn pod_searches() -> Vec<String> {
    vec![
        format!("{NAMESPACE}.svc.{CLUSTER_DOMAIN}"),
        format!("svc.{CLUSTER_DOMAIN}"),
        CLUSTER_DOMAIN.to_string(),
    ]
}

/// The resolv.conf kubelet writes for a Linux pod (reference windows-dns.md §B.5).
pub fn linux_pod_resolv_conf() -> String {
    format!(
        "nameserver {DNS_SERVICE_IP}\nsearch {}\noptions ndots:5\n",
        pod_searches().join(" ")
    )
}

/// The fabric's own address, where flannel's etcd listens.
pub const ETCD_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 2);
/// An address of the external host outside every OutBoundNAT exception: pods reach it SNATed.
pub const OUTSIDE_IP: Ipv4Addr = Ipv4Addr::new(10, 200, 0, 1);
/// The cluster's pod CIDR.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The Service CIDR.
pub const SERVICE_CIDR: &str = "10.96.0.0/12";
/// The port pods and the external host serve HTTP on.
pub const HTTP_PORT: u16 = 8080;
/// The UDP echo port.
pub const UDP_PORT: u16 = 5353;

impl Topology {
    /// Reads and checks a topology file.
    pub fn load(path: &Path) -> anyhow::Result<Topology> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the topology {}", path.display()))?;
        Topology::parse(&text, &path.display().to_string())
    }

    /// Reads and checks a topology's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<Topology> {
        let t: Topology = serde_norway::from_str(text)
            .with_context(|| format!("{origin}: not a topology (see examples/cluster.yaml)"))?;
        t.validate()
            .with_context(|| format!("{origin}: bad topology"))?;
        Ok(t)
    }

    fn validate(&self) -> anyhow::Result<()> {
        if !self.nodes.iter().any(|n| n.os == Os::Windows) {
            bail!("nodes: at least one node must have os: windows");
        }
        if self.nodes.len() > 9 {
            bail!("nodes: at most 9 nodes");
        }
        let mut names = std::collections::BTreeSet::new();
        for n in &self.nodes {
            check_name("nodes[].name", &n.name)?;
            if !names.insert(n.name.clone()) {
                bail!("nodes: the name {} is used twice", n.name);
            }
            if n.pods.len() > 50 {
                bail!("nodes[{}].pods: at most 50 pods a node", n.name);
            }
            for p in &n.pods {
                check_name("nodes[].pods[]", p)?;
                if p.starts_with(DNS_POD_PREFIX) {
                    bail!(
                        "nodes[{}].pods: {p:?}: names starting {DNS_POD_PREFIX:?} are the cluster DNS's; rename the pod",
                        n.name
                    );
                }
                if !names.insert(format!("pod/{p}")) {
                    bail!("pods: the name {p} is used twice");
                }
            }
        }
        if self.services.len() > MAX_SERVICES {
            bail!("services: at most {MAX_SERVICES} Services");
        }
        for s in &self.services {
            check_name("services[].name", &s.name)?;
            if let Some(np) = s.node_port
                && !NODE_PORTS.contains(&np)
            {
                bail!("services[{}].nodePort: {np} is outside 30000-32767", s.name);
            }
            if s.dual_stack() && !self.dual_stack {
                bail!(
                    "services[{}].ipFamilyPolicy: {:?} needs a dual-stack cluster; add dualStack: true",
                    s.name,
                    s.ip_family_policy
                );
            }
            if let Some(hc) = s.health_check_node_port {
                if !s.needs_health_check() {
                    bail!(
                        "services[{}].healthCheckNodePort: only a LoadBalancer Service (loadBalancerIP) with externalTrafficPolicy: Local has one",
                        s.name
                    );
                }
                if !NODE_PORTS.contains(&hc) {
                    bail!(
                        "services[{}].healthCheckNodePort: {hc} is outside 30000-32767",
                        s.name
                    );
                }
            }
            if s.preserve_destination && s.load_balancer_ip.is_none() {
                bail!(
                    "services[{}].preserveDestination: applies to the load-balancer ingress IP; give the Service a loadBalancerIP",
                    s.name
                );
            }
        }
        let mut taken = std::collections::BTreeMap::new();
        for s in &self.services {
            for p in s.node_port.into_iter().chain(s.health_check_node_port) {
                if let Some(other) = taken.insert(p, &s.name) {
                    bail!(
                        "services[{}]: port {p} is already {other}'s node port",
                        s.name
                    );
                }
            }
        }
        Ok(())
    }

    /// The health check node port of Service `s`, as Kubernetes allocates it when the file
    /// gives none: the highest port of the node-port range no Service of the topology uses.
    pub fn health_check_port(&self, s: &ServiceSpec) -> Option<u16> {
        if !s.needs_health_check() {
            return None;
        }
        if s.health_check_node_port.is_some() {
            return s.health_check_node_port;
        }
        // Allocated in the topology's order, so every reader of the file gets the same ports.
        let mut used: std::collections::BTreeSet<u16> = self
            .services
            .iter()
            .flat_map(|o| o.node_port.into_iter().chain(o.health_check_node_port))
            .collect();
        for o in &self.services {
            if !o.needs_health_check() || o.health_check_node_port.is_some() {
                continue;
            }
            let port = NODE_PORTS.rev().find(|p| !used.contains(p))?;
            used.insert(port);
            if o.name == s.name {
                return Some(port);
            }
        }
        None
    }

    /// The Windows build's name, as profiles are written.
    pub fn profile_name(&self) -> String {
        self.profile.to_string()
    }
}

fn check_name(field: &str, s: &str) -> anyhow::Result<()> {
    let ok = !s.is_empty()
        && s.len() <= 12
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        bail!("{field}: {s:?} must be 1-12 characters of a-z, 0-9 and '-'");
    }
    Ok(())
}

/// The VNI of the overlay: the only one Windows and Linux nodes share (reference §3.3).
pub const VNI: u32 = 4096;

/// flannel's net-conf.json of `mode`, as the cluster's admin writes it to etcd: host-gw for
/// l2bridge, vxlan VNI 4096 on UDP 4789 for overlay (the SDN overlay README's setting for
/// mixed clusters).
pub fn net_conf(mode: Mode) -> String {
    match mode {
        Mode::L2bridge => {
            format!(r#"{{"Network":"{CLUSTER_CIDR}","Backend":{{"Type":"host-gw"}}}}"#)
        }
        Mode::Overlay => format!(
            r#"{{"Network":"{CLUSTER_CIDR}","Backend":{{"Type":"vxlan","VNI":{VNI},"Port":4789}}}}"#
        ),
    }
}

/// The HNS network flanneld makes on a Windows node in `mode` (flannel's default names).
pub fn network_name(mode: Mode) -> String {
    match mode {
        Mode::L2bridge => "cbr0".into(),
        Mode::Overlay => format!("flannel.{VNI}"),
    }
}

/// The cluster DNS's Service address (`kube-dns`), as kubeadm reserves it: the tenth of the
/// Service CIDR.
pub const DNS_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
/// The most Services a topology may have (their ClusterIPs follow from 10.96.1.0).
pub const MAX_SERVICES: usize = 1000;

/// The ClusterIP of the topology's Service number `k`: 10.96.1.1 + k, clear of the DNS's
/// 10.96.0.10; None past [`MAX_SERVICES`].
pub fn cluster_ip(k: usize) -> Option<Ipv4Addr> {
    if k >= MAX_SERVICES {
        return None;
    }
    let base = u32::from(Ipv4Addr::new(10, 96, 1, 1));
    Some(Ipv4Addr::from(base + u32::try_from(k).ok()?))
}

/// The cluster's IPv6 pod CIDR on a `dualStack` cluster (a ULA prefix): one /64 a node.
pub const CLUSTER_CIDR_V6: &str = "fd00:10:244::/56";
/// The IPv6 Service CIDR (kube-apiserver's second `--service-cluster-ip-range`).
pub const SERVICE_CIDR_V6: &str = "fd00:10:96::/112";
/// The fabric's IPv6 prefix on a `dualStack` cluster.
pub const FABRIC_V6: &str = "fd00:192:168:77::/64";
/// The external host's IPv6 address on the fabric.
pub const EXTERNAL_IP_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x192, 0x168, 0x77, 0, 0, 0, 0x1);

/// A node's IPv6 pod prefix: the /64 of [`CLUSTER_CIDR_V6`] numbered after its IPv4 lease
/// (10.244.3.0/24 -> fd00:10:244:3::/64), so that both families of a node's pods read alike.
/// The node's provisioning gives it (flannel's Windows backends lease IPv4 only).
pub fn pod_prefix_v6(lease: Ipv4Net) -> Ipv6Net {
    let [_, _, third, _] = lease.network().octets();
    let net = Ipv6Addr::new(0xfd00, 0x10, 0x244, u16::from(third), 0, 0, 0, 0);
    // A /64 is always a valid prefix length.
    Ipv6Net::new(net, 64).unwrap_or_default()
}

/// The IPv6 twin of an IPv4 address of the plan (a node's, the external host's): the same
/// last octet, written as its decimal digits, in [`FABRIC_V6`] (192.168.77.11 ->
/// fd00:192:168:77::11).
pub fn fabric_ip_v6(ip: Ipv4Addr) -> Ipv6Addr {
    let last = ip.octets()[3];
    let digits = u16::from_str_radix(&last.to_string(), 16).unwrap_or(u16::from(last));
    Ipv6Addr::new(0xfd00, 0x192, 0x168, 0x77, 0, 0, 0, digits)
}

/// The IPv6 ClusterIP of the topology's Service number `k` when it is dual-stack:
/// fd00:10:96::100 + k; None past [`MAX_SERVICES`].
pub fn cluster_ip_v6(k: usize) -> Option<Ipv6Addr> {
    if k >= MAX_SERVICES {
        return None;
    }
    let base = u128::from(Ipv6Addr::new(0xfd00, 0x10, 0x96, 0, 0, 0, 0, 0x100));
    Some(Ipv6Addr::from(base + u128::try_from(k).ok()?))
}

/// A node's address on the fabric: Windows nodes from .11, Linux nodes from .21, in the order
/// the file gives them (`nth_of_os`; at most 9 nodes, so these never meet).
pub fn node_ip(os: Os, nth_of_os: usize) -> Ipv4Addr {
    let base: u8 = match os {
        Os::Windows => 11,
        Os::Linux => 21,
    };
    Ipv4Addr::new(192, 168, 77, base.saturating_add(nth_of_os.min(9) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_topology_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster.yaml");
        let t = Topology::load(&path).expect("examples/cluster.yaml");
        assert_eq!(t.mode, Mode::L2bridge);
        assert_eq!(
            t.profile,
            Profile::default(),
            "the default cluster runs the default build"
        );
        assert_eq!(t.nodes.len(), 3);
        assert_eq!(t.services[0].node_port, Some(30080));
    }

    #[test]
    fn a_dynamic_port_range_is_read_and_checked_as_netsh_checks_it() {
        let base =
            "mode: l2bridge\nprofile: ws2025\nnodes: [{name: win-1, os: windows, pods: []}]\n";
        let t = Topology::parse(base, "t.yaml").expect("no range");
        assert_eq!(t.dynamic_port_range, None);
        let t = Topology::parse(
            &format!("{base}dynamicPortRange: start=60000,num=255\n"),
            "t.yaml",
        )
        .expect("a range");
        assert_eq!(
            t.dynamic_port_range,
            Some(hns_client::switch::DynamicPortRange::new(60000, 255).expect("valid"))
        );
        let e = Topology::parse(
            &format!("{base}dynamicPortRange: start=60000,num=64\n"),
            "t.yaml",
        )
        .expect_err("64 ports");
        let e = format!("{e:#}");
        assert!(
            e.contains("dynamicPortRange") && e.contains("num=64"),
            "{e}"
        );
    }

    #[test]
    fn every_service_gets_its_own_cluster_ip_in_the_service_cidr() {
        let cidr: ipnet::Ipv4Net = SERVICE_CIDR.parse().expect("cidr");
        let ips: std::collections::BTreeSet<Ipv4Addr> =
            (0..MAX_SERVICES).filter_map(cluster_ip).collect();
        assert_eq!(ips.len(), MAX_SERVICES, "no two Services share an address");
        assert!(ips.iter().all(|ip| cidr.contains(ip)));
        assert!(!ips.contains(&DNS_SERVICE_IP), "kube-dns keeps 10.96.0.10");
        assert_eq!(
            cluster_ip(300),
            Some(Ipv4Addr::new(10, 96, 2, 45)),
            "past 255 (once an overflow)"
        );
        assert_eq!(cluster_ip(MAX_SERVICES), None);
        let many: String = (0..=MAX_SERVICES)
            .map(|k| format!("  - {{name: s{k}, selector: web, port: 80, targetPort: 80}}\n"))
            .collect();
        let text = format!(
            "mode: overlay\nprofile: ws2022\nnodes: [{{name: a, os: windows}}]\nservices:\n{many}"
        );
        let e = format!("{:#}", Topology::parse(&text, "t").unwrap_err());
        assert!(e.contains("at most 1000 Services"), "{e}");
    }

    #[test]
    fn the_ipv6_plan_mirrors_the_ipv4_one() {
        let lease: Ipv4Net = "10.244.3.0/24".parse().expect("lease");
        assert_eq!(pod_prefix_v6(lease).to_string(), "fd00:10:244:3::/64");
        let cidr: Ipv6Net = CLUSTER_CIDR_V6.parse().expect("cidr");
        assert!(cidr.contains(&pod_prefix_v6(lease)));
        assert_eq!(
            fabric_ip_v6(node_ip(Os::Windows, 1)).to_string(),
            "fd00:192:168:77::12"
        );
        assert_eq!(fabric_ip_v6(EXTERNAL_IP), EXTERNAL_IP_V6);
        let services: Ipv6Net = SERVICE_CIDR_V6.parse().expect("cidr");
        let vips: std::collections::BTreeSet<Ipv6Addr> =
            (0..MAX_SERVICES).filter_map(cluster_ip_v6).collect();
        assert_eq!(vips.len(), MAX_SERVICES);
        assert!(vips.iter().all(|v| services.contains(v)));
        assert_eq!(cluster_ip_v6(MAX_SERVICES), None);
    }

    #[test]
    fn a_dual_stack_service_needs_a_dual_stack_cluster() {
        let text = |dual: bool, policy: &str| {
            format!(
                "mode: l2bridge\nprofile: ws2025\ndualStack: {dual}\nnodes: [{{name: a, os: windows}}]\n\
                 services: [{{name: s, selector: a, port: 80, targetPort: 80, ipFamilyPolicy: {policy}}}]\n"
            )
        };
        let t = Topology::parse(&text(true, "RequireDualStack"), "t").expect("dual-stack");
        assert!(t.services[0].dual_stack());
        let t = Topology::parse(&text(false, "SingleStack"), "t").expect("single-stack");
        assert!(!t.services[0].dual_stack());
        let e = format!(
            "{:#}",
            Topology::parse(&text(false, "PreferDualStack"), "t").unwrap_err()
        );
        assert!(
            e.contains("services[s].ipFamilyPolicy") && e.contains("dualStack: true"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            Topology::parse(&text(true, "Dual"), "t").unwrap_err()
        );
        assert!(e.contains("Dual"), "{e}");
    }

    #[test]
    fn dsr_is_on_unless_the_file_turns_it_off() {
        let t = |extra: &str| {
            Topology::parse(
                &format!(
                    "mode: overlay\nprofile: ws2025\n{extra}nodes: [{{name: a, os: windows}}]\n"
                ),
                "t",
            )
            .expect("topology")
        };
        assert!(t("").dsr, "as distributions run Windows nodes");
        assert!(!t("dsr: false\n").dsr);
    }

    #[test]
    fn a_local_load_balancer_gets_a_health_check_node_port_as_kubernetes_allocates_it() {
        let t = Topology::parse(
            "mode: overlay\nprofile: ws2025\nnodes: [{name: a, os: windows}]\nservices:\n\
             - {name: np, selector: a, port: 80, targetPort: 80, nodePort: 32767}\n\
             - {name: lb1, selector: a, port: 80, targetPort: 80, loadBalancerIP: 192.168.77.201, externalTrafficPolicy: Local}\n\
             - {name: lb2, selector: a, port: 80, targetPort: 80, loadBalancerIP: 192.168.77.202, externalTrafficPolicy: Local, healthCheckNodePort: 32766}\n\
             - {name: lb3, selector: a, port: 80, targetPort: 80, loadBalancerIP: 192.168.77.203}\n",
            "t",
        )
        .expect("topology");
        let ports: Vec<Option<u16>> = t.services.iter().map(|s| t.health_check_port(s)).collect();
        assert_eq!(
            ports,
            [None, Some(32765), Some(32766), None],
            "the highest free port; the file's own; none without ETP Local"
        );
    }

    #[test]
    fn bad_topologies_name_the_field() {
        let bad = [
            ("mode: ring\nprofile: ws2022\nnodes: []\n", "mode"),
            ("mode: overlay\nprofile: ws2099\nnodes: []\n", "profile"),
            (
                "mode: overlay\nprofile: ws2022\nnodes: [{name: l, os: linux}]\n",
                "os: windows",
            ),
            (
                "mode: overlay\nprofile: ws2022\nnodes: [{name: Bad_Name, os: windows}]\n",
                "nodes[].name",
            ),
            (
                "mode: overlay\nprofile: ws2022\nnodes: [{name: a, os: windows, pods: [coredns-1]}]\n",
                "the cluster DNS's",
            ),
            (
                "mode: overlay\nprofile: ws2022\nnodes: [{name: a, os: windows}]\nservices: [{name: s, selector: a, port: 80, targetPort: 80, nodePort: 80}]\n",
                "nodePort",
            ),
            (
                "mode: overlay\nprofile: ws2022\nnodes: [{name: a, os: windows}]\nservices: [{name: s, selector: a, port: 80, targetPort: 80, nodePort: 30080, externalTrafficPolicy: Local, healthCheckNodePort: 32000}]\n",
                "services[s].healthCheckNodePort: only a LoadBalancer Service",
            ),
            (
                "mode: overlay\nprofile: ws2022\nnodes: [{name: a, os: windows}]\nservices: [{name: s, selector: a, port: 80, targetPort: 80, preserveDestination: true}]\n",
                "services[s].preserveDestination",
            ),
            (
                "mode: overlay\nprofile: ws2022\nnodes: [{name: a, os: windows}]\nservices: [{name: s, selector: a, port: 80, targetPort: 80, nodePort: 30080}, {name: t, selector: a, port: 80, targetPort: 80, nodePort: 30080}]\n",
                "port 30080 is already s's node port",
            ),
        ];
        for (text, field) in bad {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("t.yaml");
            std::fs::write(&p, text).unwrap();
            let e = format!("{:#}", Topology::load(&p).unwrap_err());
            assert!(e.contains(field), "{text}: {e}");
        }
    }
}
