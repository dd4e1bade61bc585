//! SNAT ports held per remote end: two pods' connections share a node address's ports across
//! destinations, a closed connection's port is reclaimed by a new one to the same destination,
//! a live one's never is, and (a property) random connect/answer/close/expire sequences never
//! leave two cached connections with the same translated 5-tuple, while every reply to a
//! cached connection maps back to the pod and tuple that opened it.

mod common;

use common::*;
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;
use vfp::flow_table::FlowRecord;
use vfp::layer::{NAT, SLB};
use vfp::nat::Remote;
use vfp::tcp_state::{FlowSide, TcpPhase};
use vfp::wire::{TcpFlags, proto};
use vfp::*;

const NODE: &str = "192.168.1.5";
const VIP: &str = "10.96.0.10";
const SYN: u8 = TcpFlags::SYN;
const ACK: u8 = TcpFlags::ACK;
const FIN: u8 = TcpFlags::FIN;
const RST: u8 = TcpFlags::RST;

struct Node {
    sw: Switch,
    pods: [PortId; 2],
    uplink: PortId,
    pool: PoolId,
}

const POD_IPS: [&str; 2] = ["10.244.1.10", "10.244.1.11"];

/// Pods A and B, an uplink, the node's pool of `ports` ports from 40000; OutboundNAT on both
/// pods, and on A a ClusterIP 10.96.0.10:80 -> 203.0.113.1:80 (off the node) that SNATs to the
/// node's address from the same pool.
fn node(ports: u16) -> Node {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip(POD_IPS[0])]))
        .unwrap();
    let b = sw
        .add_port(PortConfig::pod("b", mac(11), vec![ip(POD_IPS[1])]))
        .unwrap();
    let uplink = sw.add_port(PortConfig::uplink("eth0")).unwrap();
    sw.own_address(ip("10.244.1.1"), mac(1));
    let pool = sw.add_snat_pool(ip(NODE), 40000, 40000 + ports - 1);
    let snat = Rule::new(
        1,
        Conditions::any()
            .direction(Direction::Out)
            .src_net("10.244.1.0/24".parse().unwrap()),
        Action::Snat { pool },
    );
    let mut lb = LoadBalancer::new(vec![Backend {
        ip: ip("203.0.113.1"),
        port: Some(80),
        mac: None,
    }]);
    lb.source_nat = Some(pool);
    let vip = Conditions::any()
        .protocol(proto::TCP)
        .dst_ip(ip(VIP))
        .dst_port(80);
    for p in [a, b] {
        sw.layer_mut(p, NAT)
            .unwrap()
            .set_rules(Origin::new("Test", "outboundnat"), vec![snat.clone()]);
    }
    sw.layer_mut(a, SLB).unwrap().set_rules(
        Origin::new("Test", "lb"),
        vec![Rule::new(1, vip, Action::LoadBalance(Arc::new(lb)))],
    );
    Node {
        sw,
        pods: [a, b],
        uplink,
        pool,
    }
}

fn tcp(src: &str, sport: u16, dst: &str, dport: u16, flags: u8) -> Packet {
    pkt::tcp(src, sport, dst, dport, flags)
}

fn send(sw: &mut Switch, from: PortId, p: &Packet, t: Timestamp) -> (Disposition, Option<Headers>) {
    let mut f = Frame::new(&p.build().clone());
    let d = sw.process(from, &mut f, t);
    let out = match d {
        Disposition::Deliver(_) | Disposition::Uplink(_) => Some(headers(f.bytes())),
        _ => None,
    };
    (d, out)
}

/// The addresses and ports of an Ethernet + IPv4 + TCP/UDP frame.
fn headers(b: &[u8]) -> Headers {
    let v4 = |o: usize| ip(&format!("{}.{}.{}.{}", b[o], b[o + 1], b[o + 2], b[o + 3]));
    let port = |o: usize| u16::from_be_bytes([b[o], b[o + 1]]);
    Headers {
        src_ip: v4(26),
        dst_ip: v4(30),
        proto: b[23],
        src_port: port(34),
        dst_port: port(36),
        ..Headers::empty()
    }
}

