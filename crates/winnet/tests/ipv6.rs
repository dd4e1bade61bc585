//! IPv6 with real packets (issue 15): two Windows nodes whose operator made flannel's `cbr0`
//! dual-stack (`lab::dual_stack`, the provisioning the local cluster does), pods added by the
//! real `sdnbridge` plugin with the local cluster's dual-stack CNI config (host-local with a
//! range per family), then IPv6 TCP between pods on one node and across nodes, the switch
//! answering neighbour discovery for the pods' IPv6 gateway, and an IPv6 ClusterIP (an HNS
//! load balancer flagged IPv6, as kube-proxy's dual-stack mode makes it). On Overlay the same
//! with the operator's dual-stack `flannel.4096` and the real `sdnoverlay` where HNS carries
//! IPv6 there (unrestricted), refused in Windows' words where it does not (ws2025). Run as
//! root.

mod lab;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};

use ::lab::sim::agents::cni::{NetworkConf, PodOptions, dual_stack_config};
use ::lab::topology::{fabric_ip_v6, pod_prefix_v6};
use hcn::LoadBalancer;
use ipnet::{IpNet, Ipv4Net};
use lab::cluster::{decode, rt};
use lab::{Lab, ok, seen_from};
use serde_json::{Value, json};

const PORT: u16 = 8086;

struct Node {
    ns: String,
    ip: Ipv4Addr,
    lease: Ipv4Net,
}

/// The lab's two nodes, each with a dual-stack `cbr0` and a route to the other's IPv6 pods.
fn nodes(lab: &mut Lab, profile: &str) -> Vec<Node> {
    let rt = rt();
    let mut out = Vec::new();
    for i in 0..2u8 {
        let ip = Ipv4Addr::new(192, 168, 77, 11 + i);
        let lease: Ipv4Net = format!("10.244.{}.0/24", i + 1).parse().expect("lease");
        let idx = lab.node(
            &format!("n{i}"),
            &format!("n{i}"),
            &format!("{ip}/24"),
            "192.168.77.1",
            profile,
        );
        let ns = lab.hnsds[idx].node().expect("node namespace").to_string();
        for s in [
            "net.ipv6.conf.all.accept_dad=0",
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.forwarding=1",
        ] {
            ok(&["ip", "netns", "exec", &ns, "sysctl", "-qw", s]);
        }
        let ip6 = format!("{}/64", fabric_ip_v6(ip));
        ok(&["ip", "-n", &ns, "addr", "add", &ip6, "dev", "eth0", "nodad"]);
        let client = lab.hnsds[idx].client();
        rt.block_on(::lab::dual_stack::provision(
            &client,
            "cbr0",
            "eth0",
            lease,
            pod_prefix_v6(lease),
        ))
        .unwrap_or_else(|e| panic!("dual-stack cbr0 on n{i}: {e}\n{}", lab.logs()));
        out.push(Node { ns, ip, lease });
    }
    for (a, b) in [(0, 1), (1, 0)] {
        let prefix = pod_prefix_v6(out[b].lease).to_string();
        let via = fabric_ip_v6(out[b].ip).to_string();
        ok(&[
            "ip", "-n", &out[a].ns, "-6", "route", "add", &prefix, "via", &via,
        ]);
    }
    out
}

/// A pod on `node` added by the `sdnbridge` plugin with the cluster's dual-stack config; its
/// namespace and its addresses from the CNI result.
fn pod(
    lab: &mut Lab,
    plugins: &std::path::Path,
    node: (usize, &Node),
    name: &str,
) -> (String, Vec<IpAddr>) {
    let (ns, added) = add_pod(lab, plugins, node, name, false);
    match added {
        Ok(ips) => (ns, ips),
        Err(e) => panic!("{e}\n{}", lab.logs()),
    }
}

