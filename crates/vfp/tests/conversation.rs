//! A whole TCP connection through a non-DSR load balancer (DNAT to the backend and SNAT to the
//! SourceVIP) between two pods, and the switch behaviour around it: lazy re-evaluation after
//! rule changes, idle expiry by TCP state, the capacity limit, stateless rules.

mod common;

use common::*;
use std::sync::Arc;
use vfp::layer::{ACL, SLB};
use vfp::wire::proto;
use vfp::*;

struct Lb {
    sw: Switch,
    a: PortId,
    b: PortId,
    c: PortId,
    pool: PoolId,
}

const VIP: &str = "10.96.0.10";
const SVIP: &str = "10.244.1.250";

/// Client pod A, backend pods B and C; a ClusterIP LB at A's SLB layer with SourceVIP SNAT.
fn lb(backends: &[(&str, u8)]) -> Lb {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("client", mac(10), vec![ip("10.244.1.10")]))
        .unwrap();
    let b = sw
        .add_port(PortConfig::pod("web-1", mac(11), vec![ip("10.244.1.11")]))
        .unwrap();
    let c = sw
        .add_port(PortConfig::pod("web-2", mac(12), vec![ip("10.244.1.12")]))
        .unwrap();
    sw.own_address(ip("10.244.1.1"), mac(1));
    let pool = sw.add_snat_pool(ip(SVIP), 50000, 50063);
    let mut n = Lb { sw, a, b, c, pool };
    set_backends(&mut n, backends);
    n
}

fn set_backends(n: &mut Lb, backends: &[(&str, u8)]) {
    let backends = backends
        .iter()
        .map(|(i, m)| Backend {
            ip: ip(i),
            port: Some(8080),
            mac: Some(mac(*m)),
        })
        .collect();
    let mut lb = LoadBalancer::new(backends);
    lb.source_nat = Some(n.pool);
    let c = Conditions::any()
        .protocol(proto::TCP)
        .dst_ip(ip(VIP))
        .dst_port(80);
    let rule = Rule::new(10, c, Action::LoadBalance(Arc::new(lb)));
    let origin = Origin::new("LoadBalancer", "lb-1").with_source("Service default/web port 80");
    n.sw.layer_mut(n.a, SLB)
        .unwrap()
        .set_rules(origin, vec![rule]);
}

fn send(sw: &mut Switch, from: PortId, p: &Packet, t: u64) -> (Disposition, Vec<u8>) {
    let mut f = Frame::new(&p.build());
    let d = sw.process(from, &mut f, Timestamp::from_secs(t));
    (d, f.bytes().to_vec())
}

/// Client side of the connection as the client sees it.
fn c2s(flags: u8, seq: u32, ack: u32) -> Packet {
    pkt::tcp("10.244.1.10", 40000, VIP, 80, flags)
        .with_macs(mac(10), mac(1))
        .with_seq_ack(seq, ack)
}

/// The same segment as the backend must receive it.
fn c2s_at_backend(flags: u8, seq: u32, ack: u32, sport: u16) -> Packet {
    pkt::tcp(SVIP, sport, "10.244.1.11", 8080, flags)
        .with_macs(mac(10), mac(11))
        .with_seq_ack(seq, ack)
}

fn s2c(flags: u8, seq: u32, ack: u32, dport: u16) -> Packet {
    pkt::tcp("10.244.1.11", 8080, SVIP, dport, flags)
        .with_macs(mac(11), mac(10))
        .with_seq_ack(seq, ack)
}

fn s2c_at_client(flags: u8, seq: u32, ack: u32) -> Packet {
    pkt::tcp(VIP, 80, "10.244.1.10", 40000, flags)
        .with_macs(mac(1), mac(10))
        .with_seq_ack(seq, ack)
}

