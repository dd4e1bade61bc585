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

/// A dual-stack Overlay cluster where HNS carries IPv6 there (unrestricted), as its operator
/// makes it (`lab::dual_stack`): pods from sdnoverlay with an address of each family talk IPv6
/// across nodes inside VXLAN, also after flanneld starts again on every node (it adopts the
/// operator's network and removes only stale IPv4 routes, its own, not the IPv6 ones).
#[test]
fn dual_stack_overlay_pods_talk_ipv6_across_nodes_and_a_flanneld_restart_keeps_the_routes() {
    use flannel::config::BackendType;
    use lab::PodOptions;
    use lab::sim::agents::flannel::leases;
    use lab::sim::cluster::Cluster;

    let names = ["node1".to_string(), "node2".to_string()];
    let mut c = Cluster::dual_stack(&names, Profile::Unrestricted).unwrap();
    let subnets = leases(BackendType::Vxlan, 2).unwrap();
    assert!(c.provision_dual_stack_overlay(&subnets).unwrap());
    c.flannel(BackendType::Vxlan, &subnets).unwrap();
    c.route_ipv6_overlay(&subnets).unwrap();
    let a = c.add_pod(0, "a", PodOptions::default()).unwrap();
    let d = c.add_pod(1, "d", PodOptions::default()).unwrap();
    let v6 = |c: &Cluster, w: Who| {
        c.stack(w)
            .and_then(|s| s.addresses().find(|a| a.is_ipv6()))
            .expect("an IPv6 address from sdnoverlay")
    };
    let (a6, d6) = (v6(&c, a), v6(&c, d));
    assert_eq!(a6, ip("fd00:10:244:1::a"));
    let ex = c.tcp_syn(a, d6, 8080);
    delivered(&ex, d, a6, d6, 8080);

    // flanneld starting again on node1: the real backend adopts the network and reconciles
    // its routes with node2's lease, as its watch delivers it.
    let conf = lab::sim::agents::flannel::net_conf(BackendType::Vxlan).unwrap();
    let lease = |i: usize, c: &Cluster| flannel::lease::Lease {
        subnet: subnets[i],
        attrs: flannel::lease::LeaseAttrs {
            public_ip: match addr::node(i) {
                std::net::IpAddr::V4(v4) => v4,
                other => panic!("an IPv4 node address, not {other}"),
            },
            backend_type: BackendType::Vxlan,
            vxlan: Some(flannel::lease::VxlanData {
                vni: 4096,
                vtep_mac: c.dr_mac(i).map(|m| flannel::lease::Mac(m.0)),
            }),
        },
    };
    let (mine, theirs) = (lease(0, &c), lease(1, &c));
    let node = &mut c.nodes[0];
    let mut b = flannel::windows::WindowsBackend::on_stack(
        node.hns.clone(),
        node.node_stack(),
        conf,
        flannel::Node {
            iface: lab::sim::agents::flannel::NIC.into(),
            public_ip: mine.attrs.public_ip,
            mtu: 1500,
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(b.setup(&mine)).unwrap();
    rt.block_on(b.reconcile(&[theirs])).unwrap();
    node.sync_host();
    let ex = c.tcp_syn(a, d6, 8080);
    delivered(&ex, d, a6, d6, 8080);
    let v4 = c.ip_of(d).unwrap();
    let ex = c.tcp_syn(a, v4, 8080);
    delivered(&ex, d, c.ip_of(a).unwrap(), v4, 8080);
}

/// Where HNS does not carry IPv6 on Overlay (every Windows build), the operator leaves the
/// nodes IPv4-only: nothing is made, and pods get IPv4 from win-overlay as before.
#[test]
fn without_ipv6_overlay_the_operator_leaves_overlay_nodes_single_stack() {
    use flannel::config::BackendType;
    use lab::PodOptions;
    use lab::sim::agents::flannel::leases;
    use lab::sim::cluster::Cluster;

    let names = ["node1".to_string(), "node2".to_string()];
    let mut c = Cluster::dual_stack(&names, Profile::Ws2025).unwrap();
    let subnets = leases(BackendType::Vxlan, 2).unwrap();
    assert!(!c.provision_dual_stack_overlay(&subnets).unwrap());
    c.flannel(BackendType::Vxlan, &subnets).unwrap();
    let a = c.add_pod(0, "a", PodOptions::default()).unwrap();
    let addrs: Vec<_> = c.stack(a).unwrap().addresses().collect();
    assert!(addrs.iter().all(|a| a.is_ipv4()), "{addrs:?}");
}
