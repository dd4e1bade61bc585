//! Real packets through hnsd's switch (issue 5): Windows nodes as network namespaces on a
//! fabric, each with `winnet hnsd --node-netns`, pods as namespaces whose vNIC is a TAP that
//! hnsd made, real programs talking through them. Run as root (CI is).

mod lab;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use hcn::{Endpoint, Namespace};
use lab::cluster::{Cluster, Mode, OUTSIDE, decode, node_ip};
use lab::{ok, seen_from};
use serde_json::json;

/// How long a test waits for the frames it caused to be read off the fabric. They crossed it
/// before the client had its answer, so this is a bound for a failure, not a delay.
const WIRE: Duration = Duration::from_secs(5);

/// The `ip -j addr` of `dev` in `ns`, as "addr/len" strings.
fn addresses(ns: &str, dev: &str) -> Vec<String> {
    let out = ok(&["ip", "-n", ns, "-j", "addr", "show", "dev", dev]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["scope"] != "link")
        .filter_map(|a| {
            Some(format!(
                "{}/{}",
                a["local"].as_str()?,
                a["prefixlen"].as_u64()?
            ))
        })
        .collect()
}

fn mac_of(ns: &str, dev: &str) -> [u8; 6] {
    let out = ok(&["ip", "-n", ns, "-j", "link", "show", "dev", dev]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let s = v[0]["address"].as_str().unwrap_or_default().to_string();
    let b: Vec<u8> = s
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect();
    b.try_into()
        .unwrap_or_else(|_| panic!("no MAC for {dev} in {ns}: {out}"))
}

#[test]
fn l2bridge_pods_on_one_node_talk_tcp_udp_icmp_and_with_the_node() {
    let mut c = Cluster::new("a", 1, Mode::L2Bridge, "ws2022");
    let a = c.pod(0, "pa", 10);
    let b = c.pod(0, "pb", 11);
    // The pod's vNIC: a TAP named as CNI asked (eth0 by default) with its address and route.
    assert_eq!(
        addresses(&a, "eth0"),
        vec!["10.244.1.10/24".to_string()],
        "{}",
        c.lab.logs()
    );
    let routes = ok(&["ip", "-n", &a, "route", "show", "default"]);
    assert!(
        routes.contains("via 10.244.1.2"),
        "pod default route: {routes}"
    );
    // The node's addresses moved to the management vNIC, as Windows does.
    let node = c.node_ns(0);
    assert_eq!(
        addresses(&node, "vEthernet-eth0"),
        vec![format!("{}/24", node_ip(0))]
    );
    assert!(
        addresses(&node, "eth0").is_empty(),
        "the NIC keeps no address"
    );

    for ns in [&a, &b] {
        c.lab.http_server(ns, 8080);
        c.lab.udp_echo(ns, 5353);
    }
    let body = c
        .lab
        .curl(&a, "http://10.244.1.11:8080/")
        .unwrap_or_else(|e| panic!("{e}\n{}", c.lab.logs()));
    assert_eq!(
        seen_from(&body),
        Some("10.244.1.10".parse().unwrap()),
        "pod to pod is not NATed"
    );
    let body = c.lab.curl(&b, "http://10.244.1.10:8080/").expect("b -> a");
    assert_eq!(seen_from(&body), Some("10.244.1.11".parse().unwrap()));
    let reply = c
        .lab
        .udp(&a, c.addr("10.244.1.11", 5353), "hi")
        .expect("UDP a -> b");
    assert_eq!(reply, "echo hi from 10.244.1.10");
    let reply = c
        .lab
        .udp(&b, c.addr("10.244.1.10", 5353), "yo")
        .expect("UDP b -> a");
    assert_eq!(reply, "echo yo from 10.244.1.11");
    assert!(c.lab.ping(&a, "10.244.1.11"), "ping a -> b");

    // node -> pod (through cbr0_ep, the host vNIC on the pod network) and pod -> node.
    c.lab.http_server(&node, 9090);
    let body = c
        .lab
        .curl(&node, "http://10.244.1.10:8080/")
        .expect("node -> pod");
    assert!(seen_from(&body).is_some());
    let body = c
        .lab
        .curl(&a, &format!("http://{}:9090/", node_ip(0)))
        .expect("pod -> node");
    assert_eq!(
        seen_from(&body),
        Some("10.244.1.10".parse().unwrap()),
        "the node subnet is an OutBoundNAT exception"
    );
}

/// Parsed headers of a captured frame.
struct Seen {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src_ip: Option<IpAddr>,
    dst_ip: Option<IpAddr>,
    udp_dst: Option<u16>,
    payload: Vec<u8>,
}

fn parse(f: &[u8]) -> Option<Seen> {
    let mac = |at: usize| -> Option<[u8; 6]> { f.get(at..at + 6)?.try_into().ok() };
    let mut s = Seen {
        dst_mac: mac(0)?,
        src_mac: mac(6)?,
        src_ip: None,
        dst_ip: None,
        udp_dst: None,
        payload: Vec::new(),
    };
    if f.get(12..14)? == [0x08, 0x00] {
        let ip = f.get(14..)?;
        let ihl = usize::from(ip.first()? & 0xf) * 4;
        s.src_ip = Some(IpAddr::from(<[u8; 4]>::try_from(ip.get(12..16)?).ok()?));
        s.dst_ip = Some(IpAddr::from(<[u8; 4]>::try_from(ip.get(16..20)?).ok()?));
        if *ip.get(9)? == 17 {
            let udp = ip.get(ihl..)?;
            s.udp_dst = Some(u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]));
            s.payload = udp.get(8..)?.to_vec();
        }
    }
    Some(s)
}

