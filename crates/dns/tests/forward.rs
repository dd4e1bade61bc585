//! Names outside the zone go to the upstreams: a real Knot DNS on loopback answers `example.test`;
//! answers are relayed (not authoritative), cached (positive and negative), ExternalName targets
//! outside the zone are chased there, and an upstream that never answers costs a bounded time.

mod common;

use std::time::{Duration, Instant};

use common::{answers, ask};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

const ZONE: &str = "$ORIGIN example.test.\n$TTL 300\n\
@ IN SOA ns.example.test. admin.example.test. 1 3600 600 86400 60\n\
@ IN NS ns.example.test.\n\
ns IN A 127.0.0.1\n\
www IN A 192.0.2.10\n\
www IN AAAA 2001:db8::10\n";

const EXTERNAL: &str = "kind: Service\napiVersion: v1\nmetadata: {name: ext, namespace: default}\n\
spec: {type: ExternalName, externalName: www.example.test}\n";

#[tokio::test]
async fn names_outside_the_zone_are_forwarded_and_cached() {
    let knot = common::Knot::start("example.test", ZONE).await;
    let s = common::start(&[("ext.yaml", EXTERNAL)], 30, vec![knot.addr]).await;
    let m = ask(s.addr, "www.example.test", RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(
        !m.metadata.authoritative && m.metadata.recursion_available,
        "{m:?}"
    );
    assert_eq!(answers(&m), ["www.example.test. a 192.0.2.10"]);
    // The cache keeps the TTL bounded by `cache 30`.
    assert!(m.answers[0].ttl <= 300);
    let nx = ask(s.addr, "nope.example.test", RecordType::A).await;
    assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
    assert!(
        !nx.authorities.is_empty(),
        "the upstream's SOA is relayed: {nx:?}"
    );
    // An ExternalName outside the zone: our CNAME (authoritative) + the upstream's records.
    let m = ask(s.addr, "ext.default.svc.cluster.local", RecordType::AAAA).await;
    assert!(m.metadata.authoritative);
    assert_eq!(
        answers(&m),
        [
            "ext.default.svc.cluster.local. cname www.example.test.",
            "www.example.test. aaaa 2001:db8::10"
        ]
    );
    // With the upstream gone, cached answers (positive and negative) are still served.
    drop(knot);
    let m = ask(s.addr, "www.example.test", RecordType::A).await;
    assert_eq!(answers(&m), ["www.example.test. a 192.0.2.10"]);
    let m = ask(s.addr, "nope.example.test", RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    let metrics = s.running.metrics.render_text();
    assert!(
        metrics.contains("winnet_dns_cache_hits_total 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("winnet_dns_queries_total{qtype=\"A\",rcode=\"NXDOMAIN\"} 2"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_unreachable_upstream_is_servfail_in_bounded_time() {
    // A socket that takes queries and never answers: the worst upstream (no ICMP to fail fast).
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let s = common::start(&[], 30, vec![silent.local_addr().unwrap()]).await;
    let started = Instant::now();
    let out = common::dig(s.addr, &["+time=15", "example.org", "A"]).await;
    assert!(out.contains("status: SERVFAIL"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    // The cluster zone is answered meanwhile and after.
    let m = ask(s.addr, "default.svc.cluster.local", RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
}

#[tokio::test]
async fn a_refusing_upstream_falls_over_to_the_next() {
    let knot = common::Knot::start("example.test", ZONE).await;
    // Nothing listens on the first one: the ICMP error moves on at once.
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let s = common::start(&[], 30, vec![closed, knot.addr]).await;
    let m = ask(s.addr, "www.example.test", RecordType::AAAA).await;
    assert_eq!(answers(&m), ["www.example.test. aaaa 2001:db8::10"]);
}