#[test]
fn tcp_handshake_data_and_close_through_dnat_and_snat() {
    let mut n = lb(&[("10.244.1.11", 11)]);
    let (a, b) = (n.a, n.b);
    let sport = 50000; // first port of the SourceVIP pool
    let steps: [(PortId, Packet, PortId, Packet); 7] = [
        (a, c2s(SYN, 100, 0), b, c2s_at_backend(SYN, 100, 0, sport)),
        (
            b,
            s2c(SYN | ACK, 900, 101, sport),
            a,
            s2c_at_client(SYN | ACK, 900, 101),
        ),
        (
            a,
            c2s(ACK, 101, 901),
            b,
            c2s_at_backend(ACK, 101, 901, sport),
        ),
        (
            b,
            s2c(ACK | 0x08, 901, 101, sport),
            a,
            s2c_at_client(ACK | 0x08, 901, 101),
        ),
        (
            a,
            c2s(FIN | ACK, 101, 902),
            b,
            c2s_at_backend(FIN | ACK, 101, 902, sport),
        ),
        (
            b,
            s2c(FIN | ACK, 902, 102, sport),
            a,
            s2c_at_client(FIN | ACK, 902, 102),
        ),
        (
            a,
            c2s(ACK, 102, 903),
            b,
            c2s_at_backend(ACK, 102, 903, sport),
        ),
    ];
    for (i, (from, pkt, to, want)) in steps.iter().enumerate() {
        let (d, out) = send(&mut n.sw, *from, pkt, i as u64);
        assert_eq!(d, Disposition::Deliver(*to), "step {i}");
        assert_eq!(out, want.build(), "step {i}: bytes");
        verify_checksums(&out);
    }
    // One connection, one slow path, six fast-path packets; the pool lent one port.
    assert_eq!(n.sw.flows().len(), 1);
    assert_eq!(n.sw.flow_counters().created, 1);
    assert_eq!(n.sw.flow_counters().hits, 6);
    assert_eq!(n.sw.port(a).unwrap().counters.slow_path, 1);
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().available(0), 63);
    let rule = n.sw.port(a).unwrap().layer(SLB).unwrap().groups()[0]
        .rules()
        .next()
        .unwrap()
        .hits;
    assert_eq!(rule, 1);
    // Closed connections go after the short closed timeout, and give the port back.
    assert_eq!(n.sw.expire(Timestamp::from_secs(7)), 0);
    assert_eq!(n.sw.expire(Timestamp::from_secs(13)), 1);
    assert!(n.sw.flows().is_empty());
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().available(0), 64);
}

#[test]
fn established_connections_live_longer_than_half_open_ones() {
    let mut n = lb(&[("10.244.1.11", 11)]);
    send(&mut n.sw, n.a, &c2s(SYN, 1, 0), 0);
    assert_eq!(n.sw.expire(Timestamp::from_secs(31)), 1, "half-open: 30 s");
    send(&mut n.sw, n.a, &c2s(SYN, 1, 0), 100);
    send(&mut n.sw, n.b, &s2c(SYN | ACK, 1, 2, 50001), 100);
    assert_eq!(
        n.sw.expire(Timestamp::from_secs(200)),
        0,
        "established: 240 s"
    );
    assert_eq!(n.sw.expire(Timestamp::from_secs(341)), 1);
}

#[test]
fn a_new_syn_on_a_closed_tuple_starts_a_new_connection() {
    let mut n = lb(&[("10.244.1.11", 11)]);
    send(&mut n.sw, n.a, &c2s(SYN, 1, 0), 0);
    send(
        &mut n.sw,
        n.b,
        &s2c(vfp::wire::TcpFlags::RST, 0, 0, 50000),
        0,
    );
    send(&mut n.sw, n.a, &c2s(SYN, 5, 0), 1);
    assert_eq!(n.sw.flow_counters().created, 2);
    assert_eq!(n.sw.flows().len(), 1);
}

