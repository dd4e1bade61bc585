#![no_main]
//! Feeds arbitrary bytes to every wire parser and to a switch with rules of every kind: none of
//! it may panic or read out of bounds.

use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;
use std::sync::Arc;
use vfp::layer::{NAT, ROUTE, SLB};
use vfp::wire::*;
use vfp::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn switch() -> (Switch, [PortId; 2]) {
    let mut sw = Switch::new(SwitchConfig { max_flows: 256, ..SwitchConfig::default() });
    let a = sw.add_port(PortConfig::pod("a", MacAddr([2, 0, 0, 0, 0, 10]), vec![ip("10.0.0.10")])).unwrap();
    let up = sw.add_port(PortConfig::uplink("up")).unwrap();
    sw.own_address(ip("10.0.0.1"), MacAddr([2, 0, 0, 0, 0, 1]));
    sw.add_provider_address(ip("192.168.0.5"));
    let pool = sw.add_snat_pool(ip("192.168.0.5"), 1000, 1100);
    let lb = LoadBalancer::new(vec![Backend { ip: ip("10.0.0.10"), port: Some(80), mac: None }]);
    let e = Arc::new(Encap {
        vni: 4096,
        src_mac: MacAddr([2, 0, 0, 0, 0, 20]),
        dst_mac: MacAddr([2, 0, 0, 0, 0, 30]),
        src_ip: ip("192.168.0.5"),
        dst_ip: ip("192.168.0.6"),
        udp_port: 4789,
    });
    let o = || Origin::new("Fuzz", "x");
    for p in [a, up] {
        sw.layer_mut(p, SLB).unwrap().set_rules(o(), vec![Rule::new(1, Conditions::any().dst_ip(ip("10.96.0.1")), Action::LoadBalance(Arc::new(lb.clone())))]);
        sw.layer_mut(p, NAT).unwrap().set_rules(o(), vec![Rule::new(1, Conditions::any().direction(Direction::Out), Action::Snat { pool })]);
        sw.layer_mut(p, ROUTE).unwrap().set_rules(o(), vec![
            Rule::route("10.1.0.0/16".parse().unwrap(), Action::Encap { outer: e.clone(), inner_dst_mac: None }),
            Rule::new(0, Conditions::any().vni(4096), Action::Decap),
        ]);
    }
    (sw, [a, up])
}

fuzz_target!(|data: &[u8]| {
    let _ = EthernetFrame::new_checked(data).map(|f| EthernetRepr::parse(&f));
    let _ = ArpPacket::new_checked(data).map(|p| ArpRepr::parse(&p));
    let _ = Ipv4Packet::new_checked(data).map(|p| Ipv4Repr::parse(&p));
    let _ = Ipv6Packet::new_checked(data).map(|p| p.upper_layer());
    let a = ip("10.0.0.1");
    let _ = TcpPacket::new_checked(data).map(|p| TcpRepr::parse(&p, a, a));
    let _ = UdpPacket::new_checked(data).map(|p| UdpRepr::parse(&p, a, a));
    let _ = Icmpv4Packet::new_checked(data).map(|p| Icmpv4Repr::parse(&p));
    let _ = VxlanPacket::new_checked(data).map(|p| VxlanRepr::parse(&p));
    let (mut sw, ports) = switch();
    let port = ports[usize::from(data.first().copied().unwrap_or(0) & 1)];
    let _ = sw.trace(port, data, Timestamp(0));
    let mut f = Frame::new(data);
    let _ = sw.process(port, &mut f, Timestamp(0));
    let _ = sw.process(port, &mut Frame::new(data), Timestamp(1));
});
