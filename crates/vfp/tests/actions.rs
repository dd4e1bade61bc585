//! One test per action, on byte-exact frames: the rewritten frame must equal a frame built from
//! scratch with the expected headers, and its checksums must verify independently.

mod common;

use common::*;
use std::sync::Arc;
use vfp::layer::{ACL, MAC, NAT, ROUTE, SLB};
use vfp::wire::{MacAddr, proto};
use vfp::*;

const T0: Timestamp = Timestamp(0);

struct Net {
    sw: Switch,
    a: PortId,
    b: PortId,
    uplink: PortId,
}

/// Pods A (10.244.1.10, mac 10) and B (10.244.1.11, mac 11), the host vNIC (192.168.1.5,
/// mac 20), an uplink, and a gateway 10.244.1.1 with mac 1 owned by the switch.
fn net() -> Net {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip("10.244.1.10")]))
        .unwrap();
    let b = sw
        .add_port(PortConfig::pod("b", mac(11), vec![ip("10.244.1.11")]))
        .unwrap();
    sw.add_port(PortConfig::host("host", mac(20), vec![ip("192.168.1.5")]))
        .unwrap();
    let uplink = sw.add_port(PortConfig::uplink("eth0")).unwrap();
    sw.own_address(ip("10.244.1.1"), mac(1));
    Net { sw, a, b, uplink }
}

fn run(sw: &mut Switch, from: PortId, bytes: &[u8]) -> (Disposition, Vec<u8>) {
    let mut f = Frame::new(bytes);
    let d = sw.process(from, &mut f, T0);
    (d, f.bytes().to_vec())
}

fn origin(id: &str) -> Origin {
    Origin::new("Test", id)
}

/// Programs A's SLB layer to DNAT `proto` to 10.96.0.10:`port` onto B (10.244.1.11:`to`).
fn dnat_to_b(n: &mut Net, protocol: u8, port: u16, to: u16) {
    let c = Conditions::any()
        .protocol(protocol)
        .dst_ip(ip("10.96.0.10"))
        .dst_port(port);
    let dnat = Action::Dnat {
        ip: ip("10.244.1.11"),
        port: Some(to),
    };
    n.sw.layer_mut(n.a, SLB)
        .unwrap()
        .set_rules(origin("dnat"), vec![Rule::new(1, c, dnat)]);
}

#[test]
fn allow_passes_the_frame_unchanged() {
    let mut n = net();
    let p = pkt::tcp("10.244.1.10", 40000, "10.244.1.11", 80, SYN).with_macs(mac(10), mac(11));
    let (d, out) = run(&mut n.sw, n.a, &p.build());
    assert_eq!(d, Disposition::Deliver(n.b));
    assert_eq!(out, p.build());
}

#[test]
fn block_drops_with_a_typed_reason_and_counts_it() {
    let mut n = net();
    let c = Conditions::any()
        .direction(Direction::Out)
        .protocol(proto::TCP)
        .dst_port(22);
    let rule = Rule::new(100, c, Action::Block);
    n.sw.layer_mut(n.a, ACL)
        .unwrap()
        .set_rules(origin("no-ssh"), vec![rule]);
    let p = pkt::tcp("10.244.1.10", 40000, "10.244.1.11", 22, SYN).with_macs(mac(10), mac(11));
    let (d, _) = run(&mut n.sw, n.a, &p.build());
    assert_eq!(d, Disposition::Drop(DropReason::BlockedByRule));
    let port = n.sw.port(n.a).unwrap();
    assert_eq!(port.counters.dropped(DropReason::BlockedByRule), 1);
    let acl = port.layer(ACL).unwrap();
    assert_eq!((acl.counters.rule_hits, acl.counters.drops), (1, 1));
    assert_eq!(acl.groups()[0].rules().next().unwrap().hits, 1);
    // Port 23 is not blocked.
    let ok = pkt::tcp("10.244.1.10", 40000, "10.244.1.11", 23, SYN).with_macs(mac(10), mac(11));
    assert_eq!(
        run(&mut n.sw, n.a, &ok.build()).0,
        Disposition::Deliver(n.b)
    );
}

