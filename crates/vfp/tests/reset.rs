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
    send_bytes(sw, from, &p.build())
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

/// The node's provider address, and the remote node's, whose pod R talks to A over VXLAN.
const PA: &str = "192.168.1.5";
const REMOTE_PA: &str = "192.168.1.6";
const R: &str = "10.244.2.7";
const VNI: u32 = 4096;

/// A segment from the remote pod R, as the remote node's switch sends it: in VXLAN from its
/// provider address to this node's.
fn from_remote(inner: &Packet, sport: u16) -> Vec<u8> {
    let e = Encap {
        vni: VNI,
        src_mac: mac(30),
        dst_mac: mac(20),
        src_ip: ip(REMOTE_PA),
        dst_ip: ip(PA),
        udp_port: 4789,
    };
    let mut f = Frame::new(&inner.build());
    vfp::encap::push(&mut f, &e, sport).unwrap();
    f.bytes().to_vec()
}

/// A connection from a pod on another node (overlay): its segments arrive encapsulated at the
/// uplink. After the reset, the remote client's next segment is answered like a local one's,
/// the RST encapsulated back to the remote node's provider address, as every reply of the
/// connection was.
#[test]
fn a_reset_connection_from_another_node_is_answered_through_the_tunnel() {
    let mut sw = Switch::new(SwitchConfig::default());
    let a = sw
        .add_port(PortConfig::pod("a", mac(10), vec![ip(A)]).on_vni(VNI))
        .unwrap();
    let uplink = sw.add_port(PortConfig::uplink("eth0")).unwrap();
    sw.add_provider_address(ip(PA));
    let decap = Rule::new(
        1,
        Conditions::any().direction(Direction::In).vni(VNI),
        Action::Decap,
    );
    sw.layer_mut(a, vfp::layer::ROUTE)
        .unwrap()
        .set_rules(Origin::new("Network", "overlay"), vec![decap]);
    let r2a = |flags, seq, ack| {
        pkt::tcp(R, 50000, A, 80, flags)
            .with_macs(mac(40), mac(10))
            .with_seq_ack(seq, ack)
    };
    let a2r = |flags, seq, ack| {
        pkt::tcp(A, 80, R, 50000, flags)
            .with_macs(mac(10), mac(40))
            .with_seq_ack(seq, ack)
    };
    let syn = from_remote(&r2a(TcpFlags::SYN, 100, 0), 51000);
    assert_eq!(send_bytes(&mut sw, uplink, &syn).0, Disposition::Deliver(a));
    let (d, synack) = send(&mut sw, a, &a2r(TcpFlags::SYN | TcpFlags::ACK, 500, 101));
    assert_eq!(d, Disposition::Uplink(uplink));
    let ack = from_remote(&r2a(TcpFlags::ACK, 101, 501), 51000);
    assert_eq!(send_bytes(&mut sw, uplink, &ack).0, Disposition::Deliver(a));
    assert_eq!(sw.reset_connections(a), 1);

    let data = from_remote(&r2a(TcpFlags::ACK | TcpFlags::PSH, 101, 501), 51000);
    let (d, frame) = send_bytes(&mut sw, uplink, &data);
    assert_eq!(
        d,
        Disposition::Reply(uplink),
        "answered, not delivered to a"
    );
    verify_checksums(&frame);
    // The RST is wrapped exactly as the connection's SYN-ACK was (same outer headers, same
    // entropy port; both segments are bare headers, so the lengths agree too), around A's RST
    // to R with seq = R's ACK.
    let rst = a2r(TcpFlags::RST, 501, 0).build();
    let outer_len = synack.len() - rst.len();
    let mut want = synack[..outer_len].to_vec();
    want.extend_from_slice(&rst);
    assert_eq!(frame, want);
}

fn send_bytes(sw: &mut Switch, from: PortId, bytes: &[u8]) -> (Disposition, Vec<u8>) {
    let mut f = Frame::new(bytes);
    let d = sw.process(from, &mut f, Timestamp::from_secs(1));
    (d, f.bytes().to_vec())
}
