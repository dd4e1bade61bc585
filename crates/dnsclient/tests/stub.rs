//! The stub in a real network namespace with real glibc clients (`getent`, `dig`) in front and
//! a real DNS server (knotd) behind it. Run as root (CI is).

mod common;

use std::net::SocketAddr;
use std::process::{Command, Output};

use common::knot::{Knot, ROOT_ZONE, cluster_zone};
use dnsclient::stub::{Stub, StubConfig};
use dnsclient::upstream::Schedule;
use dnsclient::{AskedName, End, Outcome, Rules};
use hickory_proto::rr::RecordType;
use host::netns::Netns;

/// A namespace and its resolv.conf, removed on drop.
struct Pod {
    name: String,
    netns: Netns,
}

impl Pod {
    fn new(tag: &str) -> Pod {
        testkit::require_root("this test makes a network namespace");
        let name = format!("wnt-dns-{tag}-{}", std::process::id());
        let _ = Netns::named(&name).delete();
        let netns = Netns::create(&name).expect("make the pod's namespace");
        Pod { name, netns }
    }

    fn exec(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("ip netns exec")
    }

    fn getent(&self, name: &str) -> Option<String> {
        let out = self.exec(&["getent", "hosts", name]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = host::resolv::remove(&self.name);
        let _ = self.netns.delete();
    }
}

fn windows_rules() -> Rules {
    Rules::Windows {
        suffixes: [
            "default.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
        ]
        .iter()
        .map(|s| AskedName::parse(s).expect("suffix"))
        .collect(),
        honoured: 1,
        profile: "ws2022".into(),
    }
}

#[test]
fn glibc_through_the_stub_resolves_as_the_windows_dns_client() {
    let pod = Pod::new("stub");
    // The cluster DNS on another loopback address of the pod: the stub owns 127.0.0.53.
    let server: SocketAddr = "127.0.0.2:53".parse().expect("addr");
    let zone = cluster_zone("10.244.1.20");
    let knot = Knot::start(
        &pod.name,
        server,
        &[("cluster.local", &zone), (".", ROOT_ZONE)],
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let stub = Stub::start(
        StubConfig {
            netns: pod.netns.clone(),
            rules: windows_rules(),
            servers: vec![server],
            schedule: Schedule::windows(),
        },
        rt.handle(),
    )
    .expect("start the stub");
    host::resolv::write(&pod.name, &["127.0.0.53".parse().expect("ip")], &[], &[])
        .expect("resolv.conf");

    let web = pod
        .getent("web")
        .unwrap_or_else(|| panic!("web: {}", knot.log()));
    assert!(web.contains("10.244.1.20"), "{web}");
    assert_eq!(
        pod.getent("web.default"),
        None,
        "a dotted name gets no suffix"
    );
    assert_eq!(
        pod.getent("web-0.web"),
        None,
        "a dotted name gets no suffix"
    );
    let fqdn = pod.getent("web-0.web.default.svc.cluster.local");
    assert!(fqdn.is_some_and(|s| s.contains("10.244.1.20")));

    // The single label comes back as a CNAME to the name that answered, over TCP too.
    for transport in ["+notcp", "+tcp"] {
        let out = pod.exec(&[
            "dig",
            transport,
            "+time=2",
            "+tries=1",
            "@127.0.0.53",
            "web",
            "A",
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("status: NOERROR"), "{transport}: {text}");
        assert!(
            text.contains("CNAME\tweb.default.svc.cluster.local."),
            "{transport}: {text}"
        );
    }
    let out = pod.exec(&[
        "dig",
        "+time=2",
        "+tries=1",
        "@127.0.0.53",
        "web-0.web",
        "A",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("status: NXDOMAIN"), "{text}");
    assert!(
        text.contains("SOA"),
        "the negative answer keeps its SOA: {text}"
    );

    // The same walk, explained.
    let asked = AskedName::parse("web-0.web").expect("name");
    let walk = rt.block_on(stub.explain(&asked, RecordType::A));
    assert_eq!(walk.end, End::MultiLabelQueriedOnce, "{walk}");
    assert_eq!(walk.result, Outcome::NxDomain, "{walk}");
    assert_eq!(walk.steps[0].server.as_deref(), Some("127.0.0.2:53"));
    let asked = AskedName::parse("web").expect("name");
    let walk = rt.block_on(stub.explain(&asked, RecordType::AAAA));
    assert_eq!(walk.result, Outcome::NoData, "{walk}");
    drop(stub);
    drop(knot);
}

#[test]
fn a_server_in_the_pod_can_still_bind_the_udp_wildcard_beside_the_stub() {
    let pod = Pod::new("reuse");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let stub = Stub::start(
        StubConfig {
            netns: pod.netns.clone(),
            rules: windows_rules(),
            servers: vec!["127.0.0.2:53".parse().expect("addr")],
            schedule: Schedule::windows(),
        },
        rt.handle(),
    )
    .expect("start the stub");
    let bound = pod
        .netns
        .run(|| {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
                .map_err(|e| host::HostError::io("socket", e))?;
            s.set_reuse_address(true)
                .map_err(|e| host::HostError::io("SO_REUSEADDR", e))?;
            let any: SocketAddr = "0.0.0.0:53"
                .parse()
                .map_err(|_| host::HostError::Invalid("address".into()))?;
            Ok(s.bind(&any.into()).map_err(|e| e.to_string()))
        })
        .expect("run in the pod");
    assert_eq!(
        bound,
        Ok(()),
        "a DNS server with SO_REUSEADDR binds 0.0.0.0:53"
    );
    drop(stub);
}

/// Many queries at once from one pod, as the doctor asks every Service's name and a busy stub
/// forwards: each query's socket has a port of its own, so each gets its own answer. (Linux
/// gives a UDP socket with SO_REUSEADDR an ephemeral port another such socket already holds,
/// and the newer socket takes every datagram to it: the older query then goes unanswered
/// through all its resends.)
#[test]
fn queries_at_once_from_a_pod_each_get_their_own_answer() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use dnsclient::sockets::PodSockets;
    use dnsclient::upstream::{Targets, Upstream};
    use hickory_proto::rr::Name;

    const QUERIES: usize = 2000;
    let pod = Pod::new("many");
    let sockets = Arc::new(PodSockets::open(&pod.netns).expect("the pod's socket maker"));
    // A server in the pod that answers every query with itself marked as an answer, once it
    // holds all of them (or 1 s after the first): every query is in flight at once, each on
    // its socket, as when a pod asks many names together.
    let server = pod
        .netns
        .run(|| {
            std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| host::HostError::io("bind", e))
        })
        .expect("the server's socket");
    let addr = server.local_addr().expect("the server's address");
    server
        .set_read_timeout(Some(std::time::Duration::from_millis(50)))
        .expect("a read timeout");
    let stop = Arc::new(AtomicBool::new(false));
    let answering = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let mut held: Vec<(Vec<u8>, SocketAddr)> = Vec::new();
            let mut seen = std::collections::HashSet::new();
            let mut first = None;
            let mut answering = false;
            while !stop.load(Ordering::SeqCst) {
                if let Ok((n, from)) = server.recv_from(&mut buf)
                    && n > 2
                {
                    buf[2] |= 0x80;
                    seen.insert((from, [buf[0], buf[1]]));
                    first.get_or_insert_with(std::time::Instant::now);
                    held.push((buf[..n].to_vec(), from));
                }
                answering |= seen.len() >= QUERIES
                    || first.is_some_and(|t| t.elapsed() > std::time::Duration::from_secs(1));
                if answering {
                    for (answer, to) in held.drain(..) {
                        let _ = server.send_to(&answer, to);
                    }
                }
            }
        })
    };
    // Resent as the doctor asks (at 0, 1.5 s, given up at 3 s): a datagram the busy server's
    // socket drops is asked again; only an answer delivered to another query's socket is lost.
    let wait = std::time::Duration::from_millis(1500);
    let upstream = Upstream::new(
        vec![addr],
        Schedule(vec![(Targets::One(0), wait); 2]),
        Arc::clone(&sockets),
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let outcomes: Vec<Outcome> = rt.block_on(async {
        let name = Name::from_ascii("web.default.svc.cluster.local.").expect("name");
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..QUERIES {
            let (u, name) = (upstream.clone(), name.clone());
            set.spawn(async move { u.query(&name, RecordType::A).await.outcome });
        }
        set.join_all().await
    });
    stop.store(true, Ordering::SeqCst);
    answering.join().expect("the server thread");
    let unanswered = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Timeout))
        .count();
    assert_eq!(
        unanswered, 0,
        "{unanswered} of {QUERIES} queries went unanswered: their answers went to another \
         query's socket on the same port"
    );
}