/// The SYN of pod `pod` from `sport` to `dst`:`dport`, from the pod's MAC to the gateway's.
fn open(n: &mut Node, pod: usize, sport: u16, dst: &str, dport: u16, t: u64) -> Option<Headers> {
    let p = tcp(POD_IPS[pod], sport, dst, dport, SYN).with_macs(mac(10 + pod as u8), mac(1));
    let (d, out) = send(&mut n.sw, n.pods[pod], &p, Timestamp::from_secs(t));
    assert!(
        matches!(d, Disposition::Uplink(_) | Disposition::Drop(_)),
        "{d:?}"
    );
    out
}

/// Closes a connection whose translated SYN was `out`: FIN both ways, then the last ACK.
fn close(n: &mut Node, pod: usize, sport: u16, dst: &str, dport: u16, out: &Headers, t: u64) {
    let t = Timestamp::from_secs(t);
    let from_pod =
        |f| tcp(POD_IPS[pod], sport, dst, dport, f).with_macs(mac(10 + pod as u8), mac(1));
    let from_remote = |f| {
        pkt::tcp(
            &out.dst_ip.to_string(),
            out.dst_port,
            &out.src_ip.to_string(),
            out.src_port,
            f,
        )
        .with_macs(mac(50), mac(60))
    };
    let (pod_port, uplink) = (n.pods[pod], n.uplink);
    send(&mut n.sw, uplink, &from_remote(SYN | ACK), t);
    send(&mut n.sw, pod_port, &from_pod(FIN | ACK), t);
    send(&mut n.sw, uplink, &from_remote(FIN | ACK), t);
    send(&mut n.sw, pod_port, &from_pod(ACK), t);
}

#[test]
fn one_port_serves_many_destinations_and_closed_connections_give_theirs_up() {
    let mut n = node(4);
    // Four connections to one destination take the four ports; a fifth is refused while
    // they live.
    let outs: Vec<Headers> = (0..4)
        .map(|i| open(&mut n, 0, 1000 + i, "203.0.113.9", 443, 0).unwrap())
        .collect();
    let ports: HashSet<u16> = outs.iter().map(|h| h.src_port).collect();
    assert_eq!(ports.len(), 4);
    assert_eq!(open(&mut n, 0, 1004, "203.0.113.9", 443, 0), None);
    // Other destinations (another port of the same address too, the ClusterIP's backend)
    // still have every port, from both pods.
    assert!(open(&mut n, 1, 1000, "203.0.113.9", 80, 0).is_some());
    assert!(open(&mut n, 1, 1001, "203.0.113.10", 443, 0).is_some());
    let via_vip = open(&mut n, 0, 2000, VIP, 80, 0).unwrap();
    assert_eq!(
        (via_vip.src_ip, via_vip.dst_ip, via_vip.dst_port),
        (ip(NODE), ip("203.0.113.1"), 80)
    );
    let pool = n.sw.snat_pool(n.pool).unwrap();
    let web = Remote {
        ip: ip("203.0.113.9"),
        port: 443,
    };
    assert_eq!(pool.in_use_to(0, web), 4);
    assert_eq!(pool.usage(0).in_use, 7);
    assert_eq!(pool.usage(0).remotes, 4);
    assert_eq!(pool.available(0), 0);
    assert_eq!(pool.counters(0).exhausted, 1);

    // Once one of the four has closed, a new connection to the destination takes its port
    // (before the closed entry's 5 s are up) and evicts it; the three live ones keep theirs.
    close(&mut n, 0, 1002, "203.0.113.9", 443, &outs[2], 1);
    let again = open(&mut n, 0, 1005, "203.0.113.9", 443, 2).unwrap();
    assert_eq!(again.src_port, outs[2].src_port);
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().counters(0).reclaimed, 1);
    assert_eq!(n.sw.flows().len(), 7);
    assert_eq!(open(&mut n, 0, 1006, "203.0.113.9", 443, 2), None);
    // Replies to the old tuple now reach the new connection.
    let reply =
        tcp("203.0.113.9", 443, NODE, again.src_port, SYN | ACK).with_macs(mac(50), mac(60));
    let (d, out) = send(&mut n.sw, n.uplink, &reply, Timestamp::from_secs(2));
    assert_eq!(d, Disposition::Deliver(n.pods[0]));
    assert_eq!(out.unwrap().dst_port, 1005);
}