/// A pod on `node` added by the plugin of the cluster's dual-stack config (`sdnbridge`, or
/// `sdnoverlay` when `overlay`): its namespace, and its addresses from the CNI result or
/// the plugin's error.
fn add_pod(
    lab: &mut Lab,
    plugins: &std::path::Path,
    node: (usize, &Node),
    name: &str,
    overlay: bool,
) -> (String, Result<Vec<IpAddr>, String>) {
    let (i, n) = node;
    let ns = lab.add_ns(name);
    ok(&[
        "ip",
        "netns",
        "exec",
        &ns,
        "sysctl",
        "-qw",
        "net.ipv6.conf.default.accept_dad=0",
    ]);
    let ipam = plugins.join(format!("ipam-n{i}"));
    let network = if overlay { "flannel.4096" } else { "cbr0" };
    let conf = dual_stack_config(
        &NetworkConf {
            name: network,
            overlay,
            subnet: IpNet::V4(n.lease),
            node_ip: IpAddr::V4(n.ip),
            ipam_dir: &ipam,
            subnet6: Some(IpNet::V6(pod_prefix_v6(n.lease))),
        },
        IpNet::V6(pod_prefix_v6(n.lease)),
        &PodOptions::default(),
    )
    .expect("config");
    let plugin = conf["type"].as_str().expect("type").to_string();
    let socket = lab.hnsds[i].socket().to_path_buf();
    let mut child = Command::new(plugins.join(&plugin))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", name)
        .env("CNI_NETNS", format!("/run/netns/{ns}"))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", format!("{}:/usr/lib/cni", plugins.display()))
        .env("HNS_SOCKET", &socket)
        .env("WINNET_CNI_STATE_DIR", plugins.join(format!("state-n{i}")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {plugin}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(conf.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("config to {plugin}: {e}"));
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{plugin}: {e}"));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if !out.status.success() {
        return (
            ns,
            Err(format!(
                "{plugin} ADD {name}: {result} {}",
                String::from_utf8_lossy(&out.stderr)
            )),
        );
    }
    let ips = result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["address"].as_str()?.split('/').next()?.parse().ok())
        .collect();
    (ns, Ok(ips))
}

fn v6(ips: &[IpAddr]) -> IpAddr {
    *ips.iter()
        .find(|a| a.is_ipv6())
        .unwrap_or_else(|| panic!("no IPv6 address in {ips:?}"))
}

fn url(ip: IpAddr, port: u16) -> String {
    format!("http://[{ip}]:{port}/")
}

#[test]
fn dual_stack_pods_talk_ipv6_on_one_node_across_nodes_and_through_an_ipv6_cluster_ip() {
    let mut lab = Lab::new("v6");
    let nodes = nodes(&mut lab, "ws2025");
    let plugins = tempfile::tempdir().expect("plugins dir");
    ok(&[
        env!("CARGO_BIN_EXE_winnet"),
        "install-cni",
        &plugins.path().to_string_lossy(),
    ]);
    let (a, a_ips) = pod(&mut lab, plugins.path(), (0, &nodes[0]), "pa");
    let (b, b_ips) = pod(&mut lab, plugins.path(), (0, &nodes[0]), "pb");
    let (c, c_ips) = pod(&mut lab, plugins.path(), (1, &nodes[1]), "pc");
    assert_eq!(
        a_ips,
        vec![
            "10.244.1.10".parse::<IpAddr>().unwrap(),
            "fd00:10:244:1::a".parse().unwrap()
        ],
        "an address of each family from host-local's two ranges"
    );
    for ns in [&a, &b, &c] {
        lab.http_server_v6(ns, PORT);
    }
    let (a6, b6, c6) = (v6(&a_ips), v6(&b_ips), v6(&c_ips));

    // One node: the pods' own addresses on both ends (the IPv6 cluster CIDR is an
    // OutBoundNAT exception).
    let body = lab
        .curl(&a, &url(b6, PORT))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    assert_eq!(seen_from(&body), Some(a6), "IPv6 pod to pod is not NATed");
    // Across nodes: through the bridge endpoint, the node's IPv6 route to the other node's
    // prefix, the fabric, and the other node's bridge endpoint.
    let body = lab
        .curl(&a, &url(c6, PORT))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    assert_eq!(seen_from(&body), Some(a6), "across nodes, not NATed");
    let body = lab.curl(&c, &url(a6, PORT)).expect("back the other way");
    assert_eq!(seen_from(&body), Some(c6));

    // The pod's IPv6 gateway (the bridge endpoint's ::2), which that connection went through,
    // was answered by the switch with the bridge endpoint's MAC, as VFP answers for the
    // host's endpoint.
    let neigh = ok(&["ip", "-n", &a, "-6", "neigh", "show", "fd00:10:244:1::2"]);
    let bridge = rt()
        .block_on(lab.hnsds[0].client().get_endpoint_by_name("cbr0_ep"))
        .expect("cbr0_ep")
        .expect("cbr0_ep exists");
    let mac = bridge
        .mac_address
        .map(|m| m.0.map(|b| format!("{b:02x}")).join(":"))
        .expect("cbr0_ep has a MAC");
    assert!(
        neigh.contains(&mac),
        "gateway neighbour {neigh:?}, bridge endpoint {mac}"
    );

    // An IPv6 ClusterIP: the load balancer kube-proxy makes for a dual-stack Service's second
    // family (Flags IPv6), in front of pod b.
    let pb = rt()
        .block_on(lab.hnsds[0].client().get_endpoint_by_name("pb_cbr0"))
        .expect("look up pb's endpoint")
        .expect("pb's endpoint");
    let lb: LoadBalancer = decode(json!({
        "HostComputeEndpoints": [pb.id.to_string()],
        "FrontendVIPs": ["fd00:10:96::100"],
        "PortMappings": [{"Protocol": 6, "InternalPort": PORT, "ExternalPort": 80}],
        "Flags": 2,
        "SchemaVersion": {"Major": 2, "Minor": 0}
    }));
    rt().block_on(lab.hnsds[0].client().create_load_balancer(&lb))
        .expect("the IPv6 load balancer");
    let vip: IpAddr = "fd00:10:96::100".parse().unwrap();
    let body = lab
        .curl(&a, &url(vip, 80))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    let seen = seen_from(&body).expect("an address");
    assert!(seen.is_ipv6(), "the backend saw an IPv6 client: {body}");
}

