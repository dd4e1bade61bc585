//! TAP devices (root): made in a namespace, persistent, adopted again by name, and carrying
//! frames with a virtio-net header both ways.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::{TestNs, recv_matching, udp_frame};
use host::HostError;
use host::netlink::Netlink;
use host::tap::Tap;

const TAP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

#[test]
fn a_persistent_tap_outlives_its_descriptor_and_is_adopted_by_name() {
    let t = TestNs::new("tap");
    t.ns.run(|| {
        let mut nl = Netlink::open()?;
        let tap = Tap::open("tp0")?;
        assert_eq!(tap.name(), "tp0");
        tap.set_persist(true)?;
        drop(tap);
        assert!(nl.link("tp0")?.is_some(), "persistent TAP gone with its fd");

        // A process another test forks at this moment holds a copy of every descriptor until it
        // execs (they are close-on-exec): wait for the TAP to be free rather than fail on that.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let again = loop {
            match Tap::open("tp0") {
                Err(e)
                    if e.to_string().contains("another file descriptor holds it")
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => break other?,
            }
        };
        let busy = Tap::open("tp0").expect_err("a second attach");
        assert!(
            busy.to_string()
                .contains("another file descriptor holds it"),
            "{busy}"
        );
        again.set_persist(false)?;
        drop(again);
        // The kernel unregisters the device as the last descriptor closes; under load the
        // link can still be listed for a few milliseconds.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while nl.link("tp0")?.is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(nl.link("tp0")?.is_none(), "non-persistent TAP stays");
        Ok(())
    })
    .expect("in the namespace");
}

#[test]
fn a_tap_lives_in_the_namespace_of_the_thread_that_opened_it() {
    let t = TestNs::new("tapns");
    let _tap = t.ns.run(|| Tap::open("tpns0")).expect("open inside");
    assert!(t.ip(&["-o", "link", "show"]).contains("tpns0"));
    let host = Netlink::open()
        .expect("netlink")
        .link("tpns0")
        .expect("look up");
    assert!(host.is_none(), "the TAP is not in the test's namespace");
}

#[test]
fn names_linux_refuses_are_refused_with_the_rule() {
    for bad in ["", "abcdefghijklmnop", "a/b", "a:b", "a b"] {
        let e = Tap::open(bad).expect_err(bad);
        assert!(matches!(e, HostError::Invalid(_)), "{bad:?}: {e}");
        assert!(e.to_string().contains("1 to 15 bytes"), "{e}");
    }
}

#[test]
fn frames_cross_the_tap_both_ways_with_a_virtio_net_header() {
    let t = TestNs::new("tapio");
    let (tap, sock, listener) =
        t.ns.run(|| {
            let tap = Tap::open("tio0")?;
            let mut nl = Netlink::open()?;
            let link = nl.link("tio0")?.expect("the TAP");
            nl.set_mac(link.index, TAP_MAC)?;
            nl.add_address(link.index, "10.9.0.1/24".parse().expect("net"))?;
            nl.set_up(link.index, true)?;
            nl.add_neighbor(link.index, "10.9.0.2".parse().expect("ip"), PEER_MAC)?;
            let io = |e: std::io::Error| HostError::io("udp socket", e);
            let sock = UdpSocket::bind("10.9.0.1:0").map_err(io)?;
            let listener = UdpSocket::bind("10.9.0.1:5300").map_err(io)?;
            Ok((tap, sock, listener))
        })
        .expect("set up the TAP");

    // The namespace's stack sends: the frame comes out of the TAP after a 10-byte header.
    sock.send_to(b"hello", "10.9.0.2:9").expect("send");
    let out = recv_matching(
        |b| tap.recv(b),
        |f| f.len() > 10 && f[10..16] == PEER_MAC && f.ends_with(b"hello"),
        Duration::from_secs(3),
    )
    .expect("the datagram out of the TAP");
    assert_eq!(&out[16..22], &TAP_MAC, "source MAC");
    assert_eq!(&out[22..24], &[0x08, 0x00], "IPv4");

    // A frame written into the TAP reaches the namespace's stack.
    let frame = udp_frame(
        TAP_MAC,
        PEER_MAC,
        [10, 9, 0, 2],
        [10, 9, 0, 1],
        5300,
        b"world",
    );
    let n = tap.send_vectored(&[0; 10], &frame).expect("write");
    assert_eq!(n, 10 + frame.len());
    listener
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    let (n, from) = listener
        .recv_from(&mut buf)
        .expect("the datagram in the namespace");
    assert_eq!(&buf[..n], b"world");
    assert_eq!(from.to_string(), "10.9.0.2:40000");

    // The same through send with the header in the buffer.
    let mut whole = vec![0u8; 10];
    whole.extend_from_slice(&frame);
    tap.send(&whole).expect("write");
    let (n, _) = listener.recv_from(&mut buf).expect("the second datagram");
    assert_eq!(&buf[..n], b"world");
}