#[test]
fn a_timeout_ends_the_walk_and_the_application_gets_servfail_in_bounded_time() {
    let pod = Pod::new("timeout");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Nothing listens there: every send goes unanswered. The Windows schedule, 20x faster.
    let schedule = Schedule::windows().scaled_down(20);
    let stub = Stub::start(
        StubConfig {
            netns: pod.netns.clone(),
            rules: Rules::Windows {
                suffixes: vec![
                    AskedName::parse("default.svc.cluster.local").expect("suffix"),
                    AskedName::parse("svc.cluster.local").expect("suffix"),
                ],
                // Two suffixes honoured: a timeout must still end the walk at the first.
                honoured: 2,
                profile: "ws2022".into(),
            },
            servers: vec!["127.0.0.3:53".parse().expect("addr")],
            schedule: schedule.clone(),
        },
        rt.handle(),
    )
    .expect("start the stub");
    let walk = rt.block_on(stub.explain(&AskedName::parse("web").expect("name"), RecordType::A));
    assert_eq!(walk.end, End::TimeoutEndsWalk, "{walk}");
    assert_eq!(walk.steps.len(), 1, "{walk}");
    assert_eq!(
        walk.steps[0].sent as usize,
        schedule.0.len(),
        "sent at every step"
    );
    let out = pod.exec(&["dig", "+time=3", "+tries=1", "@127.0.0.53", "web", "A"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("status: SERVFAIL"), "{text}");
}

#[test]
fn garbage_gets_formerr_and_the_stub_keeps_serving() {
    let pod = Pod::new("garbage");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let _stub = Stub::start(
        StubConfig {
            netns: pod.netns.clone(),
            rules: windows_rules(),
            servers: vec!["127.0.0.3:53".parse().expect("addr")],
            schedule: Schedule::windows().scaled_down(50),
        },
        rt.handle(),
    )
    .expect("start the stub");
    let replies = pod
        .netns
        .run(|| {
            let io = |e| host::HostError::io("udp", e);
            let s = std::net::UdpSocket::bind("127.0.0.1:0").map_err(io)?;
            s.set_read_timeout(Some(std::time::Duration::from_secs(3)))
                .map_err(io)?;
            let mut got = Vec::new();
            for garbage in [
                &[0xab, 0xcd, 0x01, 0x00, 0x00, 0x05][..],
                &[0xab, 0xce, 0x00],
            ] {
                s.send_to(garbage, "127.0.0.53:53").map_err(io)?;
                let mut buf = [0u8; 512];
                let n = s.recv(&mut buf).map_err(io)?;
                got.push(buf[..n].to_vec());
            }
            Ok(got)
        })
        .expect("send garbage from the pod");
    for r in &replies {
        let m = hickory_proto::op::Message::from_vec(r).expect("a DNS reply");
        assert_eq!(
            m.metadata.response_code,
            hickory_proto::op::ResponseCode::FormErr
        );
    }
    assert_eq!(
        replies[0][..2],
        [0xab, 0xcd],
        "the reply carries the query's ID"
    );
}
