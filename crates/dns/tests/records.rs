//! Every row of reference §B.1 and every NXDOMAIN/NODATA case of §B.2, asked over the wire of
//! the in-process server (hickory-proto client) and checked for rcode, AA, TTL and the SOA.

mod common;

use common::{additionals, answers, ask};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};

const TTL: u32 = 17;
const FIXTURES: &str = include_str!("fixtures.yaml");

async fn server() -> common::Server {
    common::start(&[("cluster.yaml", FIXTURES)], TTL, vec![]).await
}

/// An authoritative positive answer: NOERROR, AA, every record with the configured TTL.
fn positive(m: &Message) -> Vec<String> {
    assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{m:?}");
    assert!(m.metadata.authoritative, "AA must be set: {m:?}");
    assert!(m.answers.iter().all(|r| r.ttl == TTL), "{m:?}");
    answers(m)
}

/// A negative answer: the rcode, AA, no answers, the zone SOA (minimum = TTL) in authority.
fn negative(m: &Message, rcode: ResponseCode) {
    assert_eq!(m.metadata.response_code, rcode, "{m:?}");
    assert!(m.metadata.authoritative, "AA must be set: {m:?}");
    assert!(m.answers.is_empty(), "{m:?}");
    let [soa] = m.authorities.as_slice() else {
        panic!("one SOA in authority: {m:?}")
    };
    let RData::SOA(data) = &soa.data else {
        panic!("SOA expected: {soa:?}")
    };
    assert_eq!(soa.name.to_ascii(), "cluster.local.");
    assert_eq!(data.mname.to_ascii(), "ns.dns.cluster.local.");
    assert_eq!(data.rname.to_ascii(), "hostmaster.cluster.local.");
    assert_eq!(
        (data.refresh, data.retry, data.expire, data.minimum),
        (7200, 1800, 86400, TTL)
    );
    assert_eq!(soa.ttl, TTL);
}

fn nodata(m: &Message) {
    negative(m, ResponseCode::NoError)
}

fn nxdomain(m: &Message) {
    negative(m, ResponseCode::NXDomain)
}

#[tokio::test]
async fn cluster_ip_services_answer_their_cluster_ips_per_family() {
    let s = server().await;
    let a = ask(s.addr, "web.default.svc.cluster.local", RecordType::A).await;
    assert_eq!(
        positive(&a),
        ["web.default.svc.cluster.local. a 10.96.0.20"]
    );
    // Mixed case is answered as asked (names compare case-insensitively).
    let a = ask(s.addr, "WEB.Default.svc.cluster.local", RecordType::A).await;
    assert_eq!(
        positive(&a),
        ["web.default.svc.cluster.local. a 10.96.0.20"]
    );
    nodata(&ask(s.addr, "web.default.svc.cluster.local", RecordType::AAAA).await);
    let aaaa = ask(s.addr, "dual.default.svc.cluster.local", RecordType::AAAA).await;
    assert_eq!(
        positive(&aaaa),
        ["dual.default.svc.cluster.local. aaaa fd00:96::21"]
    );
    let a = ask(s.addr, "dual.default.svc.cluster.local", RecordType::A).await;
    assert_eq!(
        positive(&a),
        ["dual.default.svc.cluster.local. a 10.96.0.21"]
    );
    // A Service without ports still has its address (CoreDNS's port sentinel).
    let a = ask(s.addr, "noports.default.svc.cluster.local", RecordType::A).await;
    assert_eq!(
        positive(&a),
        ["noports.default.svc.cluster.local. a 10.96.0.22"]
    );
}

#[tokio::test]
async fn headless_services_answer_ready_endpoints_or_nxdomain() {
    let s = server().await;
    let a = ask(s.addr, "db.default.svc.cluster.local", RecordType::A).await;
    let mut got = positive(&a);
    got.sort();
    // nil ready counts as ready; ready=false (even serving) does not.
    assert_eq!(
        got,
        [
            "db.default.svc.cluster.local. a 10.244.1.5",
            "db.default.svc.cluster.local. a 10.244.1.6"
        ]
    );
    let aaaa = ask(s.addr, "db.default.svc.cluster.local", RecordType::AAAA).await;
    assert_eq!(
        positive(&aaaa),
        ["db.default.svc.cluster.local. aaaa fd00:244::"]
    );
    nxdomain(&ask(s.addr, "idle.default.svc.cluster.local", RecordType::A).await);
}

