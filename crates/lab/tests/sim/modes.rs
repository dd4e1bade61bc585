//! The other network modes and endpoint policies on the in-memory cluster: L2Tunnel (every
//! pod packet through the router and back), Transparent (pod MACs on the wire), NAT (SNAT out,
//! PortMapping in, the host vNIC as gateway), Private and Internal (local only), win-bridge's
//! PortMapping on L2Bridge, EncapOverhead.

use std::net::IpAddr;

use crate::topology::*;
use hcn::policy::{EncapOverheadPolicySetting, PortMappingPolicySetting};
use hcn::{
    Endpoint, EndpointPolicy, IpConfig, Ipam, Namespace, NamespaceType, Network, NetworkType,
    Route, Subnet,
};
use hns::Profile;
use hns::state::{Object, WriteOp};
use lab::sim::cluster::addr;
use lab::{Cluster, PodOptions, Who};

fn network(name: &str, t: NetworkType, prefix: &str, gateway: Option<&str>) -> Network {
    Network {
        name: name.into(),
        network_type: t,
        ipams: vec![Ipam {
            ipam_type: None,
            subnets: vec![Subnet {
                ip_address_prefix: Some(prefix.parse().unwrap()),
                policies: vec![],
                routes: gateway
                    .map(|g| Route {
                        next_hop: Some(g.parse().unwrap()),
                        destination_prefix: "0.0.0.0/0".parse().ok(),
                        metric: 0,
                    })
                    .into_iter()
                    .collect(),
                flags: 0,
            }],
        }],
        ..Network::default()
    }
}

fn pod(
    c: &mut Cluster,
    net: hcn::Guid,
    name: &str,
    ip_: &str,
    prefix: &str,
    gw: &str,
    policies: Vec<EndpointPolicy>,
) -> Who {
    let ep = Endpoint {
        name: name.into(),
        host_compute_network: net,
        ip_configurations: vec![IpConfig {
            ip_address: Some(ip_.parse().unwrap()),
            prefix_length: 0,
        }],
        policies,
        ..Endpoint::default()
    };
    c.add_pod_endpoint(0, name, ep, prefix.parse().unwrap(), ip(gw), vec![])
        .unwrap()
}

/// A plain pod at `ip_` on node `node`'s /24, behind gateway `gw`.
fn pod_on(c: &mut Cluster, node: usize, net: hcn::Guid, name: &str, ip_: &str, gw: &str) -> Who {
    let ep = Endpoint {
        name: name.into(),
        host_compute_network: net,
        ip_configurations: vec![IpConfig {
            ip_address: Some(ip(ip_)),
            prefix_length: 24,
        }],
        ..Endpoint::default()
    };
    let prefix = ipnet::IpNet::new(ip(ip_), 24).unwrap().trunc();
    c.add_pod_endpoint(node, name, ep, prefix, ip(gw), vec![])
        .unwrap()
}

/// An L2Tunnel network `cbr0` on each node laid out as flannel's host-gw lays out its
/// L2Bridge one (flannel has no L2Tunnel backend): 10.244.<i+1>.0/24, the bridge endpoint at
/// .2 on the host; the router learns each pod subnet. Returns the networks.
fn l2tunnel(c: &mut Cluster) -> Vec<hcn::Guid> {
    let mut nets = Vec::new();
    for i in 0..c.nodes.len() {
        let (subnet, gw) = (
            format!("10.244.{}.0/24", i + 1),
            format!("10.244.{}.1", i + 1),
        );
        let n = &mut c.nodes[i];
        let net = network("cbr0", NetworkType::L2Tunnel, &subnet, Some(&gw));
        let net = n.create(Object::Network(net)).unwrap();
        let ep = n
            .create(Object::Endpoint(Endpoint {
                name: "cbr0_ep".into(),
                host_compute_network: net,
                ip_configurations: vec![IpConfig {
                    ip_address: Some(ip(&format!("10.244.{}.2", i + 1))),
                    prefix_length: 24,
                }],
                ..Endpoint::default()
            }))
            .unwrap();
        let host = n
            .create(Object::Namespace(Namespace {
                namespace_type: Some(NamespaceType::Host),
                ..Namespace::default()
            }))
            .unwrap();
        let add: hcn::ModifyRequest = hcn::decode_value(serde_json::json!({
            "ResourceType": "Endpoint", "RequestType": "Add",
            "Settings": {"EndpointId": ep.to_string()}
        }))
        .unwrap();
        n.hns(WriteOp::Modify(hcn::Kind::Namespace, host, add))
            .unwrap();
        c.external_route(subnet.parse().unwrap(), addr::node(i));
        nets.push(net);
    }
    nets
}

