//! Load balancer behaviour on the in-memory cluster: distribution, DSR, SourceVIP, the DSR
//! hairpin with and without loopback DSR, PreserveDIP, ILB, LocalRoutedVIP.

use std::collections::BTreeSet;

use crate::topology::*;
use hcn::loadbalancer::PortMappingFlags;
use hcn::{LoadBalancer, LoadBalancerFlags, LoadBalancerPortMapping};
use hns::Profile;
use hns::state::Object;
use lab::sim::cluster::addr;
use lab::{Cluster, PodOptions, Service, Who};

/// Four backends (two per node) behind 10.96.0.40:80 and a client pod on node1.
fn four(backend: Backend, affinity: bool) -> (Cluster, Who, Vec<Who>) {
    let mut c = flannel_cluster(2, Profile::Ws2022, backend);
    let client = c.add_pod(0, "client", PodOptions::default()).unwrap();
    let backends: Vec<Who> = (0..4)
        .map(|i| {
            c.add_pod(i % 2, &format!("web-{i}"), PodOptions::default())
                .unwrap()
        })
        .collect();
    let mut svc = Service::tcp("default/web", ip("10.96.0.40"), 80, 8080, backends.clone());
    svc.client_ip_affinity = affinity;
    svc.node_port = Some(30040);
    c.add_service(&svc).unwrap();
    (c, client, backends)
}

#[test]
fn source_ip_affinity_keeps_a_client_on_one_backend() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let (mut c, client, backends) = four(backend, true);
        let mut used = BTreeSet::new();
        for _ in 0..24 {
            let ex = c.tcp_syn(client, ip("10.96.0.40"), 80);
            assert!(ex.ok(), "{ex}");
            used.insert(ex.receiver().unwrap());
        }
        assert_eq!(used.len(), 1, "{used:?}");
        assert!(backends.contains(used.first().unwrap()));
        // An external client through the NodePort sticks to one backend too.
        let mut used = BTreeSet::new();
        for _ in 0..24 {
            used.insert(
                c.tcp_syn(Who::External, addr::node(0), 30040)
                    .receiver()
                    .unwrap(),
            );
        }
        assert_eq!(used.len(), 1, "{used:?}");
    }
}

#[test]
fn no_affinity_spreads_new_connections_over_the_backends() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let (mut c, client, backends) = four(backend, false);
        let mut used = BTreeSet::new();
        for _ in 0..64 {
            let ex = c.tcp_syn(client, ip("10.96.0.40"), 80);
            assert!(ex.ok(), "{ex}");
            used.insert(ex.receiver().unwrap());
        }
        assert_eq!(
            used,
            backends.iter().copied().collect(),
            "all four backends get connections"
        );
    }
}

#[test]
fn dsr_backends_see_the_client_and_replies_come_from_the_vip() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut t = topo(backend, Profile::Ws2022);
        let (a, b, d) = (t.a, t.b, t.d);
        let mut svc = Service::tcp("default/dsr", ip("10.96.0.60"), 80, 8080, vec![b]);
        svc.dsr = true;
        t.c.add_service(&svc).unwrap();
        let mut remote = Service::tcp("default/dsr-remote", ip("10.96.0.61"), 80, 8080, vec![d]);
        remote.dsr = true;
        t.c.add_service(&remote).unwrap();
        for (vip, backend_pod) in [("10.96.0.60", b), ("10.96.0.61", d)] {
            let (syn, data) = t.c.tcp_connect(a, ip(vip), 80);
            delivered(&syn, backend_pod, t.ip(a), t.ip(backend_pod), 8080);
            delivered(&data, backend_pod, t.ip(a), t.ip(backend_pod), 8080);
            let r = syn.reply.unwrap();
            assert_eq!((r.src, r.src_port()), (ip(vip), 80), "{backend:?}");
        }
    }
}

/// The node itself to a DSR ClusterIP: on Overlay it takes the source VIP, as without DSR
/// (its own address is no overlay address, so a remote backend's DSR reply to it would leave
/// the VXLAN flow); on L2Bridge (no SourceVIP) it keeps its own address. A pod keeps its
/// own address on both.
#[test]
fn with_dsr_the_node_reaches_a_cluster_ip_through_the_source_vip_on_overlay_only() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut t = topo(backend, Profile::Ws2025);
        let (a, d) = (t.a, t.d);
        let mut remote = Service::tcp("default/dsr-remote", ip("10.96.0.61"), 80, 8080, vec![d]);
        remote.dsr = true;
        t.c.add_service(&remote).unwrap();
        let from_node = match backend {
            Backend::Vxlan => ip("10.244.1.2"),
            Backend::HostGw => addr::node(0),
        };
        let ex = t.c.tcp_syn(Who::Node(0), ip("10.96.0.61"), 80);
        delivered(&ex, d, from_node, t.ip(d), 8080);
        let ex = t.c.tcp_syn(a, ip("10.96.0.61"), 80);
        delivered(&ex, d, t.ip(a), t.ip(d), 8080);
    }
}