#[test]
fn rule_changes_reevaluate_lazily_and_keep_live_backends() {
    let mut n = lb(&[("10.244.1.11", 11), ("10.244.1.12", 12)]);
    let client = |port: u16| pkt::tcp("10.244.1.10", port, VIP, 80, SYN).with_macs(mac(10), mac(1));
    let mut first = std::collections::HashMap::new();
    for p in 0..20u16 {
        let (d, _) = send(&mut n.sw, n.a, &client(41000 + p), 0);
        first.insert(p, d);
    }
    assert!(first.values().any(|d| *d == Disposition::Deliver(n.b)));
    assert!(first.values().any(|d| *d == Disposition::Deliver(n.c)));
    // An unrelated rule change marks every flow of the port stale, flushing nothing.
    let acl = Rule::new(1, Conditions::any().protocol(proto::UDP), Action::Block);
    n.sw.layer_mut(n.a, ACL)
        .unwrap()
        .set_rules(Origin::new("ACL", "x"), vec![acl]);
    assert_eq!(n.sw.flows().len(), 20);
    for p in 0..20u16 {
        let (d, _) = send(
            &mut n.sw,
            n.a,
            &client(41000 + p).with_macs(mac(10), mac(1)),
            1,
        );
        assert_eq!(d, first[&p], "connection {p} kept its backend");
    }
    assert_eq!(n.sw.flow_counters().reevaluated, 20);
    assert_eq!(n.sw.flow_counters().created, 20);
    // Removing a backend moves only its connections.
    set_backends(&mut n, &[("10.244.1.11", 11)]);
    for p in 0..20u16 {
        let (d, _) = send(&mut n.sw, n.a, &client(41000 + p), 2);
        assert_eq!(d, Disposition::Deliver(n.b));
    }
    // Removing the load balancer: the VIP is no longer translated.
    n.sw.layer_mut(n.a, SLB)
        .unwrap()
        .remove_owner(&Owner::new("LoadBalancer", "lb-1"));
    let (_, out) = send(&mut n.sw, n.a, &client(41000), 3);
    assert_eq!(out, client(41000).build());
}

#[test]
fn the_flow_table_limit_refuses_new_connections_and_counts_them() {
    let cfg = SwitchConfig {
        max_flows: 2,
        ..SwitchConfig::default()
    };
    let mut sw = Switch::new(cfg);
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip("10.0.0.1")]))
        .unwrap();
    sw.add_port(PortConfig::pod("b", mac(11), vec![ip("10.0.0.2")]))
        .unwrap();
    let p = |port| pkt::udp("10.0.0.1", port, "10.0.0.2", 53, b"q").with_macs(mac(10), mac(11));
    for port in [1, 2] {
        assert!(matches!(
            send(&mut sw, a, &p(port), 0).0,
            Disposition::Deliver(_)
        ));
    }
    assert_eq!(
        send(&mut sw, a, &p(3), 0).0,
        Disposition::Drop(DropReason::FlowTableFull)
    );
    assert_eq!(sw.flow_counters().full_drops, 1);
    assert_eq!(
        sw.port(a)
            .unwrap()
            .counters
            .dropped(DropReason::FlowTableFull),
        1
    );
    // Existing connections are unaffected.
    assert!(matches!(
        send(&mut sw, a, &p(1), 0).0,
        Disposition::Deliver(_)
    ));
}

#[test]
fn stateless_rules_cache_no_reverse_entry() {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip("10.0.0.1")]))
        .unwrap();
    let b = sw
        .add_port(PortConfig::pod("b", mac(11), vec![ip("10.0.0.2")]))
        .unwrap();
    let r = Rule::new(
        1,
        Conditions::any().direction(Direction::Out),
        Action::Allow,
    )
    .stateless();
    sw.layer_mut(a, ACL)
        .unwrap()
        .set_rules(Origin::new("ACL", "s"), vec![r]);
    let block_in = Rule::new(2, Conditions::any().direction(Direction::In), Action::Block);
    sw.layer_mut(a, ACL)
        .unwrap()
        .set_rules(Origin::new("ACL", "in"), vec![block_in]);
    let req = pkt::udp("10.0.0.1", 5000, "10.0.0.2", 53, b"q").with_macs(mac(10), mac(11));
    assert_eq!(send(&mut sw, a, &req, 0).0, Disposition::Deliver(b));
    // The reply is judged by A's inbound rules, which block it.
    let rep = pkt::udp("10.0.0.2", 53, "10.0.0.1", 5000, b"r").with_macs(mac(11), mac(10));
    assert_eq!(
        send(&mut sw, b, &rep, 0).0,
        Disposition::Drop(DropReason::BlockedByRule)
    );
}