#[test]
fn layer_default_block_drops_unmatched_packets() {
    let mut n = net();
    n.sw.layer_mut(n.b, ACL)
        .unwrap()
        .set_default(Direction::In, DefaultAction::Block);
    let p = pkt::udp("10.244.1.10", 5000, "10.244.1.11", 53, b"q").with_macs(mac(10), mac(11));
    assert_eq!(
        run(&mut n.sw, n.a, &p.build()).0,
        Disposition::Drop(DropReason::BlockedByDefault)
    );
}

#[test]
fn mac_rewrite_is_byte_exact() {
    let mut n = net();
    let host_mac = mac(20);
    let rule = Rule::new(
        1,
        Conditions::any().direction(Direction::Out),
        Action::MacRewrite {
            src: Some(host_mac),
            dst: Some(mac(99)),
        },
    );
    n.sw.layer_mut(n.a, MAC)
        .unwrap()
        .set_rules(origin("l2bridge"), vec![rule]);
    let p = pkt::udp("10.244.1.10", 5000, "8.8.8.8", 53, b"query").with_macs(mac(10), mac(1));
    let (d, out) = run(&mut n.sw, n.a, &p.build());
    assert_eq!(d, Disposition::Uplink(n.uplink));
    assert_eq!(out, p.clone().with_macs(host_mac, mac(99)).build());
}

#[test]
fn dnat_rewrites_address_and_port_with_valid_checksums() {
    let mut n = net();
    dnat_to_b(&mut n, proto::TCP, 80, 8080);
    let mut p =
        pkt::tcp("10.244.1.10", 40000, "10.96.0.10", 80, ACK | 0x08).with_macs(mac(10), mac(1));
    if let L4::Tcp { payload, .. } = &mut p.l4 {
        *payload = b"GET / HTTP/1.1\r\n\r\n".to_vec();
    }
    let (d, out) = run(&mut n.sw, n.a, &p.build());
    assert_eq!(d, Disposition::Deliver(n.b));
    let mut want = p.clone().with_macs(mac(1), mac(11)); // routed through the gateway MAC
    want.dst = ip("10.244.1.11");
    if let L4::Tcp { dst_port, .. } = &mut want.l4 {
        *dst_port = 8080;
    }
    assert_eq!(out, want.build());
    verify_checksums(&out);
}

#[test]
fn snat_allocates_ports_per_protocol_and_maps_replies_back() {
    let mut n = net();
    let pool = n.sw.add_snat_pool(ip("192.168.1.5"), 40000, 40001);
    let c = Conditions::any()
        .direction(Direction::Out)
        .dst_net("0.0.0.0/0".parse().unwrap());
    n.sw.layer_mut(n.a, NAT).unwrap().set_rules(
        origin("outboundnat"),
        vec![Rule::new(1, c, Action::Snat { pool })],
    );
    let udp = pkt::udp("10.244.1.10", 5353, "8.8.8.8", 53, b"dns?").with_macs(mac(10), mac(1));
    let (d, out) = run(&mut n.sw, n.a, &udp.build());
    assert_eq!(d, Disposition::Uplink(n.uplink));
    let mut want = udp.clone();
    want.src = ip("192.168.1.5");
    want.l4 = L4::Udp {
        src_port: 40000,
        dst_port: 53,
        payload: b"dns?".to_vec(),
    };
    assert_eq!(out, want.build());
    verify_checksums(&out);

    // ICMP echo: the identifier is the port, from its own namespace.
    let ping = pkt::echo("10.244.1.10", "8.8.8.8", true, 0x1234).with_macs(mac(10), mac(1));
    let (_, out) = run(&mut n.sw, n.a, &ping.build());
    let mut want = ping.clone();
    want.src = ip("192.168.1.5");
    want.l4 = L4::Echo {
        request: true,
        ident: 40000,
        seq: 1,
        data: ECHO_DATA.to_vec(),
    };
    assert_eq!(out, want.build());
    // The reply from the uplink goes back to the pod with its own identifier.
    let pong = pkt::echo("8.8.8.8", "192.168.1.5", false, 40000).with_macs(mac(50), mac(20));
    let (d, out) = run(&mut n.sw, n.uplink, &pong.build());
    assert_eq!(d, Disposition::Deliver(n.a));
    let mut want = pkt::echo("8.8.8.8", "10.244.1.10", false, 0x1234).with_macs(mac(1), mac(10));
    want.ttl = 64;
    assert_eq!(out, want.build());
    verify_checksums(&out);

    // Two UDP ports in the pool: the third UDP connection is refused.
    let u2 = pkt::udp("10.244.1.10", 5354, "8.8.8.8", 53, b"x").with_macs(mac(10), mac(1));
    let u3 = pkt::udp("10.244.1.10", 5355, "8.8.8.8", 53, b"x").with_macs(mac(10), mac(1));
    assert_eq!(
        run(&mut n.sw, n.a, &u2.build()).0,
        Disposition::Uplink(n.uplink)
    );
    assert_eq!(
        run(&mut n.sw, n.a, &u3.build()).0,
        Disposition::Drop(DropReason::SnatExhausted)
    );
}

