//! L2Bridge (flannel host-gw, win-bridge, kube-proxy winkernel) on an in-memory two-node
//! cluster: one test per flow, each asserting delivery and the headers the receiver saw.

use crate::topology::*;
use hns::Profile;
use lab::Who;
use lab::sim::cluster::addr;

fn t() -> Topo {
    topo(Backend::HostGw, Profile::Ws2022)
}

#[test]
fn pod_to_pod_on_the_same_node_sees_the_pods_address_and_the_hosts_mac() {
    let mut t = t();
    let (a, b) = (t.a, t.b);
    let ex = t.c.tcp_syn(a, t.ip(b), 8080);
    delivered(&ex, b, t.ip(a), t.ip(b), 8080);
    // L2Bridge: the container MAC is rewritten to the host's on the way out.
    assert_eq!(ex.seen().unwrap().src_mac.0, addr::node_mac(0));
}

#[test]
fn pod_to_pod_across_nodes_by_ip_keeps_both_addresses() {
    let mut t = t();
    let (a, d) = (t.a, t.d);
    let ex = t.c.tcp_syn(a, t.ip(d), 8080);
    delivered(&ex, d, t.ip(a), t.ip(d), 8080);
    let udp = t.c.udp(a, t.ip(d), 53);
    delivered(&udp, d, t.ip(a), t.ip(d), 53);
    let ping = t.c.ping(a, t.ip(d));
    assert!(ping.ok(), "{ping}");
}

#[test]
fn pod_to_cluster_ip_reaches_a_local_backend_translated_and_the_reply_comes_from_the_vip() {
    let mut t = t();
    let (a, b) = (t.a, t.b);
    let (syn, data) = t.c.tcp_connect(a, ip(WEB_LOCAL), 80);
    // Not DSR, and win-bridge's L2Bridge has no SourceVIP: the source is the node's address.
    delivered(&syn, b, addr::node(0), t.ip(b), 8080);
    delivered(&data, b, addr::node(0), t.ip(b), 8080);
    let reply = syn.reply.unwrap();
    assert_eq!((reply.src, reply.src_port()), (ip(WEB_LOCAL), 80));
}

#[test]
fn pod_to_cluster_ip_reaches_a_backend_on_the_other_node() {
    let mut t = t();
    let (a, d) = (t.a, t.d);
    let (syn, data) = t.c.tcp_connect(a, ip(WEB_REMOTE), 80);
    delivered(&syn, d, addr::node(0), t.ip(d), 8080);
    delivered(&data, d, addr::node(0), t.ip(d), 8080);
    assert_eq!(syn.reply.unwrap().src, ip(WEB_REMOTE));
}

#[test]
fn external_to_node_port_on_either_node_reaches_the_backend() {
    let mut t = t();
    let b = t.b;
    for n in 0..2 {
        let (syn, data) = t.c.tcp_connect(Who::External, addr::node(n), NODE_PORT);
        // The node translates the source to its own address, so replies come back to it.
        delivered(&syn, b, addr::node(n), t.ip(b), 8080);
        delivered(&data, b, addr::node(n), t.ip(b), 8080);
        let r = syn.reply.unwrap();
        assert_eq!((r.src, r.src_port()), (addr::node(n), NODE_PORT));
    }
}

#[test]
fn external_to_the_load_balancer_ingress_ip_reaches_the_backend() {
    let mut t = t();
    let b = t.b;
    let (syn, data) = t.c.tcp_connect(Who::External, ip(INGRESS), 80);
    delivered(&syn, b, addr::node(0), t.ip(b), 8080);
    delivered(&data, b, addr::node(0), t.ip(b), 8080);
    assert_eq!(syn.reply.unwrap().src, ip(INGRESS));
}

#[test]
fn pod_to_external_by_ip_is_translated_to_the_node_address() {
    let mut t = t();
    let a = t.a;
    for port in [80, 443] {
        let ex = t.c.tcp_syn(a, addr::INTERNET, port);
        delivered(&ex, Who::External, addr::node(0), addr::INTERNET, port);
        assert_eq!(ex.seen().unwrap().src_mac.0, addr::node_mac(0));
    }
    let dns = t.c.udp(a, addr::INTERNET, 53);
    delivered(&dns, Who::External, addr::node(0), addr::INTERNET, 53);
    // The node subnet is an OutBoundNAT exception in flannel's config: not translated.
    let plain = t.c.udp(a, addr::ROUTER, 53);
    assert_eq!(plain.seen().unwrap().src, t.ip(a), "{plain}");
}

#[test]
fn node_to_pod_on_its_own_node_and_on_the_other() {
    let mut t = t();
    let (b, d) = (t.b, t.d);
    // Through the bridge endpoint cbr0_ep, whose address is the source.
    let ex = t.c.tcp_syn(Who::Node(0), t.ip(b), 8080);
    delivered(&ex, b, ip("10.244.1.2"), t.ip(b), 8080);
    // Through the host-gw route to node2.
    let ex = t.c.tcp_syn(Who::Node(0), t.ip(d), 8080);
    delivered(&ex, d, addr::node(0), t.ip(d), 8080);
}

#[test]
fn pod_to_node_sees_the_pod_address() {
    let mut t = t();
    let a = t.a;
    for n in 0..2 {
        let ex = t.c.tcp_syn(a, addr::node(n), 10250);
        delivered(&ex, Who::Node(n), t.ip(a), addr::node(n), 10250);
    }
}

#[test]
fn the_pods_gateway_is_answered_by_the_switch_with_the_bridge_endpoints_mac() {
    let t = t();
    let a = t.a;
    let Who::Pod(_, ep) = a else { unreachable!() };
    let pod_mac = t.c.stack(a).unwrap().interfaces[0].mac;
    let std::net::IpAddr::V4(pod_ip) = t.ip(a) else {
        panic!("IPv4 pods")
    };
    let node = &t.c.nodes[0];
    let mut compiler = node.compiler();
    let cbr0_ep = compiler
        .host_interfaces()
        .into_iter()
        .find(|i| i.name == "cbr0_ep")
        .expect("flannel's bridge endpoint is a host vNIC");
    let port = compiler.endpoint_port(ep).unwrap();
    let ask = vfp::packet::arp_request(pod_mac, pod_ip, "10.244.1.2".parse().unwrap());
    let tr = compiler.switch_mut().trace(port, &ask, vfp::Timestamp(0));
    assert_eq!(tr.disposition, vfp::Disposition::Reply(port), "{tr}");
    let answer = tr.frame.unwrap();
    // ARP reply: sender MAC (bytes 22..28) is cbr0_ep's, sender address .2.
    assert_eq!(answer[20..22], [0, 2]);
    assert_eq!(answer[22..28], cbr0_ep.mac.0);
    assert_eq!(answer[28..32], [10, 244, 1, 2]);
}
