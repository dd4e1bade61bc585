//! Overlay (flannel vxlan, win-overlay, kube-proxy winkernel with a source VIP) on an
//! in-memory two-node cluster: one test per flow, each asserting delivery and the headers the
//! receiver saw.

use crate::topology::*;
use hns::Profile;
use lab::Who;
use lab::sim::cluster::addr;

fn t() -> Topo {
    topo(Backend::Vxlan, Profile::Ws2022)
}

/// kube-proxy's source VIP on node `n` (flannel's .2).
fn source_vip(n: usize) -> std::net::IpAddr {
    ip(&format!("10.244.{}.2", n + 1))
}

#[test]
fn pod_to_pod_on_the_same_node() {
    let mut t = t();
    let (a, b) = (t.a, t.b);
    let ex = t.c.tcp_syn(a, t.ip(b), 8080);
    delivered(&ex, b, t.ip(a), t.ip(b), 8080);
}

#[test]
fn pod_to_pod_across_nodes_through_vxlan_keeps_both_addresses() {
    let mut t = t();
    let (a, d) = (t.a, t.d);
    let ex = t.c.tcp_syn(a, t.ip(d), 8080);
    delivered(&ex, d, t.ip(a), t.ip(d), 8080);
    let ping = t.c.ping(a, t.ip(d));
    delivered(&ping, d, t.ip(a), t.ip(d), 0);
}

#[test]
fn pod_to_cluster_ip_local_and_remote_backends_see_the_source_vip() {
    let mut t = t();
    let (a, b, d) = (t.a, t.b, t.d);
    let (syn, data) = t.c.tcp_connect(a, ip(WEB_LOCAL), 80);
    delivered(&syn, b, source_vip(0), t.ip(b), 8080);
    delivered(&data, b, source_vip(0), t.ip(b), 8080);
    assert_eq!(syn.reply.unwrap().src, ip(WEB_LOCAL));
    let (syn, data) = t.c.tcp_connect(a, ip(WEB_REMOTE), 80);
    delivered(&syn, d, source_vip(0), t.ip(d), 8080);
    delivered(&data, d, source_vip(0), t.ip(d), 8080);
    assert_eq!(syn.reply.unwrap().src, ip(WEB_REMOTE));
}

#[test]
fn external_to_node_port_on_either_node_reaches_the_backend() {
    let mut t = t();
    let b = t.b;
    for n in 0..2 {
        let (syn, data) = t.c.tcp_connect(Who::External, addr::node(n), NODE_PORT);
        delivered(&syn, b, source_vip(n), t.ip(b), 8080);
        delivered(&data, b, source_vip(n), t.ip(b), 8080);
        let r = syn.reply.unwrap();
        assert_eq!((r.src, r.src_port()), (addr::node(n), NODE_PORT));
    }
}

#[test]
fn external_to_the_load_balancer_ingress_ip_reaches_the_backend() {
    let mut t = t();
    let b = t.b;
    let (syn, data) = t.c.tcp_connect(Who::External, ip(INGRESS), 80);
    delivered(&syn, b, source_vip(0), t.ip(b), 8080);
    delivered(&data, b, source_vip(0), t.ip(b), 8080);
    assert_eq!(syn.reply.unwrap().src, ip(INGRESS));
}

#[test]
fn pod_to_external_by_ip_is_translated_to_the_node_address() {
    let mut t = t();
    let (a, d) = (t.a, t.d);
    let ex = t.c.tcp_syn(a, addr::INTERNET, 80);
    delivered(&ex, Who::External, addr::node(0), addr::INTERNET, 80);
    let ex = t.c.udp(d, addr::INTERNET, 53);
    delivered(&ex, Who::External, addr::node(1), addr::INTERNET, 53);
}

#[test]
fn node_to_its_pods_through_host_route() {
    let mut t = t();
    let b = t.b;
    let ex = t.c.tcp_syn(Who::Node(0), t.ip(b), 8080);
    delivered(&ex, b, addr::node(0), t.ip(b), 8080);
}

#[test]
fn pod_to_node_sees_the_pod_address_on_its_own_node() {
    let mut t = t();
    let a = t.a;
    let ex = t.c.tcp_syn(a, addr::node(0), 10250);
    delivered(&ex, Who::Node(0), t.ip(a), addr::node(0), 10250);
    // Another node is outside the pod network: OutBoundNAT translates to this node's address.
    let ex = t.c.tcp_syn(a, addr::node(1), 10250);
    delivered(&ex, Who::Node(1), addr::node(0), addr::node(1), 10250);
}

#[test]
fn without_host_route_the_host_and_its_pods_do_not_reach_each_other() {
    let mut t = t();
    let (a, b) = (t.a, t.b);
    let node = &mut t.c.nodes[0];
    let net = node.network.clone().unwrap().id;
    let body = serde_json::json!({"ResourceType": "Policy", "RequestType": "Remove",
        "Settings": {"Policies": [{"Type": "HostRoute", "Settings": {}}]}});
    let req: hcn::ModifyRequest = hcn::decode_value(body).unwrap();
    node.hns(hns::state::WriteOp::Modify(hns::Kind::Network, net, req))
        .unwrap();
    node.host.flush_neighbors();
    let ex = t.c.tcp_syn(a, addr::node(0), 10250);
    assert!(ex.request.is_none(), "{ex}");
    assert_eq!(ex.drops[0].reason, vfp::DropReason::BlockedByRule);
    assert!(
        ex.drops[0].trace.contains("network flannel.4096 (Overlay)"),
        "{}",
        ex.drops[0].trace
    );
    let ex = t.c.tcp_syn(Who::Node(0), t.ip(b), 8080);
    assert!(ex.request.is_none(), "{ex}");
}