#[test]
fn l2tunnel_sends_every_pod_packet_to_the_router_even_to_a_local_pod() {
    let mut c = Cluster::new(2, Profile::Ws2022).unwrap();
    let nets = l2tunnel(&mut c);
    let p1 = "10.244.1.0/24";
    let a = pod(&mut c, nets[0], "a", "10.244.1.3", p1, "10.244.1.2", vec![]);
    let b = pod(&mut c, nets[0], "b", "10.244.1.4", p1, "10.244.1.2", vec![]);
    let d = pod_on(&mut c, 1, nets[1], "d", "10.244.2.3", "10.244.2.2");
    let (ia, ib, id) = (
        c.ip_of(a).unwrap(),
        c.ip_of(b).unwrap(),
        c.ip_of(d).unwrap(),
    );
    c.fabric.captured.clear();
    let ex = c.tcp_syn(a, ib, 8080);
    delivered(&ex, b, ia, ib, 8080);
    // The SYN went out of node1 to the router, and came back from the router to node1.
    let on_wire = |f: &&lab::sim::fabric::WireFrame| {
        f.bytes.len() >= 34 && f.bytes[12..14] == [8, 0] && f.bytes[30..34] == [10, 244, 1, 4]
    };
    let node1 = c.nodes[0].attachment;
    let seen: Vec<_> = c.fabric.captured.iter().filter(on_wire).collect();
    assert!(
        seen.iter()
            .any(|f| f.from == node1 && f.bytes[0..6] == addr::ROUTER_MAC),
        "out to the router"
    );
    assert!(
        seen.iter()
            .any(|f| f.from != node1 && f.bytes[0..6] == addr::node_mac(0)),
        "back from it"
    );
    // And across nodes the same way.
    let ex = c.tcp_syn(a, id, 8080);
    delivered(&ex, d, ia, id, 8080);
}

#[test]
fn transparent_pods_are_on_the_wire_with_their_own_mac_and_address() {
    let mut c = Cluster::new(1, Profile::Ws2022).unwrap();
    let router = addr::ROUTER.to_string();
    let net = c.nodes[0]
        .create(Object::Network(network(
            "ext",
            NetworkType::Transparent,
            addr::UNDERLAY,
            Some(&router),
        )))
        .unwrap();
    let p = pod(
        &mut c,
        net,
        "t",
        "192.168.77.100",
        addr::UNDERLAY,
        &router,
        vec![],
    );
    let mac = c.stack(p).unwrap().interfaces[0].mac;
    let ex = c.tcp_syn(p, addr::INTERNET, 80);
    delivered(&ex, Who::External, ip("192.168.77.100"), addr::INTERNET, 80);
    assert_eq!(ex.seen().unwrap().src_mac, mac);
    // The physical network reaches the pod directly.
    let ex = c.tcp_syn(Who::External, ip("192.168.77.100"), 8080);
    delivered(&ex, p, addr::ROUTER, ip("192.168.77.100"), 8080);
    assert_eq!(ex.seen().unwrap().dst_mac, mac);
}

