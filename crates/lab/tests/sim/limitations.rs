//! The documented limitations of the Windows data plane: each fails under the profile that
//! has it, the way Windows fails (with a typed reason a trace names), and works under
//! `unrestricted`.

use std::net::IpAddr;

use crate::topology::*;
use hcn::loadbalancer::PortMappingFlags;
use hcn::policy::{DrMacAddressPolicySetting, IsolationIdSetting};
use hcn::{
    Endpoint, IpConfig, Ipam, LoadBalancer, LoadBalancerPortMapping, MacAddress, Network,
    NetworkPolicy, NetworkType, Route, Subnet, SubnetPolicy,
};
use hns::state::Object;
use hns::{Limitation, Profile};
use lab::sim::cluster::addr;
use lab::{Cluster, Exchange, PodOptions, Service, Who};

/// The exchange failed because of `l`, and the switch's trace says so in words.
fn refused(ex: &Exchange, l: Limitation, profile: Profile) {
    assert!(!ex.ok(), "should fail under {profile}:\n{ex}");
    let d = ex
        .drops
        .iter()
        .find(|d| d.limitation == Some(l))
        .unwrap_or_else(|| panic!("no drop for {l}:\n{ex}"));
    assert_eq!(d.reason, vfp::DropReason::Unsupported);
    assert!(d.trace.contains(&l.message(profile)), "{}", d.trace);
}

#[test]
fn backend_limit_64_on_ws2022_none_unrestricted() {
    for profile in [Profile::Ws2022, Profile::Unrestricted] {
        let mut c = Cluster::new(1, profile).unwrap();
        c.flannel_host_gw().unwrap();
        let pods: Vec<Who> = (0..65)
            .map(|i| {
                c.add_pod(0, &format!("web-{i}"), PodOptions::default())
                    .unwrap()
            })
            .collect();
        let client = pods[0];
        let r = c.add_service(&Service::tcp(
            "default/big",
            ip("10.96.0.50"),
            80,
            8080,
            pods.clone(),
        ));
        if profile == Profile::Ws2022 {
            // kube-proxy met HNS's refusal (E_INVALIDARG) and reports it for the Service.
            let e = r.unwrap_err().to_string();
            assert!(e.contains("kube-proxy"), "{e}");
            assert!(e.contains("invalid number of destinations"), "{e}");
            assert!(e.contains(&hcn::HResult::E_INVALIDARG.to_string()), "{e}");
            continue;
        }
        r.unwrap();
        let ex = c.tcp_syn(client, ip("10.96.0.50"), 80);
        assert!(ex.ok(), "{ex}");
        assert!(pods.contains(&ex.receiver().unwrap()));
    }
}

/// The backend limit of the profile's table, end to end through kube-proxy and hnsd: 64 on
/// ws2019/ws2022, 1024 on ws2025, none under unrestricted; a Service past it is refused with
/// HNS's error, which kube-proxy reports for the Service.
#[test]
fn the_backend_limit_per_service_is_the_profiles() {
    for (profile, n, served) in [
        (Profile::Ws2022, 64, true),
        (Profile::Ws2022, 65, false),
        (Profile::Ws2025, 1024, true),
        (Profile::Ws2025, 1025, false),
        (Profile::Unrestricted, 1025, true),
    ] {
        assert_eq!(
            profile.max_lb_backends().is_none_or(|max| n <= max),
            served,
            "{profile}: the table's limit"
        );
        let mut c = Cluster::new(1, profile).unwrap();
        c.flannel_host_gw().unwrap();
        // Ready pods on other nodes (not simulated): remote endpoints for kube-proxy.
        let backends: Vec<(String, IpAddr, String)> = (0..n)
            .map(|i| {
                let ip = IpAddr::from([10, 244, 100 + (i / 250) as u8, 1 + (i % 250) as u8]);
                (format!("web-{i}"), ip, format!("node-{}", 2 + i / 250))
            })
            .collect();
        let svc = Service::tcp("default/big", ip("10.96.0.50"), 80, 8080, Vec::new());
        let r = c.add_service_over(&svc, &backends);
        if served {
            r.unwrap_or_else(|e| panic!("{profile} {n}: {e}"));
            let lbs = c.nodes[0].read(|s| {
                s.load_balancers()
                    .filter(|l| l.frontend_vips == vec![ip("10.96.0.50")])
                    .map(|l| l.host_compute_endpoints.len())
                    .collect::<Vec<_>>()
            });
            assert_eq!(lbs, vec![n], "{profile}: one LB with every backend");
        } else {
            let e = r.expect_err("past the limit").to_string();
            assert!(
                e.contains("invalid number of destinations"),
                "{profile} {n}: {e}"
            );
            assert!(e.contains(&hcn::HResult::E_INVALIDARG.to_string()), "{e}");
        }
    }
}

