//! AF_PACKET sockets (root): bound to one end of a veth pair in a namespace of the test's own,
//! they read what the other end sends and send what the other end reads, never their own.

mod common;

use std::time::Duration;

use common::{TestNs, recv_matching};
use host::HostError;
use host::netlink::Netlink;
use host::packet_socket::PacketSocket;
use host::sysctl::set_sysctl;

/// An EtherType for local experiments (IEEE 802 "local experimental"), so no stack answers.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

fn frame(dst: [u8; 6], src: [u8; 6], text: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ETHERTYPE);
    f.extend_from_slice(text);
    f.resize(60, 0);
    f
}

fn is(text: &'static [u8]) -> impl Fn(&[u8]) -> bool {
    move |f| f.len() > 24 && f[22..24] == ETHERTYPE && f[24..].starts_with(text)
}

/// A namespace with the veth pair pa <-> pb, both up, without IPv6 chatter.
fn veth_pair(tag: &str) -> TestNs {
    let t = TestNs::new(tag);
    t.ns.run(|| {
        let mut nl = Netlink::open()?;
        nl.add_veth("pa", "pb", None)?;
        for name in ["pa", "pb"] {
            let _ = set_sysctl(&format!("net/ipv6/conf/{name}/disable_ipv6"), "1");
            let link = nl.link(name)?.expect("veth end");
            nl.set_up(link.index, true)?;
        }
        Ok(())
    })
    .expect("bring the pair up");
    t
}

#[test]
fn frames_cross_between_the_two_ends_and_a_socket_never_reads_its_own() {
    let t = veth_pair("pkt");
    let (a, b, pa_index) =
        t.ns.run(|| {
            let index = Netlink::open()?.link("pa")?.expect("pa").index;
            Ok((PacketSocket::bind("pa")?, PacketSocket::bind("pb")?, index))
        })
        .expect("bind both ends");
    assert_eq!(a.ifindex(), pa_index);
    assert_eq!(a.ifname(), "pa");

    // Written into pb, read on pa, to a MAC that is nobody's (promiscuous).
    let to_a = frame([0x02, 0, 0, 0, 0, 0xaa], [0x02, 0, 0, 0, 0, 0xbb], b"to pa");
    assert_eq!(b.send_vectored(&[0; 10], &to_a).expect("send on pb"), 70);
    let got = recv_matching(|buf| a.recv(buf), is(b"to pa"), Duration::from_secs(3))
        .expect("the frame on pa");
    assert_eq!(
        &got[..10],
        &[0; 10],
        "a plain frame has an empty virtio-net header"
    );
    assert_eq!(&got[10..], &to_a[..]);

    // Sent on pa, read on pb; pa does not read its own.
    let mut from_a = vec![0u8; 10];
    from_a.extend_from_slice(&frame([0xff; 6], [0x02, 0, 0, 0, 0, 0xaa], b"from pa"));
    a.send(&from_a).expect("send on pa");
    let got = recv_matching(|buf| b.recv(buf), is(b"from pa"), Duration::from_secs(3))
        .expect("the frame on pb");
    assert_eq!(&got[10..], &from_a[10..]);
    let echo = recv_matching(
        |buf| a.recv(buf),
        is(b"from pa"),
        Duration::from_millis(300),
    );
    assert!(
        echo.is_none(),
        "PACKET_IGNORE_OUTGOING: pa read its own frame"
    );
}

#[test]
fn the_interface_is_promiscuous_while_the_socket_is_open() {
    let t = veth_pair("promisc");
    let sock = t.ns.run(|| PacketSocket::bind("pa")).expect("bind");
    let shown = t.ip(&["-d", "link", "show", "pa"]);
    assert!(shown.contains("promiscuity 1"), "{shown}");
    drop(sock);
    let shown = t.ip(&["-d", "link", "show", "pa"]);
    assert!(shown.contains("promiscuity 0"), "{shown}");
}