#[test]
fn load_balancer_over_ipv6_rewrites_to_the_backend() {
    let mut n = net();
    let backend = Backend {
        ip: ip("fd00::11"),
        port: Some(8443),
        mac: Some(mac(11)),
    };
    let lb = Arc::new(LoadBalancer::new(vec![backend]));
    let c = Conditions::any()
        .protocol(proto::TCP)
        .dst_ip(ip("fd96::10"))
        .dst_port(443);
    n.sw.layer_mut(n.a, SLB).unwrap().set_rules(
        origin("lb6"),
        vec![Rule::new(1, c, Action::LoadBalance(lb))],
    );
    let p = pkt::tcp("fd00::10", 33000, "fd96::10", 443, SYN).with_macs(mac(10), mac(1));
    let (d, out) = run(&mut n.sw, n.a, &p.build());
    assert_eq!(d, Disposition::Deliver(n.b));
    let mut want = p.clone().with_macs(mac(10), mac(11));
    want.dst = ip("fd00::11");
    if let L4::Tcp { dst_port, .. } = &mut want.l4 {
        *dst_port = 8443;
    }
    assert_eq!(out, want.build());
    verify_checksums(&out);
}

fn outer(vni: u32) -> Arc<Encap> {
    Arc::new(Encap {
        vni,
        src_mac: mac(20),
        dst_mac: mac(30),
        src_ip: ip("192.168.1.5"),
        dst_ip: ip("192.168.1.6"),
        udp_port: 4789,
    })
}

/// Builds the VXLAN frame expected around `inner` (outer IPv4 without DF, TTL 64, id 0).
fn vxlan_frame(e: &Encap, sport: u16, inner: &[u8]) -> Vec<u8> {
    use vfp::wire::{EthernetRepr, Ipv4Repr, VxlanRepr};
    let (s, d) = match (e.src_ip, e.dst_ip) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => (s, d),
        _ => unreachable!(),
    };
    let mut out = vec![0u8; 50];
    EthernetRepr {
        src: e.src_mac,
        dst: e.dst_mac,
        vlan_tci: None,
        ethertype: 0x0800,
    }
    .emit(&mut out)
    .unwrap();
    let mut ip4 = Ipv4Repr::simple(s, d, proto::UDP, 16 + inner.len());
    ip4.dont_frag = false;
    ip4.emit(&mut out[14..]).unwrap();
    out[34..36].copy_from_slice(&sport.to_be_bytes());
    out[36..38].copy_from_slice(&e.udp_port.to_be_bytes());
    out[38..40].copy_from_slice(&((16 + inner.len()) as u16).to_be_bytes());
    VxlanRepr { vni: e.vni }.emit(&mut out[42..]).unwrap();
    out.extend_from_slice(inner);
    out
}