#[test]
fn a_destination_is_served_at_any_rate_its_connections_close_at() {
    // 64 ports, 1,000 connections to one ClusterIP backend within one second, each closed
    // before the next: none is refused (before, the 65th waited for the first to expire).
    let mut n = node(64);
    for i in 0..1000u16 {
        let out = open(&mut n, 0, 10000 + i, VIP, 80, 0).expect("a port");
        close(&mut n, 0, 10000 + i, VIP, 80, &out, 0);
    }
    let pool = n.sw.snat_pool(n.pool).unwrap();
    assert_eq!(pool.counters(0).exhausted, 0);
    assert_eq!(pool.counters(0).reclaimed, 1000 - 64);
    assert_eq!(pool.usage(0).in_use, 64);
    assert_eq!(n.sw.flows().len(), 64);
    // Expiry gives every port back.
    n.sw.expire(Timestamp::from_secs(10));
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().usage(0).in_use, 0);
}

#[test]
fn a_tuple_goes_to_a_new_connection_only_if_the_remote_time_wait_would_take_it() {
    // One port. The remote end closes first, so it waits in TIME-WAIT on the tuple and takes
    // a new SYN on it only if the SYN is newer than the old connection's FIN (here by
    // sequence number: these segments carry no timestamps).
    let mut n = node(1);
    let (a, up, t) = (n.pods[0], n.uplink, Timestamp(0));
    let web = "203.0.113.9";
    let from_pod = |sport, flags, seq| {
        tcp(POD_IPS[0], sport, web, 80, flags)
            .with_macs(mac(10), mac(1))
            .with_seq_ack(seq, 0)
    };
    let out = send(&mut n.sw, a, &from_pod(1000, SYN, 100), t).1.unwrap();
    let from_web = |flags| reply_to(&out, flags);
    send(&mut n.sw, up, &from_web(SYN | ACK), t);
    send(&mut n.sw, up, &from_web(FIN | ACK), t);
    send(&mut n.sw, a, &from_pod(1000, FIN | ACK, 120), t);
    send(&mut n.sw, up, &from_web(ACK), t);
    // A SYN behind the old FIN (seq 120, so rcv_nxt 121) would be answered from TIME-WAIT.
    let (d, _) = send(&mut n.sw, a, &from_pod(1001, SYN, 121), t);
    assert_eq!(d, Disposition::Drop(DropReason::SnatExhausted));
    let (d, again) = send(&mut n.sw, a, &from_pod(1002, SYN, 5000), t);
    assert_eq!(d, Disposition::Uplink(up));
    assert_eq!(again.unwrap().src_port, out.src_port);
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().counters(0).reclaimed, 1);
}

/// An Ethernet + IPv4 + TCP frame whose segment carries a timestamp option, as Linux sends.
fn tcp_ts(src: (&str, u16), dst: (&str, u16), flags: u8, seq: u32, tsval: u32) -> Vec<u8> {
    use vfp::wire::{EthernetRepr, Ipv4Repr, TcpRepr};
    let mut t = TcpRepr::new(src.1, dst.1, flags);
    t.seq = seq;
    let ts = tsval.to_be_bytes();
    t.options = vec![1, 1, 8, 10, ts[0], ts[1], ts[2], ts[3], 0, 0, 0, 0];
    let v4 = |a: &str| a.parse::<std::net::Ipv4Addr>().unwrap();
    let (s, d) = (ip(src.0), ip(dst.0));
    let l3 = Ipv4Repr::simple(v4(src.0), v4(dst.0), proto::TCP, t.len());
    let mut f = vec![0u8; 14 + l3.header_len() + t.len()];
    EthernetRepr {
        src: mac(10),
        dst: mac(1),
        vlan_tci: None,
        ethertype: 0x0800,
    }
    .emit(&mut f)
    .unwrap();
    l3.emit(&mut f[14..]).unwrap();
    t.emit(&mut f[14 + l3.header_len()..], s, d).unwrap();
    f
}