/// A two-node lab whose nodes have an Overlay network with an IPv6 subnet (VSID 4096, each
/// node's DR MAC and provider address, a RemoteSubnetRoute to the other's prefix) and a pod
/// each, made as the sim's overlay limitation test makes them: no Windows CNI plugin gives an
/// overlay pod IPv6, so the endpoints are written as HNS takes them. The pods' namespaces.
fn overlay_v6(lab: &mut Lab, profile: &str) -> (String, String) {
    let rt = rt();
    let prefix = |i: usize| format!("fd00:244:{}::", i + 1);
    let node = |i: usize| format!("192.168.77.{}", 11 + i);
    let dr = |i: usize| format!("00-15-5D-DD-00-{:02X}", i + 1);
    let mut pods = Vec::new();
    for i in 0..2 {
        lab.node(
            &format!("n{i}"),
            &format!("n{i}"),
            &format!("{}/24", node(i)),
            "192.168.77.1",
            profile,
        );
    }
    for i in 0..2 {
        let other = 1 - i;
        let client = lab.hnsds[i].client();
        let net: hcn::Network = decode(json!({
            "Name": "v6", "Type": "Overlay", "Flags": 8,
            "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": format!("{}/64", prefix(i)),
                "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}],
                "Routes": [{"NextHop": format!("{}1", prefix(i)), "DestinationPrefix": "::/0"}]}]}],
            "Policies": [
                {"Type": "NetAdapterName", "Settings": {"NetworkAdapterName": "eth0"}},
                {"Type": "DrMacAddress", "Settings": {"Address": dr(i)}},
                {"Type": "ProviderAddress", "Settings": {"ProviderAddress": node(i)}},
                {"Type": "RemoteSubnetRoute", "Settings": {
                    "DestinationPrefix": format!("{}/64", prefix(other)), "IsolationId": 4096,
                    "ProviderAddress": node(other), "DistributedRouterMacAddress": dr(other)}}
            ],
            "SchemaVersion": {"Major": 2, "Minor": 0}
        }));
        let net = rt
            .block_on(client.create_network(&net))
            .unwrap_or_else(|e| panic!("the IPv6 Overlay network on n{i}: {e}\n{}", lab.logs()));
        let ns = lab.add_ns(&format!("p{i}"));
        ok(&[
            "ip",
            "netns",
            "exec",
            &ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.accept_dad=0",
        ]);
        let ep: hcn::Endpoint = decode(json!({
            "Name": format!("p{i}_v6"), "HostComputeNetwork": net.id.to_string(),
            "IpConfigurations": [{"IpAddress": format!("{}a", prefix(i)), "PrefixLength": 64}],
            "MacAddress": format!("0E-2A-00-00-00-{:02X}", 0x10 + i),
            "Routes": [{"NextHop": format!("{}1", prefix(i)), "DestinationPrefix": "::/0"}],
            "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": node(i)}}]
        }));
        let ep = rt
            .block_on(client.create_endpoint(&ep))
            .expect("the pod's endpoint");
        let hns_ns: hcn::Namespace = decode(json!({"LinuxNetns": format!("/run/netns/{ns}")}));
        let hns_ns = rt
            .block_on(client.create_namespace(&hns_ns))
            .expect("namespace");
        rt.block_on(client.add_namespace_endpoint(hns_ns.id, ep.id))
            .expect("attach the pod");
        pods.push(ns);
    }
    (pods[0].clone(), pods[1].clone())
}

