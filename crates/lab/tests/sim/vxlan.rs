//! VXLAN on the wire, byte by byte, and the isolation of Overlay networks by VSID.

use std::net::IpAddr;

use crate::topology::*;
use hcn::policy::{IsolationIdSetting, RemoteSubnetRoutePolicySetting};
use hcn::{
    Endpoint, EndpointPolicy, IpConfig, Ipam, MacAddress, Network, NetworkPolicy, NetworkType,
    Route, Subnet, SubnetPolicy,
};
use hns::Profile;
use hns::state::Object;
use ipnet::IpNet;
use lab::sim::agents::flannel::nth;
use lab::sim::cluster::addr;
use lab::{Cluster, Who};

#[test]
fn pod_to_pod_across_nodes_is_vxlan_with_the_vsid_the_pas_and_the_remote_dr_mac() {
    let mut t = topo(Backend::Vxlan, Profile::Ws2022);
    let (a, d) = (t.a, t.d);
    t.c.fabric.captured.clear();
    let ex = t.c.udp(a, t.ip(d), 53);
    assert!(ex.ok(), "{ex}");
    let a_mac = t.c.stack(a).unwrap().interfaces[0].mac;
    // node2's DR MAC: what its hnsd reported and flanneld leased as its VtepMAC.
    let dr2 = t.c.dr_mac(1).expect("node2's DR MAC");
    let node1 = t.c.nodes[0].attachment;
    let f =
        t.c.fabric
            .captured
            .iter()
            .find(|f| f.from == node1 && f.bytes.len() > 50 && f.bytes[12..14] == [0x08, 0x00])
            .expect("a frame from node1 on the wire")
            .bytes
            .clone();
    // Outer Ethernet: node1's NIC to node2's NIC.
    assert_eq!(f[0..6], addr::node_mac(1));
    assert_eq!(f[6..12], addr::node_mac(0));
    // Outer IPv4: node1's PA to node2's PA, UDP.
    assert_eq!(f[14] >> 4, 4);
    assert_eq!(f[23], 17);
    assert_eq!(f[26..30], [192, 168, 77, 11]);
    assert_eq!(f[30..34], [192, 168, 77, 12]);
    // UDP: source port from the flow's hash in the dynamic range, destination 4789.
    let sport = u16::from_be_bytes([f[34], f[35]]);
    assert!(sport >= 49152, "entropy port {sport}");
    assert_eq!(u16::from_be_bytes([f[36], f[37]]), 4789);
    assert_eq!(
        usize::from(u16::from_be_bytes([f[38], f[39]])),
        f.len() - 34
    );
    // VXLAN: the I flag and VNI 4096 (the subnet's VSID).
    assert_eq!(f[42], 0x08);
    assert_eq!(f[43..46], [0, 0, 0]);
    assert_eq!(u32::from_be_bytes([0, f[46], f[47], f[48]]), 4096);
    assert_eq!(f[49], 0);
    // Inner Ethernet: to node2's DR MAC (its RemoteSubnetRoute), from the pod's own MAC.
    assert_eq!(f[50..56], dr2.0);
    assert_eq!(f[56..62], a_mac.0);
    // Inner IPv4: pod to pod, untranslated.
    assert_eq!(f[76..80], v4(t.ip(a)));
    assert_eq!(f[80..84], v4(t.ip(d)));
    // And the reply comes back the same way, from node2's PA to node1's, out of node2's
    // distributed router (the connection's reverse: addressed to the pod that asked).
    let node2 = t.c.nodes[1].attachment;
    let back =
        t.c.fabric
            .captured
            .iter()
            .find(|f| f.from == node2 && f.bytes.len() > 50 && f.bytes[36..38] == [0x12, 0xb5])
            .expect("the reply on the wire")
            .bytes
            .clone();
    assert_eq!(back[26..30], [192, 168, 77, 12]);
    assert_eq!(back[30..34], [192, 168, 77, 11]);
    assert_eq!(u32::from_be_bytes([0, back[46], back[47], back[48]]), 4096);
    assert_eq!(back[56..62], dr2.0);
    assert_eq!(back[50..56], a_mac.0);
}

fn v4(ip: IpAddr) -> [u8; 4] {
    let IpAddr::V4(v4) = ip else {
        panic!("{ip} is not IPv4")
    };
    v4.octets()
}

/// Node `i`'s pod subnet, as flanneld leased it.
fn pod_subnet(c: &Cluster, i: usize) -> IpNet {
    c.nodes[i].network.as_ref().expect("flannel ran").subnet
}