#[test]
fn internal_switch_drops_unknown_destinations_external_sends_them_up() {
    let cfg = SwitchConfig {
        kind: SwitchKind::Internal,
        ..SwitchConfig::default()
    };
    let mut sw = Switch::new(cfg);
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip("10.0.0.1")]))
        .unwrap();
    assert!(sw.add_port(PortConfig::uplink("eth0")).is_err());
    let p = pkt::udp("10.0.0.1", 1, "10.9.9.9", 2, b"").with_macs(mac(10), mac(77));
    assert_eq!(
        send(&mut sw, a, &p, 0).0,
        Disposition::Drop(DropReason::UnknownDestination)
    );
    let mut ext = Switch::new(SwitchConfig::default());
    let a = ext.add_port(PortConfig::pod("a", mac(10), vec![])).unwrap();
    let up = ext.add_port(PortConfig::uplink("eth0")).unwrap();
    assert_eq!(send(&mut ext, a, &p, 0).0, Disposition::Uplink(up));
    assert!(ext.add_port(PortConfig::uplink("eth1")).is_err());
}

#[test]
fn nodeport_at_the_uplink_and_dsr_rewrite_at_the_backends_own_port() {
    let mut sw = Switch::new(SwitchConfig::default());
    let b = sw
        .add_port(PortConfig::pod("web", mac(11), vec![ip("10.244.1.11")]))
        .unwrap();
    let up = sw.add_port(PortConfig::uplink("eth0")).unwrap();
    sw.add_port(PortConfig::host("host", mac(20), vec![ip("192.168.1.5")]))
        .unwrap();
    // DSR/PreserveDIP: the LB picks the local backend by MAC only; the VIP stays until the
    // backend's own port translates it (and translates replies back to the VIP).
    let lb = LoadBalancer {
        preserve_dst: true,
        ..LoadBalancer::new(vec![Backend {
            ip: ip("10.244.1.11"),
            port: None,
            mac: Some(mac(11)),
        }])
    };
    let vip = Conditions::any()
        .protocol(proto::TCP)
        .dst_ip(ip("203.0.113.10"))
        .dst_port(80);
    let rule = Rule::new(1, vip.clone(), Action::LoadBalance(Arc::new(lb)));
    sw.layer_mut(up, SLB)
        .unwrap()
        .set_rules(Origin::new("LoadBalancer", "ingress"), vec![rule]);
    let dsr = Rule::new(
        1,
        vip.direction(Direction::In),
        Action::Dnat {
            ip: ip("10.244.1.11"),
            port: Some(8080),
        },
    );
    sw.layer_mut(b, SLB)
        .unwrap()
        .set_rules(Origin::new("LoadBalancer", "ingress/dsr"), vec![dsr]);
    let client =
        pkt::tcp("198.51.100.7", 33000, "203.0.113.10", 80, SYN).with_macs(mac(60), mac(20));
    let (d, out) = send(&mut sw, up, &client, 0);
    assert_eq!(d, Disposition::Deliver(b));
    let mut want = client.clone().with_macs(mac(60), mac(11));
    want.dst = ip("10.244.1.11");
    if let L4::Tcp { dst_port, .. } = &mut want.l4 {
        *dst_port = 8080;
    }
    assert_eq!(out, want.build());
    // The backend answers from its own address; the client sees the VIP.
    let reply =
        pkt::tcp("10.244.1.11", 8080, "198.51.100.7", 33000, SYN | ACK).with_macs(mac(11), mac(60));
    let (d, out) = send(&mut sw, b, &reply, 0);
    assert_eq!(d, Disposition::Uplink(up));
    let mut want = reply.clone().with_macs(mac(20), mac(60));
    want.src = ip("203.0.113.10");
    if let L4::Tcp { src_port, .. } = &mut want.l4 {
        *src_port = 80;
    }
    assert_eq!(out, want.build());
    verify_checksums(&out);
}