#[test]
fn encap_wraps_the_frame_in_vxlan_byte_exact() {
    let mut n = net();
    let dr_mac: MacAddr = "00-15-5d-00-00-02".parse().unwrap();
    let e = outer(4096);
    let encap = Action::Encap {
        outer: e.clone(),
        inner_dst_mac: Some(dr_mac),
    };
    let rule = Rule::route("10.244.2.0/24".parse().unwrap(), encap);
    n.sw.layer_mut(n.a, ROUTE)
        .unwrap()
        .set_rules(Origin::new("RemoteSubnetRoute", "node2"), vec![rule]);
    let p = pkt::tcp("10.244.1.10", 40000, "10.244.2.7", 80, SYN).with_macs(mac(10), mac(1));
    let (d, out) = run(&mut n.sw, n.a, &p.build());
    assert_eq!(d, Disposition::Uplink(n.uplink));
    let sport = u16::from_be_bytes([out[34], out[35]]);
    assert!(sport >= 49152, "RFC 7348 entropy port in the dynamic range");
    let inner = p.clone().with_macs(mac(10), dr_mac).build();
    assert_eq!(out, vxlan_frame(&e, sport, &inner));
    verify_checksums(&out);
    // The same flow keeps its entropy port.
    let (_, again) = run(&mut n.sw, n.a, &p.build());
    assert_eq!(again, out);
}

#[test]
fn decap_delivers_the_inner_frame_and_replies_are_encapsulated_back() {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip("10.244.1.10")]).on_vni(4096))
        .unwrap();
    let uplink = sw.add_port(PortConfig::uplink("eth0")).unwrap();
    sw.add_provider_address(ip("192.168.1.5"));
    let decap = Rule::new(
        1,
        Conditions::any().direction(Direction::In).vni(4096),
        Action::Decap,
    );
    sw.layer_mut(a, ROUTE)
        .unwrap()
        .set_rules(Origin::new("Network", "overlay"), vec![decap]);
    let inner = pkt::tcp("10.244.2.7", 50000, "10.244.1.10", 80, SYN).with_macs(mac(40), mac(10));
    let from_remote = outer(4096).reversed();
    let wire = vxlan_frame(&from_remote, 51000, &inner.build());
    let (d, out) = run(&mut sw, uplink, &wire);
    assert_eq!(d, Disposition::Deliver(a));
    assert_eq!(out, inner.build());
    // Wrong VNI: nobody on it.
    let other = vxlan_frame(&outer(5000).reversed(), 51000, &inner.build());
    assert_eq!(
        run(&mut sw, uplink, &other).0,
        Disposition::Drop(DropReason::UnknownVni)
    );
    // The reply follows the connection back into the tunnel it came from.
    let reply =
        pkt::tcp("10.244.1.10", 80, "10.244.2.7", 50000, SYN | ACK).with_macs(mac(10), mac(40));
    let (d, out) = run(&mut sw, a, &reply.build());
    assert_eq!(d, Disposition::Uplink(uplink));
    let sport = u16::from_be_bytes([out[34], out[35]]);
    assert_eq!(out, vxlan_frame(&outer(4096), sport, &reply.build()));
    verify_checksums(&out);
}

#[test]
fn icmp_errors_are_transposed_with_the_connection_they_quote() {
    let mut n = net();
    let pool = n.sw.add_snat_pool(ip("192.168.1.5"), 40000, 40099);
    let c = Conditions::any().direction(Direction::Out);
    n.sw.layer_mut(n.a, NAT).unwrap().set_rules(
        origin("outboundnat"),
        vec![Rule::new(1, c, Action::Snat { pool })],
    );
    let udp =
        pkt::udp("10.244.1.10", 5353, "198.51.100.9", 9999, b"hello").with_macs(mac(10), mac(1));
    let (_, sent) = run(&mut n.sw, n.a, &udp.build());
    // A router answers "port unreachable" quoting the translated packet (IP header + 8 bytes).
    let quote = |p: &[u8]| p[14..14 + 28].to_vec();
    let err =
        |src: &str, dst: &str, q: Vec<u8>| pkt::icmp(src, dst, 3, 3, q).with_macs(mac(50), mac(20));
    let incoming = err("203.0.113.1", "192.168.1.5", quote(&sent));
    let (d, out) = run(&mut n.sw, n.uplink, &incoming.build());
    assert_eq!(d, Disposition::Deliver(n.a));
    let want = err("203.0.113.1", "10.244.1.10", quote(&udp.build())).build();
    // MACs follow the reverse of the connection.
    let mut want = want;
    want[0..6].copy_from_slice(&mac(10).0);
    want[6..12].copy_from_slice(&mac(1).0);
    assert_eq!(out, want);
    verify_checksums(&out);
}

