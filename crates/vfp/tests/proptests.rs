//! Property tests: every wire format round-trips (`parse(emit(x)) == x`); arbitrary and mutated
//! bytes never panic the parsers or the whole switch; the flow table agrees with a model.

mod common;

use common::*;
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use vfp::wire::*;
use vfp::*;

fn mac_s() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(MacAddr)
}

fn ip_s() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        any::<[u8; 16]>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
    ]
}

fn opts(max_words: usize) -> impl Strategy<Value = Vec<u8>> {
    (0..=max_words).prop_flat_map(|w| proptest::collection::vec(any::<u8>(), w * 4))
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

proptest! {
    #[test]
    fn ethernet_round_trips(src in mac_s(), dst in mac_s(), vlan in proptest::option::of(any::<u16>()),
                            et in any::<u16>().prop_filter("not a tag", |e| *e != EtherType::VLAN)) {
        let r = EthernetRepr { src, dst, vlan_tci: vlan, ethertype: et };
        let mut b = vec![0; r.header_len()];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&EthernetFrame::new_checked(&b[..]).unwrap()), r);
    }

    #[test]
    fn arp_round_trips(op in any::<u16>(), sm in mac_s(), tm in mac_s(), si in any::<[u8; 4]>(), ti in any::<[u8; 4]>()) {
        let r = ArpRepr { operation: op.into(), sender_mac: sm, sender_ip: si.into(), target_mac: tm, target_ip: ti.into() };
        let mut b = vec![0; 28];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()), r);
    }

    #[test]
    fn ipv4_round_trips(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), protocol in any::<u8>(), ttl in any::<u8>(),
                        tos in any::<u8>(), ident in any::<u16>(), df in any::<bool>(), mf in any::<bool>(),
                        frag in 0u16..8192, options in opts(10), payload_len in 0usize..64) {
        let r = Ipv4Repr { src: src.into(), dst: dst.into(), protocol, ttl, tos, ident, dont_frag: df, more_frags: mf,
                           frag_offset: frag * 8, options, payload_len };
        let mut b = vec![0; r.header_len() + payload_len];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(Ipv4Repr::parse(&Ipv4Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn ipv6_round_trips(src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), nh in any::<u8>(), hl in any::<u8>(),
                        tc in any::<u8>(), fl in 0u32..(1 << 20), payload_len in 0usize..64) {
        let r = Ipv6Repr { src: src.into(), dst: dst.into(), next_header: nh, hop_limit: hl, traffic_class: tc,
                           flow_label: fl, payload_len };
        let mut b = vec![0; 40 + payload_len];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()), r);
    }

    #[test]
    fn tcp_round_trips(s in ip_s(), sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>(), ack in any::<u32>(),
                       flags in any::<u8>(), window in any::<u16>(), urgent in any::<u16>(), options in opts(10),
                       payload in bytes(64)) {
        let d = if s.is_ipv4() { ip("10.0.0.1") } else { ip("fd00::1") };
        let r = TcpRepr { src_port: sp, dst_port: dp, seq, ack, flags: TcpFlags(flags), window, urgent, options, payload };
        let mut b = vec![0; r.len()];
        r.emit(&mut b, s, d).unwrap();
        prop_assert_eq!(TcpRepr::parse(&TcpPacket::new_checked(&b[..]).unwrap(), s, d).unwrap(), r);
    }

    #[test]
    fn udp_round_trips(s in ip_s(), sp in any::<u16>(), dp in any::<u16>(), payload in bytes(64)) {
        let d = if s.is_ipv4() { ip("10.0.0.1") } else { ip("fd00::1") };
        let r = UdpRepr { src_port: sp, dst_port: dp, payload };
        let mut b = vec![0; r.len()];
        r.emit(&mut b, s, d).unwrap();
        prop_assert_eq!(UdpRepr::parse(&UdpPacket::new_checked(&b[..]).unwrap(), s, d).unwrap(), r);
    }

    #[test]
    fn icmpv4_round_trips(ty in any::<u8>(), code in any::<u8>(), rest in any::<[u8; 4]>(), data in bytes(48)) {
        let r = if (ty == 0 || ty == 8) && code == 0 {
            Icmpv4Repr::Echo { request: ty == 8, ident: u16::from_be_bytes([rest[0], rest[1]]),
                               seq: u16::from_be_bytes([rest[2], rest[3]]), data }
        } else {
            Icmpv4Repr::Other { msg_type: ty, code, rest, data }
        };
        let mut b = vec![0; r.len()];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(Icmpv4Repr::parse(&Icmpv4Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
    }

    #[test]
    fn icmpv6_round_trips(kind in 0u8..4, ty in any::<u8>(), rest in any::<[u8; 4]>(), target in any::<[u8; 16]>(),
                          m in proptest::option::of(mac_s()), flags in any::<[bool; 3]>(), data in bytes(48)) {
        let (s, d) = (v6addr(ip("fd00::1")), v6addr(ip("fd00::2")));
        let r = match kind {
            0 => Icmpv6Repr::Echo { request: flags[0], ident: 7, seq: 9, data },
            1 => Icmpv6Repr::NeighborSolicit { target: target.into(), source_mac: m },
            2 => Icmpv6Repr::NeighborAdvert { router: flags[0], solicited: flags[1], override_: flags[2],
                                              target: target.into(), target_mac: m },
            _ => {
                let ty = if matches!(ty, 128 | 129 | 135 | 136) { 1 } else { ty };
                Icmpv6Repr::Other { msg_type: ty, code: 0, rest, data }
            }
        };
        let mut b = vec![0; r.len()];
        r.emit(&mut b, s, d).unwrap();
        prop_assert_eq!(Icmpv6Repr::parse(&Icmpv6Packet::new_checked(&b[..]).unwrap(), s, d).unwrap(), r);
    }

    #[test]
    fn vxlan_round_trips(vni in 0u32..(1 << 24)) {
        let r = VxlanRepr { vni };
        let mut b = [0u8; 8];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(VxlanRepr::parse(&VxlanPacket::new_checked(&b[..]).unwrap()), r);
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_bytes(b in bytes(200)) {
        let a4: IpAddr = ip("10.0.0.1");
        let a6: IpAddr = ip("fd00::1");
        if let Ok(f) = EthernetFrame::new_checked(&b[..]) { let _ = EthernetRepr::parse(&f); let _ = f.payload(); }
        if let Ok(p) = ArpPacket::new_checked(&b[..]) { let _ = ArpRepr::parse(&p); }
        if let Ok(p) = Ipv4Packet::new_checked(&b[..]) { let _ = Ipv4Repr::parse(&p); let _ = p.payload(); }
        if let Ok(p) = Ipv6Packet::new_checked(&b[..]) { let _ = Ipv6Repr::parse(&p); let _ = p.upper_layer(); }
        if let Ok(p) = TcpPacket::new_checked(&b[..]) { let _ = TcpRepr::parse(&p, a4, a4); let _ = TcpRepr::parse(&p, a6, a6); }
        if let Ok(p) = UdpPacket::new_checked(&b[..]) { let _ = UdpRepr::parse(&p, a4, a4); let _ = UdpRepr::parse(&p, a6, a6); }
        if let Ok(p) = Icmpv4Packet::new_checked(&b[..]) { let _ = Icmpv4Repr::parse(&p); }
        if let Ok(p) = Icmpv6Packet::new_checked(&b[..]) {
            let _ = Icmpv6Repr::parse(&p, v6addr(a6), v6addr(a6));
            let _ = p.nd_target();
        }
        if let Ok(p) = VxlanPacket::new_checked(&b[..]) { let _ = VxlanRepr::parse(&p); }
    }
}

/// A switch with every kind of rule, so that arbitrary frames reach every code path.
fn busy_switch() -> (Switch, Vec<PortId>) {
    use vfp::layer::{ACL, MAC, NAT, ROUTE, SLB};
    let mut sw = Switch::new(SwitchConfig {
        max_flows: 64,
        ..SwitchConfig::default()
    });
    let a = sw
        .add_port(PortConfig::pod(
            "a",
            mac(10),
            vec![ip("10.0.0.10"), ip("fd00::10")],
        ))
        .unwrap();
    let b = sw
        .add_port(PortConfig::pod("b", mac(11), vec![ip("10.0.0.11")]).on_vni(4096))
        .unwrap();
    let up = sw.add_port(PortConfig::uplink("up")).unwrap();
    sw.own_address(ip("10.0.0.1"), mac(1));
    sw.own_address(ip("fd00::1"), mac(1));
    sw.add_provider_address(ip("192.168.0.5"));
    let pool = sw.add_snat_pool(ip("192.168.0.5"), 1000, 1003);
    let lb = LoadBalancer {
        source_nat: Some(pool),
        ..LoadBalancer::new(vec![Backend {
            ip: ip("10.0.0.11"),
            port: Some(80),
            mac: Some(mac(11)),
        }])
    };
    let e = Arc::new(Encap {
        vni: 4096,
        src_mac: mac(20),
        dst_mac: mac(30),
        src_ip: ip("192.168.0.5"),
        dst_ip: ip("192.168.0.6"),
        udp_port: 4789,
    });
    let o = |s: &str| Origin::new("Fuzz", s);
    for p in [a, b, up] {
        sw.layer_mut(p, SLB).unwrap().set_rules(
            o("lb"),
            vec![Rule::new(
                1,
                Conditions::any().dst_ip(ip("10.96.0.1")),
                Action::LoadBalance(Arc::new(lb.clone())),
            )],
        );
        sw.layer_mut(p, NAT).unwrap().set_rules(
            o("nat"),
            vec![Rule::new(
                1,
                Conditions::any()
                    .direction(Direction::Out)
                    .dst_net("8.0.0.0/8".parse().unwrap()),
                Action::Snat { pool },
            )],
        );
        sw.layer_mut(p, ROUTE).unwrap().set_rules(
            o("rt"),
            vec![
                Rule::route(
                    "10.1.0.0/16".parse().unwrap(),
                    Action::Encap {
                        outer: e.clone(),
                        inner_dst_mac: Some(mac(40)),
                    },
                ),
                Rule::new(0, Conditions::any().vni(4096), Action::Decap),
            ],
        );
        sw.layer_mut(p, ACL).unwrap().set_rules(
            o("acl"),
            vec![Rule::new(1, Conditions::any().dst_port(22), Action::Block)],
        );
        sw.layer_mut(p, MAC).unwrap().set_rules(
            o("mac"),
            vec![Rule::new(
                1,
                Conditions::any().dst_net("fd00::/8".parse().unwrap()),
                Action::MacRewrite {
                    src: Some(mac(20)),
                    dst: None,
                },
            )],
        );
    }
    (sw, vec![a, b, up, 9])
}

fn seed_frames() -> Vec<Vec<u8>> {
    let inner = pkt::udp("10.1.2.3", 5, "10.0.0.11", 7, b"x")
        .with_macs(mac(40), mac(11))
        .build();
    let mut vx = pkt::udp("192.168.0.6", 5000, "192.168.0.5", 4789, &[]).build();
    let mut payload = vec![0x08, 0, 0, 0, 0, 0x10, 0, 0];
    payload.extend_from_slice(&inner);
    vx = {
        let mut p = pkt::udp("192.168.0.6", 5000, "192.168.0.5", 4789, &payload);
        p.src_mac = mac(30);
        let _ = vx;
        p.build()
    };
    vec![
        pkt::tcp("10.0.0.10", 1, "10.96.0.1", 80, SYN)
            .with_macs(mac(10), mac(1))
            .build(),
        pkt::udp("10.0.0.10", 1, "8.8.8.8", 53, b"abc")
            .with_macs(mac(10), mac(1))
            .build(),
        pkt::echo("10.0.0.10", "10.1.0.9", true, 3)
            .with_macs(mac(10), mac(1))
            .build(),
        pkt::tcp("fd00::10", 1, "fd00::99", 22, SYN)
            .with_macs(mac(10), mac(1))
            .build(),
        vx,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_switch_never_panics_on_arbitrary_frames(frames in proptest::collection::vec((0usize..4, bytes(160)), 1..8)) {
        let (mut sw, ports) = busy_switch();
        for (i, (p, b)) in frames.iter().enumerate() {
            let _ = sw.trace(ports[*p], b, Timestamp(i as u64));
            let mut f = Frame::new(b);
            let _ = sw.process(ports[*p], &mut f, Timestamp(i as u64));
        }
        sw.expire(Timestamp::from_secs(1000));
    }

    #[test]
    fn the_switch_never_panics_on_mutated_valid_frames(
        pick in 0usize..5, port in 0usize..4,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let (mut sw, ports) = busy_switch();
        let mut b = seed_frames()[pick].clone();
        for (at, v) in &edits {
            let i = at.index(b.len());
            b[i] = *v;
        }
        if let Some(c) = cut {
            b.truncate(c.index(b.len() + 1));
        }
        for t in 0..3 {
            let _ = sw.trace(ports[port], &b, Timestamp(t));
            let mut f = Frame::new(&b);
            let _ = sw.process(ports[port], &mut f, Timestamp(t));
            // Whatever left the switch is a frame it can parse again.
            let mut again = Frame::new(f.bytes());
            let _ = sw.process(ports[(port + 1) % 4], &mut again, Timestamp(t));
        }
    }

    #[test]
    // Not to 4789: `verify_checksums` reads a datagram to the VXLAN port as an encapsulated
    // frame, and this payload is random bytes, not a frame.
    fn rewritten_frames_keep_valid_checksums(sport in 1u16..65535, dport in (1u16..65535).prop_filter("not the VXLAN port", |p| *p != 4789), payload in bytes(40), v6 in any::<bool>()) {
        let (mut sw, ports) = busy_switch();
        let p = if v6 {
            pkt::udp("fd00::10", sport, "fd00::99", dport, &payload).with_macs(mac(10), mac(1))
        } else {
            pkt::udp("10.0.0.10", sport, "8.8.8.8", dport, &payload).with_macs(mac(10), mac(1))
        };
        let mut f = Frame::new(&p.build());
        let d = sw.process(ports[0], &mut f, Timestamp(0));
        prop_assert!(matches!(d, Disposition::Uplink(_)) || d == Disposition::Drop(DropReason::SnatExhausted));
        verify_checksums(f.bytes());
    }
}

mod flow_table_model {
    use super::*;
    use std::collections::HashMap;
    use vfp::flow_table::{FlowRecord, FlowTable};
    use vfp::tcp_state::FlowSide;

    fn rec(n: u16, stateful: bool) -> FlowRecord {
        let orig = Headers {
            src_ip: ip("10.0.0.1"),
            dst_ip: ip("10.0.0.2"),
            proto: 17,
            src_port: n,
            dst_port: 53,
            ..Headers::empty()
        };
        let mut fin = orig;
        fin.src_port = n.wrapping_add(10_000);
        let mut r = FlowRecord::new(orig, fin);
        r.port_a = 0;
        r.port_b = 1;
        r.set_stateful(stateful);
        r
    }

    proptest! {
        #[test]
        fn agrees_with_a_model(ops in proptest::collection::vec((any::<bool>(), 0u16..40, any::<bool>()), 1..200)) {
            let mut t = FlowTable::new(25, 7);
            let mut model: HashMap<u16, bool> = HashMap::new();
            for (insert, n, stateful) in ops {
                let r = rec(n, stateful);
                let fk = r.key(FlowSide::Forward);
                if insert {
                    let full = model.len() >= 25 && !model.contains_key(&n);
                    match t.insert(r) {
                        Ok(_) => { prop_assert!(!full); model.insert(n, stateful); }
                        Err(_) => prop_assert!(full),
                    }
                } else if let Some((slot, _)) = t.find(&fk, t.hash(&fk)) {
                    t.remove(slot);
                    model.remove(&n);
                }
                prop_assert_eq!(t.len(), model.len());
            }
            for n in 0u16..40 {
                let r = rec(n, true);
                let (fk, rk) = (r.key(FlowSide::Forward), r.key(FlowSide::Reverse));
                let f = t.find(&fk, t.hash(&fk));
                let b = t.find(&rk, t.hash(&rk));
                prop_assert_eq!(f.is_some(), model.contains_key(&n));
                prop_assert_eq!(b.is_some(), model.get(&n) == Some(&true));
            }
        }
    }
}