#[test]
fn ping_through_outbound_nat_to_an_external_address_fails_on_ws2022_pod_to_pod_works() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut t = topo(backend, Profile::Ws2022);
        let (a, b, d) = (t.a, t.b, t.d);
        let ex = t.c.ping(a, addr::INTERNET);
        refused(&ex, Limitation::IcmpThroughOutboundNat, Profile::Ws2022);
        assert!(ex.drops[0].trace.contains(
            "not transposed: ICMP through OutboundNAT to a remote network is not supported on ws2022"
        ));
        // On the pod network, ping works, on one node and across.
        assert!(t.c.ping(a, t.ip(b)).ok());
        assert!(t.c.ping(a, t.ip(d)).ok());
        // TCP through the same NAT works.
        assert!(t.c.tcp_syn(a, addr::INTERNET, 80).ok());

        let mut u = topo(backend, Profile::Unrestricted);
        let a = u.a;
        let ex = u.c.ping(a, addr::INTERNET);
        assert!(ex.ok(), "{ex}");
        assert_eq!(ex.seen().unwrap().src, addr::node(0));
    }
}

#[test]
fn node_port_from_the_node_itself_fails_on_ws2022_from_elsewhere_works() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut t = topo(backend, Profile::Ws2022);
        let ex = t.c.tcp_syn(Who::Node(0), addr::node(0), NODE_PORT);
        refused(&ex, Limitation::NodePortFromNode, Profile::Ws2022);
        assert!(ex.request.is_none(), "{ex}");
        // Another node, and the outside, reach it.
        assert!(t.c.tcp_syn(Who::Node(1), addr::node(0), NODE_PORT).ok());
        assert!(t.c.tcp_syn(Who::External, addr::node(0), NODE_PORT).ok());

        let mut u = topo(backend, Profile::Unrestricted);
        let b = u.b;
        let ex = u.c.tcp_syn(Who::Node(0), addr::node(0), NODE_PORT);
        assert_eq!(ex.receiver(), Some(b), "{ex}");
        let r = ex.reply.as_ref().unwrap();
        assert_eq!((r.src, r.src_port()), (addr::node(0), NODE_PORT));
    }
}

#[test]
fn cluster_ip_from_the_node_fails_on_ws2019_works_on_ws2022_and_unrestricted() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut old = topo(backend, Profile::Ws2019);
        let ex = old.c.tcp_syn(Who::Node(0), ip(WEB_LOCAL), 80);
        refused(&ex, Limitation::ClusterIpFromNode, Profile::Ws2019);
        for profile in [Profile::Ws2022, Profile::Unrestricted] {
            let mut t = topo(backend, profile);
            let (b, d) = (t.b, t.d);
            let ex = t.c.tcp_syn(Who::Node(0), ip(WEB_LOCAL), 80);
            assert_eq!(ex.receiver(), Some(b), "{profile}: {ex}");
            assert!(ex.ok(), "{ex}");
            let ex = t.c.tcp_syn(Who::Node(0), ip(WEB_REMOTE), 80);
            assert_eq!(ex.receiver(), Some(d), "{profile}: {ex}");
            assert_eq!(ex.reply.unwrap().src, ip(WEB_REMOTE));
        }
    }
}