#[test]
fn switch_answers_arp_and_neighbor_solicitation_for_owned_addresses() {
    use vfp::wire::{ArpOperation, ArpRepr, EthernetRepr, Icmpv6Repr, Ipv6Repr};
    let mut n = net();
    let mut req = vec![0u8; 42];
    EthernetRepr {
        src: mac(10),
        dst: MacAddr::BROADCAST,
        vlan_tci: None,
        ethertype: 0x0806,
    }
    .emit(&mut req)
    .unwrap();
    let arp = |op, smac, sip: &str, tmac, tip: &str| ArpRepr {
        operation: op,
        sender_mac: smac,
        sender_ip: sip.parse().unwrap(),
        target_mac: tmac,
        target_ip: tip.parse().unwrap(),
    };
    arp(
        ArpOperation::Request,
        mac(10),
        "10.244.1.10",
        MacAddr::ZERO,
        "10.244.1.1",
    )
    .emit(&mut req[14..])
    .unwrap();
    let (d, out) = run(&mut n.sw, n.a, &req);
    assert_eq!(d, Disposition::Reply(n.a));
    let mut want = vec![0u8; 42];
    EthernetRepr {
        src: mac(1),
        dst: mac(10),
        vlan_tci: None,
        ethertype: 0x0806,
    }
    .emit(&mut want)
    .unwrap();
    arp(
        ArpOperation::Reply,
        mac(1),
        "10.244.1.1",
        mac(10),
        "10.244.1.10",
    )
    .emit(&mut want[14..])
    .unwrap();
    assert_eq!(out, want);
    // Not owned: flooded.
    arp(
        ArpOperation::Request,
        mac(10),
        "10.244.1.10",
        MacAddr::ZERO,
        "10.244.1.99",
    )
    .emit(&mut req[14..])
    .unwrap();
    assert_eq!(
        run(&mut n.sw, n.a, &req).0,
        Disposition::Flood { from: n.a }
    );
    assert_eq!(n.sw.flood_targets(n.a).count(), 3);

    n.sw.own_address(ip("fd00::1"), mac(1));
    let (src, dst) = (v6addr(ip("fd00::10")), v6addr(ip("ff02::1:ff00:1")));
    let ns = Icmpv6Repr::NeighborSolicit {
        target: v6addr(ip("fd00::1")),
        source_mac: Some(mac(10)),
    };
    let mut f = vec![0u8; 14 + 40 + ns.len()];
    EthernetRepr {
        src: mac(10),
        dst: MacAddr::ipv6_multicast(dst),
        vlan_tci: None,
        ethertype: 0x86dd,
    }
    .emit(&mut f)
    .unwrap();
    let mut ip6 = Ipv6Repr::simple(src, dst, 58, ns.len());
    ip6.hop_limit = 255;
    ip6.emit(&mut f[14..]).unwrap();
    ns.emit(&mut f[54..], src, dst).unwrap();
    let (d, out) = run(&mut n.sw, n.a, &f);
    assert_eq!(d, Disposition::Reply(n.a));
    let na = Icmpv6Repr::NeighborAdvert {
        router: true,
        solicited: true,
        override_: true,
        target: v6addr(ip("fd00::1")),
        target_mac: Some(mac(1)),
    };
    let mut want = vec![0u8; 14 + 40 + na.len()];
    EthernetRepr {
        src: mac(1),
        dst: mac(10),
        vlan_tci: None,
        ethertype: 0x86dd,
    }
    .emit(&mut want)
    .unwrap();
    let mut ip6 = Ipv6Repr::simple(v6addr(ip("fd00::1")), src, 58, na.len());
    ip6.hop_limit = 255;
    ip6.emit(&mut want[14..]).unwrap();
    na.emit(&mut want[54..], v6addr(ip("fd00::1")), src)
        .unwrap();
    assert_eq!(out, want);
    verify_checksums(&out);
}