#[tokio::test]
async fn endpoints_answer_by_hostname_and_by_dashed_ip() {
    let s = server().await;
    let a = ask(s.addr, "db-0.db.default.svc.cluster.local", RecordType::A).await;
    assert_eq!(
        positive(&a),
        ["db-0.db.default.svc.cluster.local. a 10.244.1.5"]
    );
    let a = ask(
        s.addr,
        "10-244-1-6.db.default.svc.cluster.local",
        RecordType::A,
    )
    .await;
    assert_eq!(
        positive(&a),
        ["10-244-1-6.db.default.svc.cluster.local. a 10.244.1.6"]
    );
    // IPv6: ':' -> '-', a trailing '-' gets a '0'.
    let aaaa = ask(
        s.addr,
        "fd00-244--0.db.default.svc.cluster.local",
        RecordType::AAAA,
    )
    .await;
    assert_eq!(
        positive(&aaaa),
        ["fd00-244--0.db.default.svc.cluster.local. aaaa fd00:244::"]
    );
    // A not-ready endpoint's hostname does not exist; nor does an unknown one.
    nxdomain(&ask(s.addr, "db-2.db.default.svc.cluster.local", RecordType::A).await);
    nxdomain(&ask(s.addr, "db-9.db.default.svc.cluster.local", RecordType::A).await);
    // The endpoint exists but has no IPv6 address.
    nodata(
        &ask(
            s.addr,
            "db-0.db.default.svc.cluster.local",
            RecordType::AAAA,
        )
        .await,
    );
}

#[tokio::test]
async fn external_names_are_cnames_chased_in_zone() {
    let s = server().await;
    let a = ask(s.addr, "alias.default.svc.cluster.local", RecordType::A).await;
    assert_eq!(
        positive(&a),
        [
            "alias.default.svc.cluster.local. cname web.default.svc.cluster.local.",
            "web.default.svc.cluster.local. a 10.96.0.20"
        ]
    );
    let c = ask(s.addr, "alias.default.svc.cluster.local", RecordType::CNAME).await;
    assert_eq!(
        positive(&c),
        ["alias.default.svc.cluster.local. cname web.default.svc.cluster.local."]
    );
    // No SRV for ExternalName; an IP-valued externalName yields nothing at all.
    nodata(&ask(s.addr, "alias.default.svc.cluster.local", RecordType::SRV).await);
    nxdomain(&ask(s.addr, "ipname.default.svc.cluster.local", RecordType::A).await);
    // A CNAME loop ends (the chain is cut), it does not hang the server.
    let l = ask(s.addr, "loop-a.default.svc.cluster.local", RecordType::A).await;
    assert_eq!(l.metadata.response_code, ResponseCode::NoError);
    assert!(l.answers.len() <= 10, "{l:?}");
}