/// An IPv6 Overlay network on each node (fd00:244:<n>::/64, VSID 4200) with two pods each
/// side of a RemoteSubnetRoute.
fn v6_overlay(profile: Profile) -> (Cluster, Who, Who, Who) {
    let mut c = Cluster::new(2, profile).unwrap();
    let prefix = |n: usize| -> ipnet::IpNet { format!("fd00:244:{}::/64", n + 1).parse().unwrap() };
    let host =
        |n: usize, h: u16| -> IpAddr { format!("fd00:244:{}::{h:x}", n + 1).parse().unwrap() };
    let mut nets = Vec::new();
    for n in 0..2 {
        let other = 1 - n;
        let net = Network {
            name: "v6".into(),
            network_type: NetworkType::Overlay,
            ipams: vec![Ipam {
                ipam_type: None,
                subnets: vec![Subnet {
                    ip_address_prefix: Some(prefix(n)),
                    policies: vec![SubnetPolicy::Vsid(IsolationIdSetting {
                        isolation_id: 4200,
                    })],
                    routes: vec![Route {
                        next_hop: Some(host(n, 1)),
                        destination_prefix: "::/0".parse().ok(),
                        metric: 0,
                    }],
                    flags: 0,
                }],
            }],
            policies: vec![
                NetworkPolicy::DrMacAddress(DrMacAddressPolicySetting {
                    address: MacAddress([0, 0x15, 0x5d, 0x66, 0, n as u8]),
                }),
                NetworkPolicy::RemoteSubnetRoute(hcn::policy::RemoteSubnetRoutePolicySetting {
                    destination_prefix: prefix(other),
                    isolation_id: 4200,
                    provider_address: addr::node(other),
                    distributed_router_mac_address: MacAddress([
                        0,
                        0x15,
                        0x5d,
                        0x66,
                        0,
                        other as u8,
                    ]),
                }),
            ],
            ..Network::default()
        };
        nets.push(c.nodes[n].create(Object::Network(net)).unwrap());
    }
    let pod = |c: &mut Cluster, n: usize, h: u16| {
        let ep = Endpoint {
            name: format!("v6-{n}-{h}"),
            host_compute_network: nets[n],
            ip_configurations: vec![IpConfig {
                ip_address: Some(host(n, h)),
                prefix_length: 64,
            }],
            ..Endpoint::default()
        };
        c.add_pod_endpoint(n, &format!("v6-{n}-{h}"), ep, prefix(n), host(n, 1), vec![])
            .unwrap()
    };
    let p1 = pod(&mut c, 0, 3);
    let p2 = pod(&mut c, 0, 4);
    let p3 = pod(&mut c, 1, 3);
    (c, p1, p2, p3)
}

#[test]
fn ipv6_on_overlay_is_refused_on_ws2022_and_carried_unrestricted() {
    let (mut c, p1, p2, p3) = v6_overlay(Profile::Ws2022);
    let (ip2, ip3) = (c.ip_of(p2).unwrap(), c.ip_of(p3).unwrap());
    refused(&c.ping(p1, ip2), Limitation::Ipv6OnOverlay, Profile::Ws2022);
    refused(
        &c.tcp_syn(p1, ip3, 8080),
        Limitation::Ipv6OnOverlay,
        Profile::Ws2022,
    );

    let (mut c, p1, p2, p3) = v6_overlay(Profile::Unrestricted);
    let ip1 = c.ip_of(p1).unwrap();
    let ex = c.ping(p1, ip2);
    delivered(&ex, p2, ip1, ip2, 0);
    let ex = c.tcp_syn(p1, ip3, 8080);
    delivered(&ex, p3, ip1, ip3, 8080);
    // IPv6 inside IPv4 VXLAN between the nodes' provider addresses.
    let vx = c
        .fabric
        .captured
        .iter()
        .rev()
        .find(|f| f.bytes.len() > 50 && f.bytes[36..38] == [0x12, 0xb5])
        .expect("VXLAN on the wire");
    assert_eq!(vx.bytes[62..64], [0x86, 0xdd], "inner EtherType IPv6");
}