#[test]
fn timestamps_decide_when_the_remote_end_closed_first() {
    // The exchange connrate makes through a ClusterIP: the server answers and closes first,
    // so it holds the tuple in TIME-WAIT; Linux gives every connection its own timestamp
    // offset, so a new SYN is newer than the old FIN's timestamp or not, by chance.
    let mut n = node(1);
    let (a, up, t) = (n.pods[0], n.uplink, Timestamp(0));
    let process = |sw: &mut Switch, from, f: Vec<u8>| {
        let mut f = Frame::new(&f);
        let d = sw.process(from, &mut f, t);
        (
            d,
            (d != Disposition::Drop(DropReason::SnatExhausted)).then(|| headers(f.bytes())),
        )
    };
    let pod = |sport| (POD_IPS[0], sport);
    let web = ("203.0.113.9", 80);
    let (_, out) = process(&mut n.sw, a, tcp_ts(pod(1000), web, SYN, 100, 7000));
    let node_end = (NODE, out.unwrap().src_port);
    process(&mut n.sw, up, tcp_ts(web, node_end, SYN | ACK, 900, 1));
    process(&mut n.sw, up, tcp_ts(web, node_end, FIN | ACK, 901, 2));
    process(&mut n.sw, a, tcp_ts(pod(1000), web, FIN | ACK, 101, 7000));
    process(&mut n.sw, up, tcp_ts(web, node_end, ACK, 902, 2));
    // Older than 7000 (modulo 2^32), whatever its sequence number: refused.
    let (d, _) = process(
        &mut n.sw,
        a,
        tcp_ts(pod(1001), web, SYN, 90_000, 7000u32.wrapping_sub(5)),
    );
    assert_eq!(d, Disposition::Drop(DropReason::SnatExhausted));
    let (d, _) = process(
        &mut n.sw,
        a,
        tcp_ts(pod(1002), web, SYN, 5, 7000 + (1 << 31) + 1),
    );
    assert_eq!(d, Disposition::Drop(DropReason::SnatExhausted));
    // Newer: the port is the closed connection's.
    let (d, again) = process(&mut n.sw, a, tcp_ts(pod(1003), web, SYN, 5, 7001));
    assert_eq!(d, Disposition::Uplink(up));
    assert_eq!(again.unwrap().src_port, node_end.1);
}

#[test]
fn the_same_tuple_again_keeps_its_translation() {
    // A remote end in TIME-WAIT answers a SYN it finds old with an ACK; the pod resets and
    // sends the SYN again on the same tuple. Translated as before, it now finds nothing
    // waiting; translated to another port, it could meet another TIME-WAIT.
    let mut n = node(4);
    let web = "203.0.113.9";
    let first = open(&mut n, 0, 1000, web, 80, 0).unwrap();
    open(&mut n, 0, 1001, web, 80, 0).unwrap();
    let reset = tcp(POD_IPS[0], 1000, web, 80, RST).with_macs(mac(10), mac(1));
    send(&mut n.sw, n.pods[0], &reset, Timestamp::from_secs(0));
    let again = open(&mut n, 0, 1000, web, 80, 0).unwrap();
    assert_eq!(again.src_port, first.src_port);
    assert_eq!(n.sw.flow_counters().created, 3);
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().usage(0).in_use, 2);
    // A datagram after its flow's idle timeout (before `expire` ran) likewise.
    let mut dns = |t| {
        let p = pkt::udp(POD_IPS[1], 5000, web, 53, b"q").with_macs(mac(11), mac(1));
        send(&mut n.sw, n.pods[1], &p, Timestamp::from_secs(t))
            .1
            .unwrap()
    };
    let q = dns(0);
    assert_eq!(dns(200).src_port, q.src_port);
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().usage(1).in_use, 1);
}

#[test]
fn the_port_is_unique_for_the_destination_the_packet_finally_goes_to() {
    // A's connections are SNATed on the way out; B's port then maps 80 to 8080. The port is
    // held for B:8080 (where the packets go), so a connection straight to B:8080 gets another.
    let mut n = node(4);
    let b = n.pods[1];
    let to_8080 = Action::Dnat {
        ip: ip(POD_IPS[1]),
        port: Some(8080),
    };
    let c = Conditions::any()
        .direction(Direction::In)
        .dst_ip(ip(POD_IPS[1]))
        .dst_port(80);
    n.sw.layer_mut(b, NAT).unwrap().set_rules(
        Origin::new("Test", "portmap"),
        vec![Rule::new(1, c, to_8080)],
    );
    let mut outs = Vec::new();
    for (sport, dport) in [(1000, 80), (1001, 8080)] {
        let p = tcp(POD_IPS[0], sport, POD_IPS[1], dport, SYN).with_macs(mac(10), mac(11));
        let (d, out) = send(&mut n.sw, n.pods[0], &p, Timestamp(0));
        assert_eq!(d, Disposition::Deliver(b));
        outs.push(out.unwrap());
    }
    assert_eq!((outs[0].dst_port, outs[1].dst_port), (8080, 8080));
    assert_eq!(outs[0].src_port, 40000);
    assert_eq!(outs[1].src_port, 40001);
    let to = Remote {
        ip: ip(POD_IPS[1]),
        port: 8080,
    };
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().in_use_to(0, to), 2);
    assert_eq!(n.sw.snat_pool(n.pool).unwrap().usage(0).in_use, 2);
}