#[tokio::test]
async fn srv_records_for_named_ports() {
    let s = server().await;
    let m = ask(
        s.addr,
        "_http._tcp.web.default.svc.cluster.local",
        RecordType::SRV,
    )
    .await;
    assert_eq!(
        positive(&m),
        ["_http._tcp.web.default.svc.cluster.local. srv 0 100 80 web.default.svc.cluster.local."]
    );
    assert_eq!(
        additionals(&m),
        ["web.default.svc.cluster.local. a 10.96.0.20"]
    );
    // Names compare case-insensitively; the protocol selects.
    let m = ask(
        s.addr,
        "_DNS._udp.web.default.svc.cluster.local",
        RecordType::SRV,
    )
    .await;
    assert_eq!(
        positive(&m),
        ["_dns._udp.web.default.svc.cluster.local. srv 0 100 53 web.default.svc.cluster.local."]
    );
    nxdomain(
        &ask(
            s.addr,
            "_http._udp.web.default.svc.cluster.local",
            RecordType::SRV,
        )
        .await,
    );
    nxdomain(
        &ask(
            s.addr,
            "_nope._tcp.web.default.svc.cluster.local",
            RecordType::SRV,
        )
        .await,
    );
    // The bare name matches every port.
    let mut all = positive(&ask(s.addr, "web.default.svc.cluster.local", RecordType::SRV).await);
    all.sort();
    assert_eq!(
        all,
        [
            "web.default.svc.cluster.local. srv 0 50 53 web.default.svc.cluster.local.",
            "web.default.svc.cluster.local. srv 0 50 80 web.default.svc.cluster.local."
        ]
    );
    // Headless: one per ready endpoint, targets are the endpoint names, addresses in Additional.
    let m = ask(
        s.addr,
        "_pg._tcp.db.default.svc.cluster.local",
        RecordType::SRV,
    )
    .await;
    let mut got = positive(&m);
    got.sort();
    assert_eq!(
        got,
        [
            "_pg._tcp.db.default.svc.cluster.local. srv 0 33 5432 10-244-1-6.db.default.svc.cluster.local.",
            "_pg._tcp.db.default.svc.cluster.local. srv 0 33 5432 db-0.db.default.svc.cluster.local.",
            "_pg._tcp.db.default.svc.cluster.local. srv 0 33 5432 fd00-244--0.db.default.svc.cluster.local."
        ]
    );
    let mut extra = additionals(&m);
    extra.sort();
    assert_eq!(
        extra,
        [
            "10-244-1-6.db.default.svc.cluster.local. a 10.244.1.6",
            "db-0.db.default.svc.cluster.local. a 10.244.1.5",
            "fd00-244--0.db.default.svc.cluster.local. aaaa fd00:244::"
        ]
    );
    // No ports: the name exists, no SRV.
    nodata(&ask(s.addr, "noports.default.svc.cluster.local", RecordType::SRV).await);
}

#[tokio::test]
async fn pod_records_in_insecure_mode() {
    let s = server().await;
    let a = ask(
        s.addr,
        "10-244-1-99.default.pod.cluster.local",
        RecordType::A,
    )
    .await;
    assert_eq!(
        positive(&a),
        ["10-244-1-99.default.pod.cluster.local. a 10.244.1.99"]
    );
    let aaaa = ask(
        s.addr,
        "fd00--5.default.pod.cluster.local",
        RecordType::AAAA,
    )
    .await;
    assert_eq!(
        positive(&aaaa),
        ["fd00--5.default.pod.cluster.local. aaaa fd00::5"]
    );
    nodata(
        &ask(
            s.addr,
            "10-244-1-99.default.pod.cluster.local",
            RecordType::AAAA,
        )
        .await,
    );
    // The namespace must exist; the label must be an address.
    nxdomain(
        &ask(
            s.addr,
            "10-244-1-99.nowhere.pod.cluster.local",
            RecordType::A,
        )
        .await,
    );
    nxdomain(&ask(s.addr, "not-an-ip.default.pod.cluster.local", RecordType::A).await);
}

#[tokio::test]
async fn ptr_for_cluster_ips_and_endpoints() {
    let s = server().await;
    let m = ask(s.addr, "20.0.96.10.in-addr.arpa", RecordType::PTR).await;
    assert_eq!(
        positive(&m),
        ["20.0.96.10.in-addr.arpa. ptr web.default.svc.cluster.local."]
    );
    let m = ask(s.addr, "5.1.244.10.in-addr.arpa", RecordType::PTR).await;
    assert_eq!(
        positive(&m),
        ["5.1.244.10.in-addr.arpa. ptr db-0.db.default.svc.cluster.local."]
    );
    let v6 = "1.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.0.d.f.ip6.arpa";
    let m = ask(s.addr, v6, RecordType::PTR).await;
    assert_eq!(
        positive(&m),
        [format!("{v6}. ptr dual.default.svc.cluster.local.")]
    );
    // No match: the reverse zone falls through to the upstreams (none here: SERVFAIL).
    let m = ask(s.addr, "1.2.3.4.in-addr.arpa", RecordType::PTR).await;
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
}