#[test]
fn l2bridge_across_nodes_rewrites_pod_macs_to_the_hosts() {
    let mut c = Cluster::new("b", 2, Mode::L2Bridge, "ws2022");
    let a = c.pod(0, "pa", 10);
    let b = c.pod(1, "pb", 10);
    c.lab.http_server(&b, 8080);
    c.lab.http_server(&a, 8080);
    let pod_mac = mac_of(&a, "eth0");
    let host_mac = mac_of(&c.node_ns(0), "vEthernet-eth0");
    let capture = c.lab.capture("n0");
    let res = c.lab.curl(&a, "http://10.244.2.10:8080/");
    let body = res.unwrap_or_else(|e| panic!("{e}\n{}", c.lab.logs()));
    assert_eq!(
        seen_from(&body),
        Some("10.244.1.10".parse().unwrap()),
        "pod to pod across nodes is not NATed"
    );
    let pod_a: IpAddr = "10.244.1.10".parse().unwrap();
    let frames = capture.until("a frame from pod a", WIRE, |frames| {
        frames
            .iter()
            .filter_map(|f| parse(f))
            .any(|s| s.src_ip == Some(pod_a))
    });
    let body = c
        .lab
        .curl(&b, "http://10.244.1.10:8080/")
        .expect("b -> a across nodes");
    assert_eq!(seen_from(&body), Some("10.244.2.10".parse().unwrap()));
    let from_a: Vec<Seen> = frames
        .iter()
        .filter_map(|f| parse(f))
        .filter(|s| s.src_ip == Some("10.244.1.10".parse().unwrap()))
        .collect();
    assert!(
        !from_a.is_empty(),
        "no frame from pod a on the fabric ({} captured)",
        frames.len()
    );
    for s in &from_a {
        assert_eq!(
            s.src_mac, host_mac,
            "pod a's frames leave with the host's MAC"
        );
        assert_ne!(s.src_mac, pod_mac);
    }
}