/// One step of a random sequence.
#[derive(Debug, Clone)]
enum Op {
    /// Pod `pod` opens a TCP connection (with initial sequence number `seq`) or sends a UDP
    /// datagram, from `sport` to remote `to`.
    Open {
        pod: usize,
        sport: u16,
        to: usize,
        udp: bool,
        seq: u32,
    },
    /// The remote end of the `conn`th opened connection answers.
    Answer { conn: usize },
    /// The `conn`th opened connection closes: the pod's FIN first, the remote end's first (it
    /// then waits in TIME-WAIT), or a reset.
    Close { conn: usize, how: Closing },
    /// Time passes and idle connections expire.
    Tick { secs: u64 },
}

/// How a connection closes.
#[derive(Debug, Clone, Copy)]
enum Closing {
    PodFirst,
    RemoteFirst,
    Reset,
}

/// Remote ends: two addresses x two ports off the node, and the ClusterIP (backend
/// 203.0.113.1:80, which is also the first remote).
const REMOTES: [(&str, u16); 5] = [
    ("203.0.113.1", 80),
    ("203.0.113.1", 443),
    ("203.0.113.2", 80),
    ("203.0.113.2", 443),
    (VIP, 80),
];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..2, 1000u16..1006, 0usize..5, any::<bool>(), any::<u32>())
            .prop_map(|(pod, sport, to, udp, seq)| Op::Open { pod, sport, to, udp, seq }),
        2 => (0usize..64).prop_map(|conn| Op::Answer { conn }),
        3 => (0usize..64, prop_oneof![Just(Closing::PodFirst), Just(Closing::RemoteFirst), Just(Closing::Reset)])
            .prop_map(|(conn, how)| Op::Close { conn, how }),
        1 => (0u64..40).prop_map(|secs| Op::Tick { secs }),
    ]
}

/// A connection as the pod opened it and as it left the switch.
struct Opened {
    pod: usize,
    orig: Packet,
    out: Headers,
}

fn packet(h: &Headers, flags: u8) -> Packet {
    let (src, dst) = (h.src_ip.to_string(), h.dst_ip.to_string());
    match h.proto {
        proto::UDP => pkt::udp(&src, h.src_port, &dst, h.dst_port, b"r"),
        _ => pkt::tcp(&src, h.src_port, &dst, h.dst_port, flags),
    }
}

/// The reply a remote end sends to the translated tuple.
fn reply_to(out: &Headers, flags: u8) -> Packet {
    packet(&out.reversed(), flags).with_macs(mac(50), mac(60))
}

/// The cached connections translated to the node.
fn translated(sw: &Switch) -> Vec<FlowRecord> {
    sw.flows()
        .slots()
        .filter_map(|s| sw.flows().get(s).cloned())
        .filter(|r| r.fin().src_ip == ip(NODE))
        .collect()
}

/// Every cached connection translated to the node: no two share a translated 5-tuple, the
/// pool's counts agree with them, and a reply to each maps back to its pod and tuple.
fn check(n: &mut Node, now: Timestamp) -> Result<(), TestCaseError> {
    let records = translated(&n.sw);
    let mut tuples = HashSet::new();
    for r in &records {
        let f = &r.fin();
        prop_assert!(
            tuples.insert((f.src_port, f.proto, f.dst_ip, f.dst_port)),
            "two cached connections translated to {f}"
        );
        prop_assert_eq!(r.snat.iter().flatten().count(), 1);
    }
    let pool = n.sw.snat_pool(n.pool).unwrap();
    for (class, p) in [(0, proto::TCP), (1, proto::UDP)] {
        let held = records.iter().filter(|r| r.fin().proto == p).count();
        prop_assert_eq!(pool.usage(class).in_use, held);
        for r in records.iter().filter(|r| r.fin().proto == p) {
            let to = Remote::of(&r.fin());
            let n_to = records
                .iter()
                .filter(|o| Remote::of(&o.fin()) == to && o.fin().proto == p);
            prop_assert_eq!(pool.in_use_to(class, to), n_to.count());
        }
    }
    for r in &records {
        let t = n.sw.trace(n.uplink, &reply_to(&r.fin(), ACK).build(), now);
        prop_assert_eq!(
            t.disposition,
            Disposition::Deliver(r.port_a),
            "reply to {}",
            r.fin()
        );
        prop_assert_eq!(t.cached.as_ref().map(|c| c.side), Some(FlowSide::Reverse));
        let back = t.output.unwrap().inner;
        prop_assert_eq!(
            (back.src_ip, back.src_port, back.dst_ip, back.dst_port),
            (
                r.orig().dst_ip,
                r.orig().dst_port,
                r.orig().src_ip,
                r.orig().src_port
            )
        );
    }
    Ok(())
}

