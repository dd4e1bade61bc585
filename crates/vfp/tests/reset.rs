//! Connections the switch resets (HNS's reset of an endpoint's TCP connections when its ACLs
//! are applied again): the flows of the port go, each end's next segment is answered with a
//! RST it accepts (sequence number = the segment's ACK), once; other ports' connections, UDP,
//! and a new connection on the same port are untouched.

mod common;

use common::*;
use vfp::wire::TcpFlags;
use vfp::*;

const A: &str = "10.244.1.10";
const B: &str = "10.244.1.11";

fn switch() -> (Switch, PortId, PortId) {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip(A)]))
        .unwrap();
    let b = sw
        .add_port(PortConfig::pod("b", mac(11), vec![ip(B)]))
        .unwrap();
    (sw, a, b)
}

fn send(sw: &mut Switch, from: PortId, p: &Packet) -> (Disposition, Vec<u8>) {
    let mut f = Frame::new(&p.build());
    let d = sw.process(from, &mut f, Timestamp::from_secs(1));
    (d, f.bytes().to_vec())
}

fn a2b(flags: u8, seq: u32, ack: u32) -> Packet {
    pkt::tcp(A, 40000, B, 80, flags)
        .with_macs(mac(10), mac(11))
        .with_seq_ack(seq, ack)
}

fn b2a(flags: u8, seq: u32, ack: u32) -> Packet {
    pkt::tcp(B, 80, A, 40000, flags)
        .with_macs(mac(11), mac(10))
        .with_seq_ack(seq, ack)
}

#[test]
fn a_reset_port_answers_each_ends_next_segment_with_a_rst_it_accepts() {
    let (mut sw, a, b) = switch();
    assert_eq!(
        send(&mut sw, a, &a2b(TcpFlags::SYN, 100, 0)).0,
        Disposition::Deliver(b)
    );
    assert_eq!(
        send(&mut sw, b, &b2a(TcpFlags::SYN | TcpFlags::ACK, 500, 101)).0,
        Disposition::Deliver(a)
    );
    assert_eq!(
        send(&mut sw, a, &a2b(TcpFlags::ACK, 101, 501)).0,
        Disposition::Deliver(b)
    );
    assert_eq!(sw.reset_connections(b), 1);
    assert_eq!(sw.flows().len(), 0);

    // A's next segment: a RST back to A, from B's address and port, seq = A's ACK.
    let (d, frame) = send(&mut sw, a, &a2b(TcpFlags::ACK | TcpFlags::PSH, 101, 501));
    assert_eq!(d, Disposition::Reply(a));
    verify_checksums(&frame);
    let want = pkt::tcp(B, 80, A, 40000, TcpFlags::RST)
        .with_macs(mac(11), mac(10))
        .with_seq_ack(501, 0);
    assert_eq!(frame, want.build());
    // B's next segment: its own RST; each end is told once, then the tuple is an ordinary
    // packet again (here a new connection, delivered).
    let (d, _) = send(&mut sw, b, &b2a(TcpFlags::ACK, 501, 101));
    assert_eq!(d, Disposition::Reply(b));
    assert_eq!(
        send(&mut sw, a, &a2b(TcpFlags::SYN, 900, 0)).0,
        Disposition::Deliver(b)
    );
}

#[test]
fn only_the_ports_tcp_connections_are_reset() {
    let (mut sw, a, b) = switch();
    let c = sw
        .add_port(PortConfig::pod("c", mac(12), vec![ip("10.244.1.12")]))
        .unwrap();
    send(&mut sw, a, &a2b(TcpFlags::SYN, 100, 0));
    let a2c = pkt::tcp(A, 40001, "10.244.1.12", 80, TcpFlags::SYN).with_macs(mac(10), mac(12));
    assert_eq!(send(&mut sw, a, &a2c).0, Disposition::Deliver(c));
    let udp = pkt::udp(A, 5000, B, 53, b"q").with_macs(mac(10), mac(11));
    assert_eq!(send(&mut sw, a, &udp).0, Disposition::Deliver(b));
    assert_eq!(sw.reset_connections(b), 1, "the TCP one to b only");
    assert_eq!(sw.flows().len(), 2, "a->c and the UDP flow stay");
    let a2c_data = pkt::tcp(A, 40001, "10.244.1.12", 80, TcpFlags::ACK)
        .with_macs(mac(10), mac(12))
        .with_seq_ack(101, 1);
    assert_eq!(send(&mut sw, a, &a2c_data).0, Disposition::Deliver(c));
}

/// Without a reset, a rule change re-evaluates a live connection: the next segment the new
/// rules block is dropped.
#[test]
fn a_rule_change_cuts_a_live_connection_it_now_blocks() {
    let (mut sw, a, b) = switch();
    send(&mut sw, a, &a2b(TcpFlags::SYN, 100, 0));
    send(&mut sw, b, &b2a(TcpFlags::SYN | TcpFlags::ACK, 500, 101));
    assert_eq!(
        send(&mut sw, a, &a2b(TcpFlags::ACK, 101, 501)).0,
        Disposition::Deliver(b)
    );
    let block = Rule::new(
        50,
        Conditions::any().direction(Direction::In).src_ip(ip(A)),
        Action::Block,
    );
    sw.layer_mut(b, vfp::layer::ACL)
        .unwrap()
        .set_rules(Origin::new("Endpoint/ACL", "b/0"), vec![block]);
    assert_eq!(
        send(&mut sw, a, &a2b(TcpFlags::ACK | TcpFlags::PSH, 101, 501)).0,
        Disposition::Drop(DropReason::BlockedByRule)
    );
}