/// A NodePort LB on node1 with only local backends and no DSR: ExternalTrafficPolicy Local
/// as kube-proxy would program it where DSR is unavailable.
fn local_without_dsr(t: &mut Topo) {
    let b = t.b;
    let Who::Pod(_, ep) = b else { unreachable!() };
    let lb = LoadBalancer {
        host_compute_endpoints: vec![ep],
        port_mappings: vec![LoadBalancerPortMapping {
            protocol: 6,
            internal_port: 8080,
            external_port: 30090,
            distribution_type: 0,
            flags: PortMappingFlags::LOCAL_ROUTED_VIP | PortMappingFlags::VIP_EXTERNAL_IP,
        }],
        linux_service: "default/local:30090".into(),
        ..LoadBalancer::default()
    };
    t.c.nodes[0].create(Object::LoadBalancer(lb)).unwrap();
}

#[test]
fn external_traffic_policy_local_keeps_the_client_only_with_dsr_on_ws2022() {
    let client = addr::ROUTER;
    let mut t = topo(Backend::HostGw, Profile::Ws2022);
    local_without_dsr(&mut t);
    let b = t.b;
    let ex = t.c.tcp_syn(Who::External, addr::node(0), 30090);
    // Windows translates the source without DSR: the client's address is lost.
    delivered(&ex, b, addr::node(0), t.ip(b), 8080);
    let notices = t.c.nodes[0].compiler().notices();
    assert!(
        notices
            .iter()
            .any(|n| n.limitation == Some(Limitation::LocalTrafficWithoutDsr)),
        "{notices:?}"
    );
    // With DSR (what kube-proxy does for ExternalTrafficPolicy Local) the client is kept.
    let mut svc = Service::tcp("default/local-dsr", ip("10.96.0.30"), 80, 8080, vec![b]);
    svc.node_port = Some(30091);
    svc.external_local = true;
    t.c.add_service(&svc).unwrap();
    let ex = t.c.tcp_syn(Who::External, addr::node(0), 30091);
    delivered(&ex, b, client, t.ip(b), 8080);
    assert_eq!(ex.reply.unwrap().src, addr::node(0));

    let mut u = topo(Backend::HostGw, Profile::Unrestricted);
    local_without_dsr(&mut u);
    let b = u.b;
    let ex = u.c.tcp_syn(Who::External, addr::node(0), 30090);
    delivered(&ex, b, client, u.ip(b), 8080);
}

#[test]
fn the_node_reaches_only_its_own_pods_over_vxlan_on_ws_builds_and_every_pod_unrestricted() {
    for profile in [Profile::Ws2022, Profile::Ws2025] {
        let mut t = topo(Backend::Vxlan, profile);
        let (b, d) = (t.b, t.d);
        let ex = t.c.tcp_syn(Who::Node(0), t.ip(d), 8080);
        refused(&ex, Limitation::RemotePodFromNodeOnOverlay, profile);
        assert!(ex.request.is_none(), "nothing leaves the node:\n{ex}");
        // Its own pods, and a Service whose backend is on the other node (the load balancer
        // translates the host's packets to the source VIP before they are encapsulated).
        assert!(t.c.tcp_syn(Who::Node(0), t.ip(b), 8080).ok());
        let svc = t.c.tcp_syn(Who::Node(0), ip(WEB_REMOTE), 80);
        assert_eq!(svc.receiver(), Some(d), "{svc}");
        // Pods reach the remote pod.
        let a = t.a;
        assert!(t.c.tcp_syn(a, t.ip(d), 8080).ok());
    }
    // host-gw routes the node's packets like any other: no limitation there.
    let mut h = topo(Backend::HostGw, Profile::Ws2022);
    let d = h.d;
    assert!(h.c.tcp_syn(Who::Node(0), h.ip(d), 8080).ok());

    let mut u = topo(Backend::Vxlan, Profile::Unrestricted);
    let d = u.d;
    let ex = u.c.tcp_syn(Who::Node(0), u.ip(d), 8080);
    assert_eq!(ex.receiver(), Some(d), "{ex}");
}