/// Sends one packet, and checks that no connection that was not closed lost its entry: only a
/// closed connection gives up its entry (and port) to another one.
fn send_checked(
    n: &mut Node,
    from: PortId,
    p: &Packet,
    now: Timestamp,
) -> Result<(Disposition, Option<Headers>), TestCaseError> {
    let live: Vec<FlowRecord> = translated(&n.sw)
        .into_iter()
        .filter(|r| r.tcp.phase() != TcpPhase::Closed)
        .collect();
    let sent = send(&mut n.sw, from, p, now);
    let after = translated(&n.sw);
    for r in &live {
        let kept = after
            .iter()
            .any(|a| a.orig() == r.orig() && a.fin() == r.fin());
        prop_assert!(kept, "a live connection lost its entry: {}", r.fin());
    }
    check(n, now)?;
    Ok(sent)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn translated_tuples_stay_unique_and_replies_map_back(ops in proptest::collection::vec(op(), 1..120)) {
        let mut n = node(3);
        let mut opened: Vec<Opened> = Vec::new();
        let mut now = Timestamp(0);
        for op in ops {
            match op {
                Op::Open { pod, sport, to, udp, seq } => {
                    let (dst, dport) = REMOTES[to];
                    let orig = if udp {
                        pkt::udp(POD_IPS[pod], sport, dst, dport, b"q")
                    } else {
                        tcp(POD_IPS[pod], sport, dst, dport, SYN).with_seq_ack(seq, 0)
                    }
                    .with_macs(mac(10 + pod as u8), mac(1));
                    let from = n.pods[pod];
                    let (d, out) = send_checked(&mut n, from, &orig, now)?;
                    match out {
                        Some(out) => opened.push(Opened { pod, orig, out }),
                        None => prop_assert_eq!(d, Disposition::Drop(DropReason::SnatExhausted)),
                    }
                }
                Op::Answer { conn } => {
                    if let Some(c) = opened.get(conn) {
                        let (up, answer) = (n.uplink, reply_to(&c.out, SYN | ACK));
                        send_checked(&mut n, up, &answer, now)?;
                    }
                }
                Op::Close { conn, how } => {
                    let Some(c) = opened.get(conn).filter(|c| c.orig.protocol() == proto::TCP) else {
                        continue;
                    };
                    let o = &c.orig;
                    let from_pod = |f| {
                        tcp(&o.src.to_string(), o.src_port(), &o.dst.to_string(), o.dst_port(), f)
                            .with_macs(mac(10 + c.pod as u8), mac(1))
                    };
                    let (pod, up) = (n.pods[c.pod], n.uplink);
                    let packets = match how {
                        Closing::Reset => vec![(up, reply_to(&c.out, RST))],
                        Closing::PodFirst => vec![
                            (pod, from_pod(FIN | ACK)),
                            (up, reply_to(&c.out, FIN | ACK)),
                            (pod, from_pod(ACK)),
                        ],
                        Closing::RemoteFirst => vec![
                            (up, reply_to(&c.out, FIN | ACK)),
                            (pod, from_pod(FIN | ACK)),
                            (up, reply_to(&c.out, ACK)),
                        ],
                    };
                    for (from, p) in packets {
                        send_checked(&mut n, from, &p, now)?;
                    }
                }
                Op::Tick { secs } => {
                    now = Timestamp(now.0 + secs * 1_000_000_000);
                    n.sw.expire(now);
                    check(&mut n, now)?;
                }
            }
        }
        n.sw.expire(Timestamp(now.0 + 1_000 * 1_000_000_000));
        prop_assert_eq!(n.sw.snat_pool(n.pool).unwrap().usage(0).in_use, 0);
        prop_assert_eq!(n.sw.snat_pool(n.pool).unwrap().usage(1).in_use, 0);
    }
}
