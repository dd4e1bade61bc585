//! Pods, made as a runtime makes them on a Windows node: the real CNI plugin of the node's
//! network (win-bridge on flannel's L2Bridge `cbr0`, win-overlay on its Overlay network) run
//! on the node's in-process hnsd with the config a cluster gives it, its IPAM the
//! distribution's `host-local` on the node's flannel subnet; then the pod's own IP stack on the
//! endpoint the plugin made, with the address and gateway of the plugin's result.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Command, Stdio};

use hcn::error::{HResult, HnsError};
use hcn::{Endpoint, EndpointPolicy, Namespace, NamespaceType, NetworkType};
use ipnet::{IpNet, Ipv4Net};
use serde_json::{Value, json};

use super::super::cluster::{Cluster, Who, addr};
use super::super::stack::{Interface, Stack, StackRoute};
use super::flannel::{CLUSTER_CIDR, SERVICE_CIDR, nth};
use crate::topology::{CLUSTER_CIDR_V6, DNS_SERVICE_IP, FABRIC_V6, SERVICE_CIDR_V6, pod_searches};
use hns::state::Object;

/// Where Debian's CNI plugins are (`host-local` is the pods' IPAM).
pub const DEBIAN_CNI: &str = "/usr/lib/cni";
/// The first host number host-local hands pods (below it: the gateway, flannel's bridge
/// endpoint at .2 on host-gw, kube-proxy's source VIP on overlay).
pub const FIRST_POD: u8 = 10;

/// How to make a pod: the knobs of its CNI config.
#[derive(Clone, Debug, Default)]
pub struct PodOptions {
    /// win-bridge / win-overlay `loopbackDSR`: OutBoundNAT `Destinations` = the pod's address.
    pub loopback_dsr: bool,
    /// More endpoint policies in the config's `policies` (ACLs, port mappings, ...).
    pub policies: Vec<EndpointPolicy>,
    /// Leave out the config's OutBoundNAT policy (and win-bridge's `ipMasqNetwork`, from which
    /// the plugin makes one).
    pub no_outbound_nat: bool,
    /// Addresses the pod accepts as its own besides its endpoint's (a DSR VIP).
    pub extra_addresses: Vec<IpAddr>,
    /// The cluster DNS in the config ([`cluster_dns_conf`]), as the local cluster writes it.
    pub cluster_dns: bool,
}

impl PodOptions {
    /// What the local cluster makes every Windows pod with: the cluster DNS, and
    /// `loopbackDSR`, so that a pod reaches itself through its own Service when kube-proxy
    /// runs DSR (the plugin adds the policy only where HNS has DSR; without DSR the load
    /// balancer's source NAT already brings the hairpin back, and the policy matches nothing).
    pub fn cluster() -> PodOptions {
        PodOptions {
            cluster_dns: true,
            loopback_dsr: true,
            ..PodOptions::default()
        }
    }
}

/// The pod network of a Windows node as its CNI config names it.
#[derive(Clone, Debug)]
pub struct NetworkConf<'a> {
    /// The HNS network's name (flanneld's `cbr0` or `flannel.4096`).
    pub name: &'a str,
    /// Overlay (win-overlay) rather than L2Bridge (win-bridge).
    pub overlay: bool,
    /// The node's flannel subnet.
    pub subnet: IpNet,
    /// The node's address on the underlay.
    pub node_ip: IpAddr,
    /// host-local's `dataDir` on the node.
    pub ipam_dir: &'a Path,
    /// The node's IPv6 pod prefix on a dual-stack node (L2Bridge, or Overlay where HNS
    /// carries IPv6 there): pods get an address of each family ([`dual_stack_config`]).
    pub subnet6: Option<IpNet>,
}

/// The DNS part of a pod's CNI config as the local cluster writes it: the static `dns` block,
/// and what containerd hands a plugin that declares the `dns` capability (`runtimeConfig.dns`:
/// kubelet's ClusterFirst DNS config; win-bridge / win-overlay put it on the HNS endpoint's
/// Dns).
pub fn cluster_dns_conf() -> Value {
    json!({
        "dns": {"nameservers": [DNS_SERVICE_IP.to_string()], "search": ["svc.cluster.local"]},
        "capabilities": {"dns": true},
        "runtimeConfig": {"dns": {
            "servers": [DNS_SERVICE_IP.to_string()],
            "searches": pod_searches(),
            "options": ["ndots:5"],
        }},
    })
}