/// The "IPv6 on overlay" row with real packets: refused by ws2025's HNS (Ipv6OnOverlay), and
/// under `unrestricted` the pods' IPv6 crosses the fabric inside IPv4 VXLAN (VNI 4096) between
/// the nodes' provider addresses, the receiver seeing the client's own IPv6 address.
#[test]
fn ipv6_on_overlay_is_refused_on_ws2025_and_carried_inside_vxlan_unrestricted() {
    let (a6, b6): (IpAddr, IpAddr) = (
        "fd00:244:1::a".parse().unwrap(),
        "fd00:244:2::a".parse().unwrap(),
    );
    let mut lab = Lab::new("ov");
    let (a, b) = overlay_v6(&mut lab, "ws2025");
    lab.http_server_v6(&b, PORT);
    let refused = lab.curl(&a, &url(b6, PORT));
    assert!(
        refused.is_err(),
        "ws2025 carries no IPv6 on overlay: {refused:?}"
    );
    drop(lab);

    let mut lab = Lab::new("ou");
    let (a, b) = overlay_v6(&mut lab, "unrestricted");
    lab.http_server_v6(&b, PORT);
    let capture = lab.capture("n0");
    let body = lab
        .curl(&a, &url(b6, PORT))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    assert_eq!(
        seen_from(&body),
        Some(a6),
        "IPv6 pod to pod over VXLAN, not NATed"
    );
    let f = vxlan_v6_frame(capture);
    assert_eq!(u32::from_be_bytes([0, f[46], f[47], f[48]]), 4096, "VNI");
}

/// The lab's two nodes as the operator of a dual-stack Overlay cluster makes them
/// (`lab::dual_stack`), when the nodes' HNS carries IPv6 there: `flannel.4096` with the lease
/// and the node's IPv6 prefix under VNI 4096, and a `RemoteSubnetRoute` to the other node's
/// IPv6 prefix (its provider address, its network's DR MAC). Whether HNS carried IPv6 on
/// Overlay; when it does not, the nodes are left as they are.
fn overlay_nodes(lab: &mut Lab, profile: &str) -> (Vec<Node>, bool) {
    let rt = rt();
    let mut out = Vec::new();
    let mut carries = true;
    for i in 0..2u8 {
        let ip = Ipv4Addr::new(192, 168, 77, 11 + i);
        let lease: Ipv4Net = format!("10.244.{}.0/24", i + 1).parse().expect("lease");
        let idx = lab.node(
            &format!("n{i}"),
            &format!("n{i}"),
            &format!("{ip}/24"),
            "192.168.77.1",
            profile,
        );
        let ns = lab.hnsds[idx].node().expect("node namespace").to_string();
        let client = lab.hnsds[idx].client();
        carries &= rt
            .block_on(::lab::dual_stack::overlay_carries_ipv6(&client))
            .unwrap_or_else(|e| panic!("HNS's features on n{i}: {e}\n{}", lab.logs()));
        out.push(Node { ns, ip, lease });
    }
    if !carries {
        return (out, false);
    }
    let mut remotes = Vec::new();
    for (i, n) in out.iter().enumerate() {
        let client = lab.hnsds[i].client();
        rt.block_on(::lab::dual_stack::provision_overlay(
            &client,
            "flannel.4096",
            "eth0",
            n.lease,
            pod_prefix_v6(n.lease),
            4096,
        ))
        .unwrap_or_else(|e| panic!("dual-stack flannel.4096 on n{i}: {e}\n{}", lab.logs()));
        let dr_mac = rt
            .block_on(::lab::dual_stack::dr_mac(&client, "flannel.4096"))
            .expect("read the network")
            .expect("hnsd gives an Overlay network a DR MAC");
        remotes.push(::lab::dual_stack::RemoteNode {
            prefix: pod_prefix_v6(n.lease),
            provider_address: IpAddr::V4(n.ip),
            dr_mac,
        });
    }
    for i in 0..2 {
        let client = lab.hnsds[i].client();
        rt.block_on(::lab::dual_stack::route_remote_v6(
            &client,
            "flannel.4096",
            &[remotes[1 - i]],
            4096,
        ))
        .unwrap_or_else(|e| panic!("IPv6 route on n{i}: {e}\n{}", lab.logs()));
    }
    (out, true)
}