#[test]
fn without_dsr_the_backend_sees_the_source_vip() {
    // Overlay: kube-proxy's --source-vip, the SourceVIP of every load balancer.
    let mut t = topo(Backend::Vxlan, Profile::Ws2022);
    let (a, b, d) = (t.a, t.b, t.d);
    let svip = ip("10.244.1.2");
    for (vip, backend_pod) in [(WEB_LOCAL, b), (WEB_REMOTE, d)] {
        let ex = t.c.tcp_syn(a, ip(vip), 80);
        delivered(&ex, backend_pod, svip, t.ip(backend_pod), 8080);
        assert!(
            ex.seen().unwrap().src_port() >= 49152,
            "a port of the SNAT pool"
        );
    }
}

#[test]
fn a_pod_reaching_a_dsr_vip_that_picks_itself_needs_loopback_dsr() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut c = flannel_cluster(1, Profile::Ws2022, backend);
        let plain = c.add_pod(0, "plain", PodOptions::default()).unwrap();
        let looped = c
            .add_pod(
                0,
                "looped",
                PodOptions {
                    loopback_dsr: true,
                    ..PodOptions::default()
                },
            )
            .unwrap();
        for (who, name, vip) in [
            (plain, "default/self-plain", "10.96.0.70"),
            (looped, "default/self-looped", "10.96.0.71"),
        ] {
            let mut svc = Service::tcp(name, ip(vip), 80, 8080, vec![who]);
            svc.dsr = true;
            c.add_service(&svc).unwrap();
        }
        // Without loopback DSR the pod gets its own SYN from itself and answers itself: the
        // client never hears from the VIP and times out (calico#5522).
        let ex = c.tcp_syn(plain, ip("10.96.0.70"), 80);
        assert_eq!(ex.receiver(), Some(plain));
        assert_eq!(ex.seen().unwrap().src, c.ip_of(plain).unwrap());
        assert!(!ex.ok(), "{ex}");
        // With it, the hairpin leaves with the node's address and comes back translated.
        let ex = c.tcp_syn(looped, ip("10.96.0.71"), 80);
        assert_eq!(ex.receiver(), Some(looped));
        assert_eq!(ex.seen().unwrap().src, addr::node(0), "{ex}");
        assert!(ex.ok(), "{ex}");
    }
}

/// Loopback DSR's policy is an `OutBoundNAT` that names the pod's own address: in a config
/// without the general OutBoundNAT it translates the hairpin only, and the pod's other
/// connections (to a pod on another node) keep its address.
#[test]
fn the_loopback_dsr_policy_alone_translates_only_the_hairpin() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut c = flannel_cluster(2, Profile::Ws2025, backend);
        let looped = PodOptions {
            loopback_dsr: true,
            no_outbound_nat: true,
            ..PodOptions::default()
        };
        let pod = c.add_pod(0, "looped", looped).unwrap();
        let remote = c.add_pod(1, "remote", PodOptions::default()).unwrap();
        let mut svc = Service::tcp("default/self", ip("10.96.0.72"), 80, 8080, vec![pod]);
        svc.dsr = true;
        c.add_service(&svc).unwrap();
        let (own, remote_ip) = (c.ip_of(pod).unwrap(), c.ip_of(remote).unwrap());
        let ex = c.tcp_syn(pod, remote_ip, 8080);
        delivered(&ex, remote, own, remote_ip, 8080);
        let ex = c.tcp_syn(pod, ip("10.96.0.72"), 80);
        delivered(&ex, pod, addr::node(0), own, 8080);
    }
}

#[test]
fn preserve_dip_delivers_with_the_vip_as_destination() {
    let mut t = topo(Backend::HostGw, Profile::Ws2022);
    let vip = ip("192.168.77.210");
    // A DSR backend holds the VIP on its loopback.
    let backend =
        t.c.add_pod(
            0,
            "dsr-backend",
            PodOptions {
                extra_addresses: vec![vip],
                ..PodOptions::default()
            },
        )
        .unwrap();
    let Who::Pod(_, ep) = backend else {
        unreachable!()
    };
    // kube-proxy's ingress LB with preserve-destination: flags 28, DSR.
    let lb = LoadBalancer {
        host_compute_endpoints: vec![ep],
        frontend_vips: vec![vip],
        port_mappings: vec![LoadBalancerPortMapping {
            protocol: 6,
            internal_port: 8080,
            external_port: 80,
            distribution_type: 0,
            flags: PortMappingFlags::VIP_EXTERNAL_IP
                | PortMappingFlags::USE_MUX
                | PortMappingFlags::PRESERVE_DIP,
        }],
        flags: LoadBalancerFlags::DSR,
        linux_service: "default/preserve:80".into(),
        ..LoadBalancer::default()
    };
    t.c.nodes[0].create(Object::LoadBalancer(lb)).unwrap();
    t.c.external_route(format!("{vip}/32").parse().unwrap(), addr::node(0));
    let ex = t.c.tcp_syn(Who::External, vip, 80);
    // No DNAT: the backend sees the VIP and port as the client sent them.
    delivered(&ex, backend, addr::ROUTER, vip, 80);
}