/// TCP ports every pod answers on.
pub const POD_TCP: [u16; 2] = [80, 8080];
/// UDP ports every pod echoes on.
pub const POD_UDP: [u16; 2] = [53, 5353];

/// The CNI config of a Windows node's pod network, as the cluster writes it: win-bridge on
/// L2Bridge (OutBoundNAT with the cluster, Service and node subnets as exceptions, `SDNRoute`s
/// with `NeedEncap` for the Service CIDR and the node's address), win-overlay on Overlay
/// (OutBoundNAT, the Service CIDR's `SDNRoute`, the node's `ProviderAddress`); host-local on
/// the node's subnet from [`FIRST_POD`].
pub fn cni_config(network: &NetworkConf<'_>, opts: &PodOptions) -> Result<Value, HnsError> {
    if let Some(v6) = network.subnet6 {
        return dual_stack_config(network, v6, opts);
    }
    let (overlay, node_ip, ipam_dir) = (network.overlay, network.node_ip, network.ipam_dir);
    let policy = |v: Value| json!({"name": "EndpointPolicy", "value": v});
    let mut policies = Vec::new();
    if !opts.no_outbound_nat {
        let mut exceptions = vec![CLUSTER_CIDR.to_string(), SERVICE_CIDR.to_string()];
        if !overlay {
            exceptions.push(addr::UNDERLAY.to_string());
        }
        policies.push(policy(
            json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": exceptions}}),
        ));
    }
    policies.push(policy(json!({"Type": "SDNRoute", "Settings": {"DestinationPrefix": SERVICE_CIDR, "NeedEncap": true}})));
    if overlay {
        policies.push(policy(json!({"Type": "ProviderAddress", "Settings": {"ProviderAddress": node_ip.to_string()}})));
    } else {
        policies.push(policy(json!({"Type": "SDNRoute", "Settings": {"DestinationPrefix": format!("{node_ip}/32"), "NeedEncap": true}})));
    }
    for p in &opts.policies {
        let v = serde_json::to_value(p).map_err(|e| bad(format!("policy {p:?}: {e}")))?;
        policies.push(policy(v));
    }
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": network.name,
        "type": if overlay { "win-overlay" } else { "win-bridge" },
        "apiVersion": 2,
        "policies": policies,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": network.subnet.to_string(), "rangeStart": nth(network.subnet, FIRST_POD).to_string()}]],
            "dataDir": ipam_dir.to_string_lossy(),
        },
    });
    if !overlay && !opts.no_outbound_nat {
        conf["ipMasqNetwork"] = json!(CLUSTER_CIDR);
    }
    if opts.loopback_dsr {
        conf["loopbackDSR"] = json!(true);
    }
    if opts.cluster_dns
        && let (Value::Object(conf), Value::Object(dns)) = (&mut conf, cluster_dns_conf())
    {
        conf.extend(dns);
    }
    Ok(conf)
}