#[test]
fn nat_translates_out_maps_ports_in_and_the_host_vnic_is_the_gateway() {
    let mut c = Cluster::new(1, Profile::Ws2022).unwrap();
    let net = c.nodes[0]
        .create(Object::Network(network(
            "nat",
            NetworkType::Nat,
            "172.20.0.0/24",
            Some("172.20.0.1"),
        )))
        .unwrap();
    let map = EndpointPolicy::PortMapping(PortMappingPolicySetting {
        protocol: 6,
        internal_port: 80,
        external_port: 8088,
        vip: None,
        flags: 0,
    });
    let p = pod(
        &mut c,
        net,
        "web",
        "172.20.0.5",
        "172.20.0.0/24",
        "172.20.0.1",
        vec![map],
    );
    let q = pod(
        &mut c,
        net,
        "other",
        "172.20.0.6",
        "172.20.0.0/24",
        "172.20.0.1",
        vec![],
    );
    // Out: the node's address.
    let ex = c.tcp_syn(p, addr::INTERNET, 443);
    delivered(&ex, Who::External, addr::node(0), addr::INTERNET, 443);
    assert!(c.ping(p, addr::INTERNET).ok(), "WinNAT carries ICMP");
    // In: the port mapping, the client's address kept.
    let ex = c.tcp_syn(Who::External, addr::node(0), 8088);
    delivered(&ex, p, addr::ROUTER, ip("172.20.0.5"), 80);
    assert_eq!(ex.reply.unwrap().src_port(), 8088);
    // The host is the gateway; pods talk to each other directly.
    let ex = c.tcp_syn(p, ip("172.20.0.1"), 10250);
    delivered(&ex, Who::Node(0), ip("172.20.0.5"), ip("172.20.0.1"), 10250);
    let ex = c.udp(p, ip("172.20.0.6"), 53);
    delivered(&ex, q, ip("172.20.0.5"), ip("172.20.0.6"), 53);
}

#[test]
fn private_and_internal_networks_stay_on_the_host() {
    for (t, gw) in [
        (NetworkType::Private, None),
        (NetworkType::Internal, Some("172.31.0.1")),
    ] {
        let mut c = Cluster::new(1, Profile::Unrestricted).unwrap();
        let net = c.nodes[0]
            .create(Object::Network(network("local", t, "172.31.0.0/24", gw)))
            .unwrap();
        let g = gw.unwrap_or("172.31.0.1");
        let p = pod(&mut c, net, "p", "172.31.0.5", "172.31.0.0/24", g, vec![]);
        let q = pod(&mut c, net, "q", "172.31.0.6", "172.31.0.0/24", g, vec![]);
        let ex = c.tcp_syn(p, ip("172.31.0.6"), 8080);
        delivered(&ex, q, ip("172.31.0.5"), ip("172.31.0.6"), 8080);
        let ex = c.tcp_syn(p, addr::INTERNET, 80);
        assert!(ex.request.is_none(), "{t}: {ex}");
        if gw.is_some() {
            // Internal: the host's vNIC on the network is reachable, nothing beyond.
            let ex = c.tcp_syn(p, ip("172.31.0.1"), 10250);
            delivered(&ex, Who::Node(0), ip("172.31.0.5"), ip("172.31.0.1"), 10250);
            let d = ex.drops.len();
            assert_eq!(d, 0);
            let out = c.tcp_syn(p, addr::INTERNET, 80);
            let drop = out.drops.first().expect("dropped at the switch");
            assert_eq!(drop.reason, vfp::DropReason::BlockedByRule);
            assert!(
                drop.trace.contains("network local (Internal)"),
                "{}",
                drop.trace
            );
        }
    }
}

#[test]
fn win_bridge_port_mappings_forward_a_node_port_to_the_pod() {
    let mut t = topo(Backend::HostGw, Profile::Ws2022);
    let map = EndpointPolicy::PortMapping(PortMappingPolicySetting {
        protocol: 6,
        internal_port: 8080,
        external_port: 30500,
        vip: None,
        flags: 0,
    });
    let p =
        t.c.add_pod(
            0,
            "hostport",
            PodOptions {
                policies: vec![map],
                ..PodOptions::default()
            },
        )
        .unwrap();
    let ex = t.c.tcp_syn(Who::External, addr::node(0), 30500);
    delivered(&ex, p, addr::ROUTER, t.ip(p), 8080);
}

#[test]
fn encap_overhead_lowers_the_pod_mtu() {
    let mut t = topo(Backend::Vxlan, Profile::Ws2022);
    let p =
        t.c.add_pod(
            0,
            "mtu",
            PodOptions {
                policies: vec![EndpointPolicy::EncapOverhead(EncapOverheadPolicySetting {
                    overhead: 50,
                })],
                ..PodOptions::default()
            },
        )
        .unwrap();
    let Who::Pod(_, ep) = p else { unreachable!() };
    assert_eq!(t.c.nodes[0].compiler().endpoint_mtu(ep), Some(1450));
    let Who::Pod(_, a) = t.a else { unreachable!() };
    assert_eq!(t.c.nodes[0].compiler().endpoint_mtu(a), None);
    let _: IpAddr = t.ip(p);
}
