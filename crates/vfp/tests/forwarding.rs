//! Forwarding cases an HNS compiler relies on: one MAC on two virtual networks, a rewritten
//! packet leaving by the uplink it came in on, a refusal as unsupported, and PreserveDIP with
//! a backend that is not local.

mod common;

use common::*;
use std::sync::Arc;
use vfp::layer::{NAT, ROUTE, SLB};
use vfp::wire::proto;
use vfp::*;

const T0: Timestamp = Timestamp(0);

fn run(sw: &mut Switch, from: PortId, bytes: &[u8]) -> (Disposition, Vec<u8>) {
    let mut f = Frame::new(bytes);
    let d = sw.process(from, &mut f, T0);
    (d, f.bytes().to_vec())
}

#[test]
fn a_mac_on_two_virtual_networks_reaches_the_port_on_the_senders_network() {
    let mut sw = Switch::new(SwitchConfig::default());
    let pod = |n: &str, ip_: &str, vni| PortConfig::pod(n, mac(10), vec![ip(ip_)]).on_vni(vni);
    let a1 = sw.add_port(pod("a1", "10.244.1.10", 4096)).unwrap();
    let a2 = sw.add_port(pod("a2", "10.244.1.10", 5000)).unwrap();
    let b1 = sw
        .add_port(PortConfig::pod("b1", mac(11), vec![ip("10.244.1.11")]).on_vni(4096))
        .unwrap();
    let b2 = sw
        .add_port(PortConfig::pod("b2", mac(11), vec![ip("10.244.1.11")]).on_vni(5000))
        .unwrap();
    let p = pkt::udp("10.244.1.10", 1000, "10.244.1.11", 53, b"x").with_macs(mac(10), mac(11));
    assert_eq!(run(&mut sw, a1, &p.build()).0, Disposition::Deliver(b1));
    assert_eq!(run(&mut sw, a2, &p.build()).0, Disposition::Deliver(b2));
    // Removing one copy leaves the other reachable.
    sw.remove_port(b1).unwrap();
    let back = pkt::udp("10.244.1.11", 53, "10.244.1.10", 1000, b"y").with_macs(mac(11), mac(10));
    assert_eq!(run(&mut sw, b2, &back.build()).0, Disposition::Deliver(a2));
}

#[test]
fn a_rewritten_packet_may_leave_by_the_uplink_it_came_in_on_an_unchanged_one_may_not() {
    let mut sw = Switch::new(SwitchConfig::default());
    let up = sw.add_port(PortConfig::uplink("eth0")).unwrap();
    let next = Action::MacRewrite {
        src: Some(mac(20)),
        dst: Some(mac(30)),
    };
    let lb = LoadBalancer::new(vec![Backend {
        ip: ip("10.244.2.7"),
        port: Some(8080),
        mac: None,
    }]);
    let vip = Conditions::any()
        .protocol(proto::TCP)
        .dst_ip(ip("192.168.1.5"))
        .dst_port(30080);
    sw.layer_mut(up, SLB).unwrap().set_rules(
        Origin::new("LoadBalancer", "np"),
        vec![Rule::new(1, vip, Action::LoadBalance(Arc::new(lb)))],
    );
    sw.layer_mut(up, ROUTE).unwrap().set_rules(
        Origin::new("Route", "node2"),
        vec![Rule::route("10.244.2.0/24".parse().unwrap(), next)],
    );
    let p = pkt::tcp("192.168.1.100", 40000, "192.168.1.5", 30080, SYN).with_macs(mac(60), mac(20));
    let (d, out) = run(&mut sw, up, &p.build());
    assert_eq!(d, Disposition::Uplink(up));
    let mut want = p.clone().with_macs(mac(20), mac(30));
    want.dst = ip("10.244.2.7");
    if let L4::Tcp { dst_port, .. } = &mut want.l4 {
        *dst_port = 8080;
    }
    assert_eq!(out, want.build());
    let stray = pkt::udp("192.168.1.100", 1, "192.168.1.77", 2, b"").with_macs(mac(60), mac(77));
    assert_eq!(
        run(&mut sw, up, &stray.build()).0,
        Disposition::Drop(DropReason::Hairpin)
    );
}