/// The CNI config of a dual-stack L2Bridge node: win-bridge gives an endpoint only the first
/// address IPAM returns (`IPs[0]`), so dual-stack Windows pods come from `sdnbridge`
/// (microsoft/windows-container-networking) with `optionalFlags.enableDualStack` on the
/// existing L2Bridge network that holds both subnets: host-local with one range per family
/// (IPv4 from [`FIRST_POD`], gateway forced to the bridge endpoint's .2; IPv6 likewise, its
/// gateway the bridge endpoint's ::2), the same OutBoundNAT exceptions and SDN routes as
/// win-bridge's config, in sdnbridge's `AdditionalArgs`. On a dual-stack Overlay node
/// (where HNS carries IPv6 there) `sdnoverlay` the same way with win-overlay's policies (the
/// node's `ProviderAddress`, no exception for the underlay, which is NATed as on win-overlay)
/// and each family's gateway the subnet's first address, HNS's own.
pub fn dual_stack_config(
    network: &NetworkConf<'_>,
    subnet6: IpNet,
    opts: &PodOptions,
) -> Result<Value, HnsError> {
    let policy = |v: Value| json!({"Name": "EndpointPolicy", "Value": v});
    let mut args = Vec::new();
    let overlay = network.overlay;
    if !opts.no_outbound_nat {
        let exceptions: &[&str] = if overlay {
            &[CLUSTER_CIDR, SERVICE_CIDR, CLUSTER_CIDR_V6, SERVICE_CIDR_V6]
        } else {
            &[
                CLUSTER_CIDR,
                SERVICE_CIDR,
                addr::UNDERLAY,
                CLUSTER_CIDR_V6,
                SERVICE_CIDR_V6,
                FABRIC_V6,
            ]
        };
        args.push(policy(
            json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": exceptions}}),
        ));
    }
    args.push(policy(json!({"Type": "SDNRoute", "Settings": {"DestinationPrefix": SERVICE_CIDR, "NeedEncap": true}})));
    if overlay {
        args.push(policy(json!({"Type": "ProviderAddress", "Settings": {"ProviderAddress": network.node_ip.to_string()}})));
    } else {
        args.push(policy(json!({"Type": "SDNRoute", "Settings": {"DestinationPrefix": format!("{}/32", network.node_ip), "NeedEncap": true}})));
    }
    args.push(policy(json!({"Type": "SDNRoute", "Settings": {"DestinationPrefix": SERVICE_CIDR_V6, "NeedEncap": true}})));
    for p in &opts.policies {
        let v = serde_json::to_value(p).map_err(|e| bad(format!("policy {p:?}: {e}")))?;
        args.push(policy(v));
    }
    let range = |subnet: IpNet, gateway: Option<IpAddr>| {
        let mut r =
            json!({"subnet": subnet.to_string(), "rangeStart": nth(subnet, FIRST_POD).to_string()});
        if let Some(gw) = gateway {
            r["gateway"] = json!(gw.to_string());
        }
        json!([r])
    };
    let gateway6 = if overlay { 1 } else { 2 };
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": network.name,
        "type": if overlay { "sdnoverlay" } else { "sdnbridge" },
        "optionalFlags": {
            "enableDualStack": true,
            "forceBridgeGateway": !overlay,
            "loopbackDSR": opts.loopback_dsr,
        },
        "AdditionalArgs": args,
        "ipam": {
            "type": "host-local",
            "ranges": [range(network.subnet, None), range(subnet6, Some(nth(subnet6, gateway6)))],
            "dataDir": network.ipam_dir.to_string_lossy(),
        },
    });
    if opts.cluster_dns
        && let (Value::Object(conf), Value::Object(dns)) = (&mut conf, cluster_dns_conf())
    {
        conf.extend(dns);
    }
    Ok(conf)
}