#[test]
fn missing_and_malformed_interfaces_are_refused() {
    let t = TestNs::new("pkterr");
    let e =
        t.ns.run(|| PacketSocket::bind("nosuch0"))
            .expect_err("no such interface");
    assert!(matches!(e, HostError::NotFound(_)), "{e}");
    assert!(e.to_string().contains("nosuch0"), "{e}");
    let e = PacketSocket::bind("bad name").expect_err("bad name");
    assert!(matches!(e, HostError::Invalid(_)), "{e}");
}

#[test]
fn large_tcp_segments_arrive_whole_with_their_gso_header() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    let client_ns = TestNs::new("gsoc");
    let server_ns = TestNs::new("gsos");
    client_ns
        .ns
        .run(|| Netlink::open()?.add_veth("pa", "pb", Some(&server_ns.ns)))
        .expect("veth pair across the namespaces");
    let setup = |t: &TestNs, name: &'static str, addr: &'static str| {
        t.ns.run(move || {
            let mut nl = Netlink::open()?;
            let link = nl.link(name)?.expect("veth end");
            nl.add_address(link.index, addr.parse().expect("net"))?;
            nl.set_up(link.index, true)
        })
        .expect("configure a veth end");
    };
    setup(&client_ns, "pa", "10.5.0.1/24");
    setup(&server_ns, "pb", "10.5.0.2/24");
    let io = |e: std::io::Error| HostError::io("tcp", e);
    let (capture, listener) = server_ns
        .ns
        .run(|| {
            let capture = PacketSocket::bind("pb")?;
            let listener = TcpListener::bind("10.5.0.2:5001").map_err(io)?;
            Ok((capture, listener))
        })
        .expect("capture and listen");
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut sink = Vec::new();
        s.read_to_end(&mut sink).expect("read");
        sink.len()
    });
    let mut client = client_ns
        .ns
        .run(|| TcpStream::connect("10.5.0.2:5001").map_err(io))
        .expect("connect");
    client.write_all(&vec![7u8; 1 << 20]).expect("write");
    drop(client);
    assert_eq!(server.join().expect("server"), 1 << 20);

    // virtio_net_hdr: flags, gso_type (1 = TCPv4), hdr_len, gso_size, csum_start, csum_offset.
    let big = recv_matching(
        |buf| capture.recv(buf),
        |f| f.len() > 10 + 1514 && f[1] == 1,
        Duration::from_secs(1),
    )
    .expect("a TCP segment larger than the MTU, marked for segmentation");
    let gso_size = u16::from_le_bytes([big[4], big[5]]);
    assert!((500..=1460).contains(&gso_size), "gso_size {gso_size}");
}

#[test]
fn vlan_tags_the_kernel_takes_off_on_receive_are_put_back() {
    let t = veth_pair("vlan");
    let (a, b) =
        t.ns.run(|| Ok((PacketSocket::bind("pa")?, PacketSocket::bind("pb")?)))
            .expect("bind both ends");
    // 802.1Q, priority 5, VLAN 10; then 802.1ad (QinQ) outer tag 100 over 802.1Q 20.
    let cases: [(&[u8], &'static [u8]); 2] = [
        (&[0x81, 0x00, 0xa0, 0x0a], b"dot1q"),
        (&[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x00, 0x14], b"qinq"),
    ];
    for (tags, text) in cases {
        let mut tagged = Vec::new();
        tagged.extend_from_slice(&[0x02, 0, 0, 0, 0, 0xaa, 0x02, 0, 0, 0, 0, 0xbb]);
        tagged.extend_from_slice(tags);
        tagged.extend_from_slice(&ETHERTYPE);
        tagged.extend_from_slice(text);
        tagged.resize(64, 0);
        b.send_vectored(&[0; 10], &tagged)
            .expect("send a tagged frame");
        let at = 10 + 12 + tags.len();
        let got = recv_matching(
            |buf| a.recv(buf),
            |f| f.len() > at + 2 && f[at..at + 2] == ETHERTYPE && f[at + 2..].starts_with(text),
            Duration::from_secs(3),
        )
        .unwrap_or_else(|| panic!("the {} frame with its tags", String::from_utf8_lossy(text)));
        assert_eq!(&got[10..], &tagged[..]);
    }
}