#[test]
fn overlay_across_nodes_is_vxlan_4096_between_provider_addresses() {
    let mut c = Cluster::new("c", 2, Mode::Overlay, "ws2022");
    let a = c.pod(0, "pa", 10);
    let b = c.pod(1, "pb", 10);
    c.lab.http_server(&b, 8080);
    assert!(
        ok(&["ip", "-n", &a, "-j", "link", "show", "eth0"]).contains("\"mtu\":1450"),
        "overlay pods get the MTU less the VXLAN overhead"
    );
    let capture = c.lab.capture("n0");
    let res = c.lab.curl(&a, "http://10.244.2.10:8080/");
    let body = res.unwrap_or_else(|e| panic!("{e}\n{}", c.lab.logs()));
    assert_eq!(seen_from(&body), Some("10.244.1.10".parse().unwrap()));
    let frames = capture.until("VXLAN between the nodes", WIRE, |frames| {
        frames
            .iter()
            .filter_map(|f| parse(f))
            .any(|s| s.udp_dst == Some(4789))
    });
    let vxlan: Vec<Seen> = frames
        .iter()
        .filter_map(|f| parse(f))
        .filter(|s| s.udp_dst == Some(4789))
        .collect();
    assert!(
        !vxlan.is_empty(),
        "no VXLAN on the fabric ({} frames)\n{}",
        frames.len(),
        c.lab.logs()
    );
    for s in &vxlan {
        let vni = u32::from_be_bytes([0, s.payload[4], s.payload[5], s.payload[6]]);
        assert_eq!(vni, 4096, "VNI");
        assert_eq!(s.payload[0] & 0x08, 0x08, "the VNI flag is set");
        let pas: Vec<IpAddr> = vec![node_ip(0).parse().unwrap(), node_ip(1).parse().unwrap()];
        assert!(
            pas.contains(&s.src_ip.unwrap()) && pas.contains(&s.dst_ip.unwrap()),
            "outer addresses are the PAs"
        );
        let inner = parse(&s.payload[8..]).expect("inner frame");
        if inner.src_ip == Some("10.244.1.10".parse().unwrap()) {
            assert_eq!(
                inner.dst_mac,
                [0x00, 0x15, 0x5d, 0xdd, 0x00, 0x02],
                "inner destination is node 2's DR MAC"
            );
        }
    }
}

fn external_flows(profile: &str, tag: &str) -> bool {
    let mut c = Cluster::new(tag, 1, Mode::L2Bridge, profile);
    let a = c.pod(0, "pa", 10);
    c.lab.http_server(&c.external.clone(), 8080);
    let body = c
        .lab
        .curl(&a, &format!("http://{OUTSIDE}:8080/"))
        .unwrap_or_else(|e| panic!("{e}\n{}", c.lab.logs()));
    assert_eq!(
        seen_from(&body),
        Some(node_ip(0).parse().unwrap()),
        "pod -> outside is SNATed to the node"
    );
    c.lab.ping(&a, OUTSIDE)
}

#[test]
fn pod_to_external_is_snat_to_the_node_and_ping_follows_the_profile() {
    assert!(
        !external_flows("ws2022", "d"),
        "ws2022: ICMP is not transposed through OutboundNAT"
    );
    assert!(
        external_flows("unrestricted", "e"),
        "unrestricted: ping to an external host works"
    );
}

#[test]
fn a_tcp_stream_between_pods_survives_hnsd_being_killed() {
    use std::io::{Read, Write};
    let mut c = Cluster::new("f", 1, Mode::L2Bridge, "ws2022");
    let a = c.pod(0, "pa", 10);
    let b = c.pod(0, "pb", 11);
    c.lab.tcp_echo(&b, 7000);
    let mut s = c
        .lab
        .connect(&a, c.addr("10.244.1.11", 7000))
        .expect("connect a -> b");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let echo = |s: &mut std::net::TcpStream, i: u32| {
        let msg = format!("{i:08}");
        s.write_all(msg.as_bytes()).expect("write");
        let mut back = [0u8; 8];
        s.read_exact(&mut back).map(|()| back == msg.as_bytes())
    };
    for i in 0..20 {
        assert!(echo(&mut s, i).expect("echo before"), "echo {i}");
    }
    c.lab.hnsds[0].kill();
    // The pods keep their interfaces and addresses while hnsd is gone.
    assert_eq!(addresses(&a, "eth0"), vec!["10.244.1.10/24".to_string()]);
    let written = Instant::now();
    let msg = b"down0000";
    s.write_all(msg).expect("write while hnsd is down");
    c.lab.hnsds[0].restart();
    let up = Instant::now();
    // The segment written while hnsd was down is lost and TCP retransmits it with exponential
    // backoff, so its first retransmission after hnsd is back comes up to as long after as
    // hnsd was down, plus one RTO (well under a second between two namespaces, even loaded).
    // The stream must resume at that retransmission: the switch forwards as soon as hnsd is
    // back. A fixed bound would measure how long the restart took, not the switch.
    let down = up - written;
    let retransmitted = down + Duration::from_secs(1);
    s.set_read_timeout(Some(retransmitted + Duration::from_secs(1)))
        .expect("timeout");
    let mut back = [0u8; 8];
    s.read_exact(&mut back)
        .unwrap_or_else(|e| panic!("the stream did not resume: {e}\n{}", c.lab.logs()));
    assert_eq!(&back, msg);
    let resumed = up.elapsed();
    assert!(
        resumed < retransmitted,
        "traffic resumed {resumed:?} after hnsd was back, later than TCP's next retransmission \
         (hnsd was down {down:?})"
    );
    for i in 20..40 {
        assert!(echo(&mut s, i).expect("echo after"), "echo {i}");
    }
}

