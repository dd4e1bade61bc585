//! `Switch::trace`: the explanation names every layer's rule and origin, shows the headers
//! before and after, and changes nothing (no flow, no counter, no SNAT port).

mod common;

use common::*;
use std::sync::Arc;
use vfp::layer::{ACL, NAT, SLB};
use vfp::trace::LayerDecision;
use vfp::wire::proto;
use vfp::*;

fn setup() -> (Switch, PortId, PortId, PoolId) {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("client", mac(10), vec![ip("10.244.1.10")]))
        .unwrap();
    let b = sw
        .add_port(PortConfig::pod("web-1", mac(11), vec![ip("10.244.1.11")]))
        .unwrap();
    sw.add_port(PortConfig::uplink("eth0")).unwrap();
    sw.own_address(ip("10.244.1.1"), mac(1));
    let pool = sw.add_snat_pool(ip("192.168.1.5"), 40000, 40010);
    let lb = LoadBalancer::new(vec![Backend {
        ip: ip("10.244.1.11"),
        port: Some(8080),
        mac: None,
    }]);
    let c = Conditions::any()
        .protocol(proto::TCP)
        .dst_ip(ip("10.96.0.10"))
        .dst_port(80);
    let origin = Origin::new("LoadBalancer", "6f1c").with_source("Service default/web");
    sw.layer_mut(a, SLB).unwrap().set_rules(
        origin,
        vec![Rule::new(5, c, Action::LoadBalance(Arc::new(lb)))],
    );
    let out = Conditions::any()
        .direction(Direction::Out)
        .dst_net("0.0.0.0/0".parse().unwrap());
    let cluster = Conditions::any()
        .direction(Direction::Out)
        .dst_net("10.244.0.0/16".parse().unwrap());
    let not_cluster = Rule::new(1, cluster, Action::Allow);
    let nat = Rule::new(2, out, Action::Snat { pool });
    sw.layer_mut(a, NAT)
        .unwrap()
        .set_rules(Origin::new("OutBoundNAT", "ep-a"), vec![not_cluster, nat]);
    (sw, a, b, pool)
}

#[test]
fn trace_names_each_rule_and_its_origin_and_the_disposition() {
    let (mut sw, a, b, _) = setup();
    let p = pkt::tcp("10.244.1.10", 40000, "10.96.0.10", 80, SYN).with_macs(mac(10), mac(1));
    let t = sw.trace(a, &p.build(), Timestamp(0));
    assert_eq!(t.disposition, Disposition::Deliver(b));
    let slb = t.steps.iter().find(|s| s.layer == SLB).expect("SLB step");
    match &slb.decision {
        LayerDecision::Rule {
            origin, priority, ..
        } => {
            assert_eq!(origin.owner, Owner::new("LoadBalancer", "6f1c"));
            assert_eq!(origin.source.as_deref(), Some("Service default/web"));
            assert_eq!(*priority, 5);
        }
        other => panic!("expected a rule, got {other:?}"),
    }
    assert_eq!(slb.before.inner.dst_ip, ip("10.96.0.10"));
    assert_eq!(slb.after.inner.dst_ip, ip("10.244.1.11"));
    assert_eq!(slb.after.inner.dst_port, 8080);
    // The NAT layer let cluster traffic through without SNAT (the exception rule).
    let nat = t.steps.iter().find(|s| s.layer == NAT).unwrap();
    assert!(matches!(
        &nat.decision,
        LayerDecision::Rule { index: 0, .. }
    ));
    assert_eq!(nat.before, nat.after);
    assert_eq!(t.forward.unwrap().to, b);
    // The frame the trace shows is the frame processing produces.
    let mut f = Frame::new(&p.build());
    sw.process(a, &mut f, Timestamp(0));
    assert_eq!(t.frame.as_deref(), Some(f.bytes()));
    let text = t.to_string();
    assert!(
        text.contains("LoadBalancer 6f1c (Service default/web)"),
        "{text}"
    );
    assert!(text.contains("delivered to port"), "{text}");
}

#[test]
fn trace_has_no_side_effects() {
    let (mut sw, a, _, pool) = setup();
    let p = pkt::udp("10.244.1.10", 5353, "8.8.8.8", 53, b"q").with_macs(mac(10), mac(1));
    let before_counters = sw.port(a).unwrap().counters;
    let t = sw.trace(a, &p.build(), Timestamp(0));
    assert!(matches!(t.disposition, Disposition::Uplink(_)));
    // It shows the port SNAT would take, but takes none.
    assert_eq!(t.output.as_ref().unwrap().inner.src_port, 40000);
    assert!(sw.flows().is_empty());
    assert_eq!(sw.snat_pool(pool).unwrap().available(1), 11);
    assert_eq!(sw.port(a).unwrap().counters, before_counters);
    let nat = sw.port(a).unwrap().layer(NAT).unwrap();
    assert_eq!(nat.counters.evaluated, 0);
    assert!(nat.groups()[0].rules().all(|r| r.hits == 0));
}

#[test]
fn trace_of_a_reply_shows_the_cached_connection_and_drops_show_the_rule() {
    let (mut sw, a, b, _) = setup();
    let syn = pkt::tcp("10.244.1.10", 40000, "10.96.0.10", 80, SYN).with_macs(mac(10), mac(1));
    sw.process(a, &mut Frame::new(&syn.build()), Timestamp(0));
    let reply =
        pkt::tcp("10.244.1.11", 8080, "10.244.1.10", 40000, SYN | ACK).with_macs(mac(11), mac(1));
    let t = sw.trace(b, &reply.build(), Timestamp(0));
    let cached = t.cached.expect("reply is on the fast path");
    assert_eq!(cached.side, vfp::tcp_state::FlowSide::Reverse);
    assert_eq!(t.disposition, Disposition::Deliver(a));
    assert_eq!(t.output.unwrap().inner.src_ip, ip("10.96.0.10"));

    let block = Rule::new(
        1,
        Conditions::any().protocol(proto::UDP).dst_port(53),
        Action::Block,
    );
    sw.layer_mut(a, ACL)
        .unwrap()
        .set_rules(Origin::new("ACL", "no-dns"), vec![block]);
    let dns = pkt::udp("10.244.1.10", 5353, "8.8.8.8", 53, b"q").with_macs(mac(10), mac(1));
    let t = sw.trace(a, &dns.build(), Timestamp(0));
    assert_eq!(t.disposition, Disposition::Drop(DropReason::BlockedByRule));
    let last = t.steps.last().unwrap();
    assert_eq!(last.layer, ACL);
    assert!(
        matches!(&last.decision, LayerDecision::Rule { origin, .. } if origin.owner.id == "no-dns")
    );
    assert!(t.frame.is_none());
    assert_eq!(
        sw.trace(99, &dns.build(), Timestamp(0)).disposition,
        Disposition::Drop(DropReason::UnknownPort)
    );
    assert_eq!(
        sw.trace(a, &[1, 2, 3], Timestamp(0)).disposition,
        Disposition::Drop(DropReason::Malformed)
    );
}