/// Reserves kube-proxy's source VIP in `subnet` with the distribution's host-local, as
/// start.ps1's `GetSourceVip` runs it (CNI 0.2.0, in the pods' host-local store `ipam_dir`,
/// under the network's name `network`): the first free address, .2 on a fresh node.
pub fn reserve_source_vip(
    network: &str,
    subnet: Ipv4Net,
    ipam_dir: &Path,
) -> Result<Ipv4Addr, HnsError> {
    let conf = json!({
        "cniVersion": "0.2.0",
        "name": network,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": subnet.to_string()}]],
            "dataDir": ipam_dir.to_string_lossy(),
        },
    });
    let mut child = Command::new(Path::new(DEBIAN_CNI).join("host-local"))
        .env_clear()
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "dummy")
        .env("CNI_NETNS", "dummy")
        .env("CNI_IFNAME", "dummy")
        .env("CNI_PATH", DEBIAN_CNI)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            bad(format!(
                "cannot run {DEBIAN_CNI}/host-local ({e}); install Debian's containernetworking-plugins"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(conf.to_string().as_bytes())
            .map_err(|e| bad(format!("host-local's stdin: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| bad(format!("host-local: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(bad(format!(
            "host-local could not reserve the source VIP: {text}"
        )));
    }
    serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| {
            v["ip4"]["ip"]
                .as_str()
                .and_then(|a| a.split('/').next())
                .and_then(|a| a.parse().ok())
        })
        .ok_or_else(|| bad(format!("host-local's result has no ip4.ip: {text}")))
}

impl Cluster {
    /// host-local's store on node `node` (its pods' and its source VIP's).
    pub fn ipam_dir(&self, node: usize) -> std::path::PathBuf {
        let name = self.nodes.get(node).map_or("node", |n| n.name.as_str());
        self.work_dir().join(format!("{name}-ipam"))
    }

    /// A pod on node `node`, added by the CNI plugin of the node's network.
    pub fn add_pod(&mut self, node: usize, name: &str, opts: PodOptions) -> Result<Who, HnsError> {
        let Some(n) = self.nodes.get(node) else {
            return Err(bad(format!("no node {node}")));
        };
        let Some(net) = n.network.clone() else {
            return Err(bad(format!(
                "{}: no pod network yet (run flannel first)",
                n.name
            )));
        };
        let ipam_dir = self.ipam_dir(node);
        let state_dir = self.work_dir().join(format!("{}-cni", n.name));
        let conf = cni_config(
            &NetworkConf {
                name: &net.name,
                overlay: net.network_type == NetworkType::Overlay,
                subnet: net.subnet,
                node_ip: addr::node(node),
                ipam_dir: &ipam_dir,
                subnet6: net.subnet6,
            },
            &opts,
        )?;
        // The plugin the config names, as a runtime picks it.
        let plugin = conf["type"].as_str().unwrap_or("win-bridge");
        let plugin =
            cni::plugins::by_name(plugin).ok_or_else(|| bad(format!("no CNI plugin {plugin}")))?;
        // As containerd does on Windows: the pod's network compartment (an HNS namespace) is
        // made first, and the plugin is given its ID.
        let container = name.to_string();
        let Some(n) = self.nodes.get_mut(node) else {
            return Err(bad(format!("no node {node}")));
        };
        let sandbox = n.create(Object::Namespace(Namespace {
            namespace_type: Some(NamespaceType::Guest),
            ..Namespace::default()
        }))?;
        let env = cni::Env::from_pairs([
            ("CNI_COMMAND", "ADD".to_string()),
            ("CNI_CONTAINERID", container),
            ("CNI_NETNS", sandbox.to_string()),
            ("CNI_IFNAME", "eth0".to_string()),
            ("CNI_PATH", DEBIAN_CNI.to_string()),
            (
                "WINNET_CNI_STATE_DIR",
                state_dir.to_string_lossy().into_owned(),
            ),
        ]);
        let out = cni::run_with_hns(
            plugin.as_ref(),
            &env,
            conf.to_string().as_bytes(),
            n.hns.clone(),
        );
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if out.exit_code != 0 {
            return Err(bad(format!(
                "{}: {plugin} ADD of {name} failed: {}",
                n.name,
                answer["msg"].as_str().unwrap_or("no error message"),
                plugin = plugin.name()
            )));
        }
        // Every address of the result (one a family with a dual-stack plugin), each with its
        // family's gateway, as a runtime configures the pod's interface.
        let mut ips = Vec::new();
        for c in answer["ips"].as_array().into_iter().flatten() {
            let ip = c["address"]
                .as_str()
                .and_then(|a| a.parse::<IpNet>().ok())
                .ok_or_else(|| bad(format!("the CNI result of {name} has a bad address: {c}")))?;
            let gateway = c["gateway"]
                .as_str()
                .and_then(|g| g.parse::<IpAddr>().ok())
                .ok_or_else(|| bad(format!("the CNI result of {name} has no gateway: {c}")))?;
            ips.push((ip, gateway));
        }
        let Some(&(first, _)) = ips.first() else {
            return Err(bad(format!(
                "the CNI result of {name} has no address: {answer}"
            )));
        };
        let endpoint = n
            .read(|s| {
                s.endpoints()
                    .find(|e| e.ips().any(|a| a == first.addr()))
                    .cloned()
            })
            .ok_or_else(|| bad(format!("no HNS endpoint has {name}'s address {first}")))?;
        self.attach_pod_stack(node, name, &endpoint, &ips, opts.extra_addresses)
    }

    /// A pod on node `node` with an endpoint made by the caller (not by a CNI plugin): the
    /// endpoint is created, put in a new namespace, and the pod's stack set up with `gateway`
    /// as its default route.
    pub fn add_pod_endpoint(
        &mut self,
        node: usize,
        name: &str,
        ep: Endpoint,
        subnet: IpNet,
        gateway: IpAddr,
        extra_addresses: Vec<IpAddr>,
    ) -> Result<Who, HnsError> {
        let Some(n) = self.nodes.get_mut(node) else {
            return Err(bad(format!("no node {node}")));
        };
        let id = n.create(Object::Endpoint(ep))?;
        let ns = n.create(Object::Namespace(Namespace {
            namespace_type: Some(NamespaceType::Guest),
            ..Namespace::default()
        }))?;
        let req: hcn::ModifyRequest = hcn::decode_value(json!({
            "ResourceType": "Endpoint", "RequestType": "Add",
            "Settings": {"EndpointId": id.to_string()}
        }))
        .map_err(|e| HnsError::new(e.code, format!("namespace request: {}", e.message)))?;
        n.hns(hns::state::WriteOp::Modify(hcn::Kind::Namespace, ns, req))?;
        let created = n
            .read(|s| s.endpoint(id).cloned())
            .ok_or_else(|| bad(format!("endpoint {id} vanished")))?;
        let ips: Vec<(IpNet, IpAddr)> = created
            .ips()
            .filter_map(|ip| IpNet::new(ip, subnet.prefix_len()).ok())
            .map(|ip| (ip, gateway))
            .collect();
        self.attach_pod_stack(node, name, &created, &ips, extra_addresses)
    }

    /// The pod's IP stack on `endpoint`'s port: its addresses (`ips`), a default route of each
    /// address's family via its gateway, the pod listeners.
    fn attach_pod_stack(
        &mut self,
        node: usize,
        name: &str,
        endpoint: &Endpoint,
        ips: &[(IpNet, IpAddr)],
        extra_addresses: Vec<IpAddr>,
    ) -> Result<Who, HnsError> {
        let Some(n) = self.nodes.get_mut(node) else {
            return Err(bad(format!("no node {node}")));
        };
        let mac = endpoint
            .mac_address
            .map(|m| vfp::wire::MacAddr(m.0))
            .unwrap_or_default();
        let mut s = Stack::new(name);
        s.interfaces.push(Interface {
            name: "eth0".into(),
            mac,
            addresses: ips.iter().map(|(ip, _)| *ip).collect(),
        });
        for (ip, gateway) in ips {
            let any = if ip.addr().is_ipv4() {
                IpNet::V4(Default::default())
            } else {
                IpNet::V6(Default::default())
            };
            if s.routes.iter().any(|r| r.destination == any) {
                continue;
            }
            s.routes.push(StackRoute {
                destination: any,
                via: Some(*gateway),
                dev: None,
            });
        }
        s.tcp_listen.extend(POD_TCP);
        s.udp_listen.extend(POD_UDP);
        s.extra_addresses = extra_addresses;
        n.pods.insert(endpoint.id, s);
        n.sync_host();
        Ok(Who::Pod(node, endpoint.id))
    }

    /// The address of a pod (its endpoint's first).
    pub fn ip_of(&self, who: Who) -> Option<IpAddr> {
        match who {
            Who::Pod(n, ep) => self
                .nodes
                .get(n)?
                .read(|s| s.endpoint(ep).and_then(|e| e.ips().next())),
            Who::Node(n) => Some(addr::node(n)),
            Who::External => Some(addr::ROUTER),
        }
    }
}

fn bad(msg: String) -> HnsError {
    HnsError::new(HResult::E_INVALIDARG, msg)
}