#[test]
fn a_namespace_made_by_hnsd_carries_dns_and_everything_goes_back_when_deleted() {
    let c = Cluster::new("g", 1, Mode::L2Bridge, "ws2022");
    let client = c.client(0);
    let node = c.node_ns(0);
    // An endpoint with DNS, in a HostComputeNamespace created without a Linux namespace.
    let ep: Endpoint = decode(json!({
        "Name": "px_cbr0", "HostComputeNetwork": c.networks[0].to_string(),
        "IpConfigurations": [{"IpAddress": "10.244.1.20", "PrefixLength": 24}],
        "Routes": [{"NextHop": "10.244.1.2", "DestinationPrefix": "0.0.0.0/0"}],
        "Dns": {"Domain": "default.svc.cluster.local", "Search": ["svc.cluster.local", "cluster.local"],
                "ServerList": ["10.96.0.10"]}
    }));
    let ep =
        c.rt.block_on(client.create_endpoint(&ep))
            .expect("endpoint");
    let ns: Namespace = decode(json!({"SchemaVersion": {"Major": 2, "Minor": 0}}));
    let ns =
        c.rt.block_on(client.create_namespace(&ns))
            .expect("namespace");
    c.rt.block_on(client.add_namespace_endpoint(ns.id, ep.id))
        .expect("attach");
    let name = format!("hcn-{}", ns.id);
    assert!(
        std::path::Path::new("/run/netns").join(&name).exists(),
        "hnsd made the namespace {name}\n{}",
        c.lab.logs()
    );
    assert_eq!(addresses(&name, "eth0"), vec!["10.244.1.20/24".to_string()]);
    let resolv = std::fs::read_to_string(format!("/etc/netns/{name}/resolv.conf"))
        .expect("resolv.conf of the pod's namespace");
    // The pod's Windows DNS client (hnsd's stub), with no search line that glibc would append
    // to dotted names (tests/dns_client.rs resolves through it).
    assert_eq!(
        resolv, "nameserver 127.0.0.53\noptions timeout:11 attempts:1\n",
        "{resolv}"
    );

    // Delete it all: the namespace goes with its HNS namespace, the NIC gets its address back.
    c.rt.block_on(client.remove_namespace_endpoint(ns.id, ep.id))
        .expect("detach");
    c.rt.block_on(client.delete_namespace(ns.id))
        .expect("delete namespace");
    c.rt.block_on(client.delete_endpoint(ep.id))
        .expect("delete endpoint");
    assert!(
        !std::path::Path::new("/run/netns").join(&name).exists(),
        "the namespace hnsd made is removed with it"
    );
    assert!(!std::path::Path::new(&format!("/etc/netns/{name}")).exists());
    // flannel's cbr0_ep: detached from the host, deleted.
    for n in c.rt.block_on(client.list_namespaces()).expect("list") {
        for e in n.endpoint_ids().collect::<Vec<_>>() {
            c.rt.block_on(client.remove_namespace_endpoint(n.id, e))
                .expect("detach");
        }
        c.rt.block_on(client.delete_namespace(n.id))
            .expect("delete namespace");
    }
    for e in c.rt.block_on(client.list_endpoints()).expect("list") {
        c.rt.block_on(client.delete_endpoint(e.id))
            .expect("delete endpoint");
    }
    c.rt.block_on(client.delete_network(c.networks[0]))
        .expect("delete the network");
    assert_eq!(
        addresses(&node, "eth0"),
        vec![format!("{}/24", node_ip(0))],
        "the NIC has its address back"
    );
    let links = ok(&["ip", "-n", &node, "link", "show"]);
    assert!(
        !links.contains("vEthernet-eth0"),
        "the management vNIC is gone: {links}"
    );
    let routes = ok(&["ip", "-n", &node, "route", "show", "default"]);
    assert!(
        routes.contains("dev eth0"),
        "the default route is back on the NIC: {routes}"
    );
}