#[test]
fn an_unsupported_rule_drops_with_its_own_reason_and_the_trace_names_its_origin() {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip("10.244.1.10")]))
        .unwrap();
    sw.add_port(PortConfig::uplink("eth0")).unwrap();
    let why = "ICMP through OutboundNAT is not supported";
    sw.layer_mut(a, NAT).unwrap().set_rules(
        Origin::new("Limitation", "IcmpThroughOutboundNat").with_source(why),
        vec![Rule::new(
            1,
            Conditions::any().protocol(proto::ICMP),
            Action::Unsupported,
        )],
    );
    let ping = pkt::echo("10.244.1.10", "203.0.113.10", true, 7).with_macs(mac(10), mac(1));
    assert_eq!(
        run(&mut sw, a, &ping.build()).0,
        Disposition::Drop(DropReason::Unsupported)
    );
    let t = sw.trace(a, &ping.build(), T0);
    assert!(t.to_string().contains(why), "{t}");
    assert_eq!(
        sw.port(a).unwrap().counters.drops[DropReason::Unsupported.idx()],
        1
    );
}

#[test]
fn preserve_dip_keeps_the_vip_for_local_backends_and_translates_remote_ones() {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("client", mac(10), vec![ip("10.244.1.10")]))
        .unwrap();
    let b = sw
        .add_port(PortConfig::pod("web", mac(11), vec![ip("10.244.1.11")]))
        .unwrap();
    let up = sw.add_port(PortConfig::uplink("eth0")).unwrap();
    let set = |sw: &mut Switch, backend: Backend| {
        let lb = LoadBalancer {
            preserve_dst: true,
            ..LoadBalancer::new(vec![backend])
        };
        let c = Conditions::any()
            .protocol(proto::TCP)
            .dst_ip(ip("10.96.0.10"))
            .dst_port(80);
        sw.layer_mut(a, SLB).unwrap().set_rules(
            Origin::new("LoadBalancer", "web"),
            vec![Rule::new(1, c, Action::LoadBalance(Arc::new(lb)))],
        );
    };
    set(
        &mut sw,
        Backend {
            ip: ip("10.244.1.11"),
            port: Some(8080),
            mac: Some(mac(11)),
        },
    );
    let p = pkt::tcp("10.244.1.10", 40000, "10.96.0.10", 80, SYN).with_macs(mac(10), mac(1));
    let (d, out) = run(&mut sw, a, &p.build());
    assert_eq!(d, Disposition::Deliver(b));
    assert_eq!(out, p.clone().with_macs(mac(10), mac(11)).build());
    set(
        &mut sw,
        Backend {
            ip: ip("10.244.2.7"),
            port: Some(8080),
            mac: None,
        },
    );
    let p = pkt::tcp("10.244.1.10", 40001, "10.96.0.10", 80, SYN).with_macs(mac(10), mac(1));
    let (d, out) = run(&mut sw, a, &p.build());
    assert_eq!(d, Disposition::Uplink(up));
    let mut want = p.clone();
    want.dst = ip("10.244.2.7");
    if let L4::Tcp { dst_port, .. } = &mut want.l4 {
        *dst_port = 8080;
    }
    assert_eq!(out, want.build());
}

#[test]
fn a_port_added_with_a_number_keeps_it_and_frames_reach_it() {
    // A switch rebuilt from a record numbers its ports as the recorded one did, gaps included.
    let mut sw = Switch::new(SwitchConfig::default());
    let b = sw
        .add_port_as(7, PortConfig::pod("b", mac(11), vec![ip("10.244.1.11")]))
        .unwrap();
    assert_eq!(b, 7);
    let a = sw
        .add_port_as(3, PortConfig::pod("a", mac(10), vec![ip("10.244.1.10")]))
        .unwrap();
    assert_eq!(a, 3);
    // A number in use is refused, and plain adds take the free numbers below.
    let taken = sw.add_port_as(7, PortConfig::pod("c", mac(12), vec![ip("10.244.1.12")]));
    assert!(matches!(taken, Err(ConfigError::Duplicate(_))), "{taken:?}");
    let c = sw
        .add_port(PortConfig::pod("c", mac(12), vec![ip("10.244.1.12")]))
        .unwrap();
    assert_eq!(c, 0);
    let p = pkt::udp("10.244.1.10", 1000, "10.244.1.11", 53, b"x").with_macs(mac(10), mac(11));
    assert_eq!(run(&mut sw, a, &p.build()).0, Disposition::Deliver(b));
}