/// A second Overlay network "blue" with VSID 5000 and the same subnets as flannel's.
fn blue(c: &mut Cluster) -> Vec<hcn::Guid> {
    let mut ids = Vec::new();
    for i in 0..2 {
        let other = 1 - i;
        let (subnet, other_subnet) = (pod_subnet(c, i), pod_subnet(c, other));
        let net = Network {
            name: "blue".into(),
            network_type: NetworkType::Overlay,
            ipams: vec![Ipam {
                ipam_type: None,
                subnets: vec![Subnet {
                    ip_address_prefix: Some(subnet),
                    policies: vec![SubnetPolicy::Vsid(IsolationIdSetting {
                        isolation_id: 5000,
                    })],
                    routes: vec![Route {
                        next_hop: Some(nth(subnet, 1)),
                        destination_prefix: "0.0.0.0/0".parse().ok(),
                        metric: 0,
                    }],
                    flags: 0,
                }],
            }],
            policies: vec![NetworkPolicy::RemoteSubnetRoute(
                RemoteSubnetRoutePolicySetting {
                    destination_prefix: other_subnet,
                    isolation_id: 5000,
                    provider_address: addr::node(other),
                    distributed_router_mac_address: MacAddress([
                        0x00,
                        0x15,
                        0x5d,
                        0xbb,
                        0,
                        other as u8,
                    ]),
                },
            )],
            ..Network::default()
        };
        ids.push(c.nodes[i].create(Object::Network(net)).unwrap());
    }
    ids
}

fn blue_pod(c: &mut Cluster, node: usize, net: hcn::Guid, host: u8) -> Who {
    let subnet = pod_subnet(c, node);
    let ipv = nth(subnet, host);
    let IpAddr::V4(v4) = ipv else { unreachable!() };
    let o = v4.octets();
    let ep = Endpoint {
        name: format!("blue-{node}-{host}"),
        host_compute_network: net,
        ip_configurations: vec![IpConfig {
            ip_address: Some(ipv),
            prefix_length: 24,
        }],
        // win-overlay's MAC from the address: the same as the red pod with this address.
        mac_address: Some(MacAddress([0x0e, 0x2a, o[0], o[1], o[2], o[3]])),
        policies: vec![EndpointPolicy::ProviderAddress(
            hcn::policy::ProviderAddressPolicySetting {
                provider_address: addr::node(node),
            },
        )],
        ..Endpoint::default()
    };
    c.add_pod_endpoint(
        node,
        &format!("blue-{node}-{host}"),
        ep,
        subnet,
        nth(subnet, 1),
        vec![],
    )
    .unwrap()
}

#[test]
fn two_overlay_networks_with_the_same_subnet_and_different_vsids_never_see_each_others_packets() {
    let mut t = topo(Backend::Vxlan, Profile::Ws2022);
    let ids = blue(&mut t.c);
    // Same addresses and MACs as red's a, b (node1) and d (node2).
    // The pods' host numbers as host-local gave red's a, b (node1) and d (node2).
    let host = |w: Who| v4(t.ip(w))[3];
    let (ha, hb, hd) = (host(t.a), host(t.b), host(t.d));
    let ba = blue_pod(&mut t.c, 0, ids[0], ha);
    let bb = blue_pod(&mut t.c, 0, ids[0], hb);
    let bd = blue_pod(&mut t.c, 1, ids[1], hd);
    assert_eq!(t.ip(ba), t.ip(t.a));
    assert_eq!(t.ip(bb), t.ip(t.b));
    assert_eq!(t.ip(bd), t.ip(t.d));
    let (a, b, d) = (t.a, t.b, t.d);
    let (ia, ib, id) = (t.ip(a), t.ip(b), t.ip(d));
    // Across nodes: each network's packets reach its own pod only, in its own VNI.
    for (from, to, vni) in [(a, d, 4096u32), (ba, bd, 5000)] {
        t.c.fabric.captured.clear();
        let ex = t.c.tcp_syn(from, id, 8080);
        delivered(&ex, to, ia, id, 8080);
        for f in
            t.c.fabric
                .captured
                .iter()
                .filter(|f| f.bytes.len() > 50 && f.bytes[36..38] == [0x12, 0xb5])
        {
            assert_eq!(
                u32::from_be_bytes([0, f.bytes[46], f.bytes[47], f.bytes[48]]),
                vni
            );
        }
    }
    // On the same node: same.
    for (from, to) in [(a, b), (ba, bb)] {
        let ex = t.c.tcp_syn(from, ib, 8080);
        delivered(&ex, to, ia, ib, 8080);
    }
    // Nothing of one network reached the other's pods.
    for (w, other) in [(bd, d), (bb, b)] {
        let n = t.c.stack(w).unwrap().inbox.len();
        let m = t.c.stack(other).unwrap().inbox.len();
        assert_eq!(
            (n, m),
            (1, 1),
            "each pod got exactly its own network's packet"
        );
    }
    // Red's Service is not load balanced for blue's pods: its ClusterIP is nothing to them.
    let ex = t.c.tcp_syn(ba, ip(WEB_REMOTE), 80);
    assert!(ex.request.is_none(), "{ex}");
}