/// Dual-stack on Overlay the way the real pieces do it: under ws2025 HNS reports no
/// `LinuxIPv6Overlay` and sdnoverlay refuses `enableDualStack` in Windows' words, naming the
/// field; under `unrestricted` the operator's dual-stack `flannel.4096` and sdnoverlay give
/// pods both families, and IPv6 flows pod -> pod on one node and across nodes inside IPv4
/// VXLAN (VNI 4096) between the provider addresses, the receiver seeing the client's own
/// IPv6 address.
#[test]
fn sdnoverlay_gives_pods_ipv6_only_where_hns_carries_it_and_it_crosses_inside_vxlan() {
    let plugins = tempfile::tempdir().expect("plugins dir");
    ok(&[
        env!("CARGO_BIN_EXE_winnet"),
        "install-cni",
        &plugins.path().to_string_lossy(),
    ]);

    let mut lab = Lab::new("o5");
    let (nodes, carries) = overlay_nodes(&mut lab, "ws2025");
    assert!(!carries, "ws2025's HNS reports no LinuxIPv6Overlay");
    // The operator's dual-stack network, made anyway: the plugin still refuses.
    let client = lab.hnsds[0].client();
    rt().block_on(::lab::dual_stack::provision_overlay(
        &client,
        "flannel.4096",
        "eth0",
        nodes[0].lease,
        pod_prefix_v6(nodes[0].lease),
        4096,
    ))
    .expect("the network");
    let (_, refused) = add_pod(&mut lab, plugins.path(), (0, &nodes[0]), "pr", true);
    let e = refused.expect_err("ws2025: sdnoverlay refuses dual-stack");
    assert!(e.contains("optionalFlags.enableDualStack"), "{e}");
    assert!(
        e.contains("Overlay (VXLAN) networks on Windows do not support dual-stack networking"),
        "{e}"
    );
    drop(lab);

    let mut lab = Lab::new("o6");
    let (nodes, carries) = overlay_nodes(&mut lab, "unrestricted");
    assert!(carries, "unrestricted's HNS reports LinuxIPv6Overlay");
    let mut added = Vec::new();
    for (i, name) in [(0, "pa"), (0, "pb"), (1, "pc")] {
        let (ns, ips) = add_pod(&mut lab, plugins.path(), (i, &nodes[i]), name, true);
        let ips = ips.unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
        added.push((ns, ips));
    }
    assert_eq!(
        added[0].1,
        vec![
            "10.244.1.10".parse::<IpAddr>().unwrap(),
            "fd00:10:244:1::a".parse().unwrap()
        ],
        "an address of each family from host-local's two ranges"
    );
    for (ns, _) in &added {
        lab.http_server_v6(ns, PORT);
    }
    let [(a, a_ips), (_, b_ips), (c, c_ips)] = &added[..] else {
        unreachable!("three pods")
    };
    let (a6, b6, c6) = (v6(a_ips), v6(b_ips), v6(c_ips));
    let body = lab
        .curl(a, &url(b6, PORT))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    assert_eq!(seen_from(&body), Some(a6), "one node, not NATed");
    let capture = lab.capture("n0");
    let body = lab
        .curl(a, &url(c6, PORT))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    assert_eq!(seen_from(&body), Some(a6), "across nodes, not NATed");
    let body = lab.curl(c, &url(a6, PORT)).expect("back the other way");
    assert_eq!(seen_from(&body), Some(c6));
    let f = vxlan_v6_frame(capture);
    assert_eq!(u32::from_be_bytes([0, f[46], f[47], f[48]]), 4096, "VNI");
}

/// A frame of IPv6 inside IPv4 VXLAN between the lab's two provider addresses.
fn vxlan_v6_frame(capture: testkit::capture::Capture) -> Vec<u8> {
    // Ethernet + IPv4 (20) + UDP to 4789 + VXLAN (8), then the inner frame's EtherType.
    let vxlan6 = |f: &Vec<u8>| {
        f.len() > 64
            && f[12..14] == [0x08, 0x00]
            && f[36..38] == [0x12, 0xb5]
            && f[62..64] == [0x86, 0xdd]
    };
    let frames = capture.until(
        "IPv6 inside VXLAN",
        std::time::Duration::from_secs(5),
        |fs| fs.iter().any(vxlan6),
    );
    let f = frames.iter().find(|f| vxlan6(f)).expect("a VXLAN frame");
    let ends = [&f[26..30], &f[30..34]];
    let pas: [&[u8]; 2] = [&[192, 168, 77, 11], &[192, 168, 77, 12]];
    assert!(
        ends == pas || ends == [pas[1], pas[0]],
        "between the provider addresses: {ends:?}"
    );
    f.clone()
}