#[test]
fn recv_would_block_when_nothing_waits() {
    let t = TestNs::new("tapwb");
    let tap = t.ns.run(|| Tap::open("twb0")).expect("open");
    let mut buf = [0u8; 2048];
    let e = tap.recv(&mut buf).expect_err("nothing to read");
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
}

#[test]
fn a_multiqueue_tap_spreads_the_namespaces_flows_over_its_queues() {
    let t = TestNs::new("tapmq");
    let (queues, socks) =
        t.ns.run(|| {
            let queues = Tap::open_queues("tmq0", 2)?;
            let mut nl = Netlink::open()?;
            let link = nl.link("tmq0")?.expect("the TAP");
            nl.add_address(link.index, "10.9.1.1/24".parse().expect("net"))?;
            nl.set_up(link.index, true)?;
            nl.add_neighbor(link.index, "10.9.1.2".parse().expect("ip"), PEER_MAC)?;
            let io = |e: std::io::Error| HostError::io("udp socket", e);
            let socks = (0..32)
                .map(|_| UdpSocket::bind("10.9.1.1:0").map_err(io))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((queues, socks))
        })
        .expect("set up the TAP");
    assert_eq!(queues.len(), 2);
    assert!(
        t.ip(&["-d", "link", "show", "tmq0"])
            .contains("multi_queue numqueues 2"),
        "{}",
        t.ip(&["-d", "link", "show", "tmq0"])
    );
    // 32 flows (source ports): the kernel picks a queue by each flow's hash, so both queues
    // carry some (all on one would be a 1 in 2^31 chance).
    for s in &socks {
        s.send_to(b"mq", "10.9.1.2:9").expect("send");
    }
    let mut per_queue = [0usize; 2];
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut buf = [0u8; 2048];
    while per_queue.iter().sum::<usize>() < socks.len() && std::time::Instant::now() < deadline {
        for (q, tap) in queues.iter().enumerate() {
            while let Ok(n) = tap.recv(&mut buf) {
                if n > 10 && buf[..n].ends_with(b"mq") {
                    per_queue[q] += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        per_queue.iter().sum::<usize>(),
        socks.len(),
        "{per_queue:?}"
    );
    assert!(per_queue.iter().all(|&n| n > 0), "{per_queue:?}");
}

#[test]
fn a_single_queue_tap_left_by_an_earlier_run_is_adopted_with_one_queue() {
    let t = TestNs::new("tapsq");
    let queues =
        t.ns.run(|| {
            let tap = Tap::open("tsq0")?;
            tap.set_persist(true)?;
            drop(tap);
            // As above: a process another test forks may hold the descriptor for a moment.
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            let queues = loop {
                match Tap::open_queues("tsq0", 2) {
                    Err(e)
                        if e.to_string().contains("another file descriptor holds it")
                            && std::time::Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    other => break other?,
                }
            };
            if let Some(q) = queues.first() {
                q.set_persist(false)?;
            }
            Ok(queues)
        })
        .expect("adopt the TAP");
    assert_eq!(queues.len(), 1);
}