#[tokio::test]
async fn zone_records_txt_soa_ns() {
    let s = server().await;
    let m = ask(s.addr, "dns-version.cluster.local", RecordType::TXT).await;
    assert_eq!(answers(&m), ["dns-version.cluster.local. txt 1.1.0"]);
    assert_eq!(m.answers[0].ttl, 28800);
    assert!(m.metadata.authoritative);
    let m = ask(s.addr, "cluster.local", RecordType::SOA).await;
    assert_eq!(m.answers.len(), 1);
    assert!(matches!(m.answers[0].data, RData::SOA(_)) && m.metadata.authoritative);
    let m = ask(s.addr, "cluster.local", RecordType::NS).await;
    assert_eq!(positive(&m), ["cluster.local. ns ns.dns.cluster.local."]);
    assert_eq!(additionals(&m), ["ns.dns.cluster.local. a 10.96.0.10"]);
    let m = ask(s.addr, "ns.dns.cluster.local", RecordType::A).await;
    assert_eq!(positive(&m), ["ns.dns.cluster.local. a 10.96.0.10"]);
}

#[tokio::test]
async fn nodata_cases_of_b2() {
    let s = server().await;
    for (name, qtype) in [
        ("cluster.local", RecordType::A),
        ("svc.cluster.local", RecordType::A),
        ("pod.cluster.local", RecordType::A),
        ("default.svc.cluster.local", RecordType::A),
        ("default.pod.cluster.local", RecordType::A),
        // A Namespace object with nothing in it exists too.
        ("empty.svc.cluster.local", RecordType::A),
        ("web.default.svc.cluster.local", RecordType::AAAA),
        ("web.default.svc.cluster.local", RecordType::TXT),
        ("web.default.svc.cluster.local", RecordType::MX),
        ("db.default.svc.cluster.local", RecordType::CNAME),
        // An unknown type is decided as A would be.
        ("web.default.svc.cluster.local", RecordType::Unknown(65280)),
    ] {
        let m = ask(s.addr, name, qtype).await;
        assert_eq!(
            m.metadata.response_code,
            ResponseCode::NoError,
            "{name} {qtype}: {m:?}"
        );
        nodata(&m);
    }
}

#[tokio::test]
async fn nxdomain_cases_of_b2() {
    let s = server().await;
    for (name, qtype) in [
        ("nope.default.svc.cluster.local", RecordType::A),
        ("web.nowhere.svc.cluster.local", RecordType::A),
        ("nowhere.svc.cluster.local", RecordType::A),
        ("web.default.cluster.local", RecordType::A),
        ("web.default.other.cluster.local", RecordType::A),
        ("a.b.c.web.default.svc.cluster.local", RecordType::A),
        ("idle.default.svc.cluster.local", RecordType::A),
        ("nope.default.svc.cluster.local", RecordType::TXT),
        ("nope.default.svc.cluster.local", RecordType::Unknown(65280)),
        ("dns-version.cluster.local", RecordType::A),
        // The Service with an invalid name was skipped, not served.
        ("bad_name.default.svc.cluster.local", RecordType::A),
    ] {
        let m = ask(s.addr, name, qtype).await;
        assert_eq!(
            m.metadata.response_code,
            ResponseCode::NXDomain,
            "{name} {qtype}: {m:?}"
        );
        nxdomain(&m);
    }
}

#[tokio::test]
async fn an_invalid_manifest_name_is_reported_and_the_rest_served() {
    let dir = tempfile::Builder::new()
        .prefix("wnt-dns-")
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("c.yaml"), FIXTURES).unwrap();
    let objects = kubesrc::manifests::load(dir.path());
    let zone = dns::zone::Zone::new("cluster.local", TTL).unwrap();
    let view = dns::cluster::Cluster::build(&objects, &zone.name);
    assert!(
        view.problems.iter().any(|p| p.contains("Bad_Name")
            && p.contains("metadata.name")
            && p.contains("skipped")),
        "{:?}",
        view.problems
    );
    assert!(view.service("default", "web").is_some());
}