/// An IPv4 fragment of a UDP datagram: `offset` in bytes, `more` = MF flag.
fn fragment(dst: &str, ident: u16, offset: u16, more: bool, payload: &[u8]) -> Vec<u8> {
    use vfp::wire::{EthernetRepr, Ipv4Repr};
    let mut ip4 = Ipv4Repr::simple(
        "10.244.1.10".parse().unwrap(),
        dst.parse().unwrap(),
        proto::UDP,
        payload.len(),
    );
    (ip4.ident, ip4.frag_offset, ip4.more_frags, ip4.dont_frag) = (ident, offset, more, false);
    let mut out = vec![0u8; 34];
    EthernetRepr {
        src: mac(10),
        dst: mac(1),
        vlan_tci: None,
        ethertype: 0x0800,
    }
    .emit(&mut out)
    .unwrap();
    ip4.emit(&mut out[14..]).unwrap();
    out.extend_from_slice(payload);
    out
}

#[test]
fn later_fragments_follow_the_first_fragments_connection() {
    let mut n = net();
    dnat_to_b(&mut n, proto::UDP, 53, 5353);
    // A 24-byte UDP datagram (8 header + 16 data) split after 16 bytes.
    let udp = pkt::udp("10.244.1.10", 4000, "10.96.0.10", 53, &[0xab; 16]);
    let dgram = udp.ip_bytes()[20..].to_vec();
    let first = fragment("10.96.0.10", 77, 0, true, &dgram[..16]);
    let second = fragment("10.96.0.10", 77, 16, false, &dgram[16..]);
    let (d1, out1) = run(&mut n.sw, n.a, &first);
    let (d2, out2) = run(&mut n.sw, n.a, &second);
    assert_eq!(
        (d1, d2),
        (Disposition::Deliver(n.b), Disposition::Deliver(n.b))
    );
    // Reassembled, the two rewritten fragments are the datagram the backend should get.
    let want = pkt::udp("10.244.1.10", 4000, "10.244.1.11", 5353, &[0xab; 16]).ip_bytes();
    let mut joined = out1[34..].to_vec();
    joined.extend_from_slice(&out2[34..]);
    assert_eq!(joined, want[20..].to_vec());
    for f in [&out1, &out2] {
        assert_eq!(&f[30..34], &[10, 244, 1, 11], "destination rewritten");
        assert!(folds_to_ffff(sum16(&f[14..34])), "IPv4 header checksum");
    }
    // A later fragment of a datagram whose first fragment was never seen is not rewritten.
    let stray = fragment("10.96.0.10", 78, 16, false, &dgram[16..]);
    let (_, out) = run(&mut n.sw, n.a, &stray);
    assert_eq!(&out[30..34], &[10, 96, 0, 10]);
}

#[test]
fn vlan_tagged_frames_are_rewritten_behind_the_tag() {
    let mut n = net();
    dnat_to_b(&mut n, proto::TCP, 80, 8080);
    let tag = |frame: Vec<u8>| {
        let mut t = frame[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]); // VLAN 100
        t.extend_from_slice(&frame[12..]);
        t
    };
    let p = pkt::tcp("10.244.1.10", 40000, "10.96.0.10", 80, SYN).with_macs(mac(10), mac(1));
    let (d, out) = run(&mut n.sw, n.a, &tag(p.build()));
    assert_eq!(d, Disposition::Deliver(n.b));
    let mut want = p.clone().with_macs(mac(1), mac(11));
    want.dst = ip("10.244.1.11");
    if let L4::Tcp { dst_port, .. } = &mut want.l4 {
        *dst_port = 8080;
    }
    assert_eq!(out, tag(want.build()));
}