/// A load balancer for pod b on node1 with the given port mapping flags.
fn lb_for_b(t: &mut Topo, vip: &str, flags: u32) {
    let Who::Pod(_, ep) = t.b else { unreachable!() };
    let lb = LoadBalancer {
        host_compute_endpoints: vec![ep],
        frontend_vips: vec![ip(vip)],
        port_mappings: vec![LoadBalancerPortMapping {
            protocol: 6,
            internal_port: 8080,
            external_port: 80,
            distribution_type: 0,
            flags,
        }],
        ..LoadBalancer::default()
    };
    t.c.nodes[0].create(Object::LoadBalancer(lb)).unwrap();
    t.c.external_route(format!("{vip}/32").parse().unwrap(), addr::node(0));
}

#[test]
fn an_internal_load_balancer_serves_pods_only() {
    let mut t = topo(Backend::HostGw, Profile::Ws2022);
    lb_for_b(&mut t, "192.168.77.220", PortMappingFlags::ILB);
    let (a, b) = (t.a, t.b);
    assert_eq!(t.c.tcp_syn(a, ip("192.168.77.220"), 80).receiver(), Some(b));
    let ex = t.c.tcp_syn(Who::External, ip("192.168.77.220"), 80);
    assert!(!ex.ok(), "{ex}");
    assert_ne!(ex.receiver(), Some(b));
}

#[test]
fn local_routed_vip_is_reached_from_the_host_even_where_service_vips_are_not() {
    let mut t = topo(Backend::HostGw, Profile::Ws2019);
    lb_for_b(&mut t, "10.96.0.90", PortMappingFlags::LOCAL_ROUTED_VIP);
    lb_for_b(&mut t, "10.96.0.91", 0);
    let b = t.b;
    assert_eq!(
        t.c.tcp_syn(Who::Node(0), ip("10.96.0.90"), 80).receiver(),
        Some(b)
    );
    assert!(!t.c.tcp_syn(Who::Node(0), ip("10.96.0.91"), 80).ok());
}

/// A UDP Service over two pods whose port 53 runs a responder (a DNS server, say): the
/// client's payload crosses the load balancer to one of them (DNAT to its address), the
/// responder's reply comes back from the Service address and port (un-DNAT), on both backends.
#[test]
fn a_udp_service_carries_payloads_to_a_responder_and_its_reply_back() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut c = flannel_cluster(2, Profile::Ws2022, backend);
        let client = c.add_pod(0, "client", PodOptions::default()).unwrap();
        let servers: Vec<Who> = (0..2)
            .map(|i| {
                c.add_pod(i, &format!("dns-{i}"), PodOptions::default())
                    .unwrap()
            })
            .collect();
        for (i, s) in servers.iter().enumerate() {
            let tag = format!("from dns-{i}: ").into_bytes();
            let responder: lab::UdpResponder = std::sync::Arc::new(move |q: &[u8]| {
                (q != b"silent").then(|| [tag.as_slice(), q].concat())
            });
            c.stack_mut(*s)
                .unwrap()
                .udp_responders
                .insert(53, responder);
        }
        let svc = Service::udp(
            "kube-system/kube-dns",
            ip("10.96.0.10"),
            53,
            53,
            servers.clone(),
        );
        c.add_service(&svc).unwrap();
        let mut answered_by = BTreeSet::new();
        for k in 0..16 {
            let q = format!("query {k}").into_bytes();
            let ex = c.udp_exchange(client, svc.cluster_ip, 53, &q);
            let (at, seen) = ex.request.clone().expect("the query arrived");
            assert!(
                servers.contains(&at),
                "{backend:?}: arrived at {at:?}\n{ex}"
            );
            assert_eq!(
                Some(seen.dst),
                c.ip_of(at),
                "{backend:?}: DNAT to the backend"
            );
            let reply = ex.reply.as_ref().expect("a reply");
            assert_eq!(reply.src, svc.cluster_ip, "{backend:?}: un-DNAT\n{ex}");
            let payload = ex.reply_payload().unwrap();
            let i = servers.iter().position(|s| *s == at).unwrap();
            assert_eq!(payload, [format!("from dns-{i}: ").as_bytes(), &q].concat());
            answered_by.insert(i);
        }
        assert_eq!(answered_by.len(), 2, "{backend:?}: both backends answered");
        // A responder that sends nothing back: no reply (no echo in its place).
        let ex = c.udp_exchange(client, svc.cluster_ip, 53, b"silent");
        assert!(ex.request.is_some() && ex.reply.is_none(), "{ex}");
        // A port without a responder still echoes.
        let to = c.ip_of(servers[1]).unwrap();
        assert!(c.udp(client, to, 5353).ok());
    }
}
