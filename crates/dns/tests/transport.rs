//! The server as a DNS client meets it: `dig` over UDP and TCP, EDNS0 (BADVERS past version
//! 0), truncation at record boundaries within the transport's size (a headless Service with
//! 3,000 endpoints), bad input (FORMERR / NOTIMP / REFUSED, silence for non-queries, never a
//! stalled server), SERVFAIL before the first sync, a manifest change showing in answers, and a
//! folder that cannot be read answering from its last good objects.

mod common;

use std::sync::Arc;

use common::{ask, ask_with, dig, exchange, exchange_tcp, whole_message};
use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};

/// A headless Service with `n` ready endpoints on port 8080: its A answer outgrows 512 bytes
/// past ~30.
fn big_headless(n: usize) -> String {
    let eps: Vec<String> = (0..n)
        .map(|i| format!("- {{addresses: [10.244.{}.{}]}}", i / 200, i % 200 + 1))
        .collect();
    format!(
        "kind: Service\napiVersion: v1\nmetadata: {{name: big, namespace: default}}\nspec: {{clusterIP: None}}\n---\n\
         kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: big-1, namespace: default, labels: {{kubernetes.io/service-name: big}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints:\n{}\n",
        eps.join("\n")
    )
}

const WEB: &str = "kind: Service\napiVersion: v1\nmetadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.20, ports: [{port: 80}]}\n";

#[tokio::test]
async fn dig_over_udp_and_tcp() {
    let s = common::start(&[("web.yaml", WEB)], 30, vec![]).await;
    for transport in ["+notcp", "+tcp"] {
        let out = dig(s.addr, &[transport, "web.default.svc.cluster.local", "A"]).await;
        assert!(out.contains("status: NOERROR"), "{out}");
        assert!(out.contains("flags: qr aa rd ra"), "{out}");
        assert!(
            out.contains("web.default.svc.cluster.local. 30 IN\tA\t10.96.0.20"),
            "{out}"
        );
    }
    let out = dig(s.addr, &["+tcp", "nope.default.svc.cluster.local", "A"]).await;
    assert!(
        out.contains("status: NXDOMAIN") && out.contains("IN\tSOA\tns.dns.cluster.local."),
        "{out}"
    );
}

#[tokio::test]
async fn big_answers_are_truncated_over_udp_and_whole_over_tcp() {
    let text = big_headless(100);
    let s = common::start(&[("big.yaml", &text)], 30, vec![]).await;
    let name = "big.default.svc.cluster.local";
    // No EDNS: 512 bytes, so TC and the records that fit, as CoreDNS cuts them.
    let m = ask(s.addr, name, RecordType::A).await;
    assert!(m.metadata.truncation, "{m:?}");
    assert!(!m.answers.is_empty() && m.answers.len() < 100, "{m:?}");
    // EDNS 4096 is honoured up to our 1232: 100 A records (~1.6 kB) still do not fit.
    let m = ask_with(s.addr, name, RecordType::A, Some(4096)).await;
    assert!(m.metadata.truncation, "{m:?}");
    assert_eq!(m.edns.as_ref().map(|e| e.max_payload()), Some(1232));
    // dig retries over TCP on TC, as resolvers do, and gets every record.
    let out = dig(s.addr, &["+noedns", name, "A"]).await;
    assert!(out.contains("Truncated, retrying in TCP mode"), "{out}");
    assert!(out.contains("ANSWER: 100,"), "{out}");
    // A fitting answer is not truncated when EDNS allows more than 512 bytes.
    let small = common::start(&[("big.yaml", &big_headless(40))], 30, vec![]).await;
    let plain = ask(small.addr, name, RecordType::A).await;
    assert!(plain.metadata.truncation, "40 records do not fit 512 bytes");
    let edns = ask_with(small.addr, name, RecordType::A, Some(1232)).await;
    assert!(
        !edns.metadata.truncation && edns.answers.len() == 40,
        "{edns:?}"
    );
}

#[tokio::test]
async fn edns_is_answered_with_edns() {
    let s = common::start(&[("web.yaml", WEB)], 30, vec![]).await;
    let out = dig(
        s.addr,
        &[
            "+edns=0",
            "+bufsize=1232",
            "web.default.svc.cluster.local",
            "A",
        ],
    )
    .await;
    assert!(
        out.contains("EDNS: version: 0") && out.contains("udp: 1232"),
        "{out}"
    );
    let out = dig(s.addr, &["+noedns", "web.default.svc.cluster.local", "A"]).await;
    assert!(!out.contains("EDNS:"), "{out}");
}

fn query_bytes(name: &str, qtype: RecordType, class: DNSClass, op: OpCode) -> (u16, Vec<u8>) {
    let mut m = Message::query();
    m.metadata.op_code = op;
    let mut q = Query::query(Name::from_ascii(name).unwrap(), qtype);
    q.set_query_class(class);
    m.add_query(q);
    (m.metadata.id, m.to_vec().unwrap())
}

async fn rcode_of(addr: std::net::SocketAddr, id: u16, bytes: &[u8]) -> ResponseCode {
    let reply = exchange(addr, bytes).await.expect("an answer");
    let m = Message::from_vec(&reply).expect("a DNS message");
    assert_eq!(m.metadata.id, id);
    m.metadata.response_code
}

#[tokio::test]
async fn bad_queries_get_formerr_notimp_refused_and_the_server_keeps_answering() {
    let s = common::start(&[("web.yaml", WEB)], 30, vec![]).await;
    let name = "web.default.svc.cluster.local";
    let (id, update) = query_bytes(name, RecordType::A, DNSClass::IN, OpCode::Update);
    assert_eq!(rcode_of(s.addr, id, &update).await, ResponseCode::NotImp);
    let (id, chaos) = query_bytes("version.bind", RecordType::TXT, DNSClass::CH, OpCode::Query);
    assert_eq!(rcode_of(s.addr, id, &chaos).await, ResponseCode::Refused);
    let (id, axfr) = query_bytes(
        "cluster.local",
        RecordType::AXFR,
        DNSClass::IN,
        OpCode::Query,
    );
    assert_eq!(rcode_of(s.addr, id, &axfr).await, ResponseCode::Refused);
    // A header that promises a question, then nothing.
    let (id, mut truncated) = query_bytes(name, RecordType::A, DNSClass::IN, OpCode::Query);
    truncated.truncate(20);
    assert_eq!(
        rcode_of(s.addr, id, &truncated).await,
        ResponseCode::FormErr
    );
    // A name that points at itself (a compression loop).
    let mut looped = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(
        rcode_of(s.addr, 0x1234, &looped).await,
        ResponseCode::FormErr
    );
    // Two questions.
    let mut two = Message::query();
    two.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    two.add_query(Query::query(
        Name::from_ascii(name).unwrap(),
        RecordType::AAAA,
    ));
    assert_eq!(
        rcode_of(s.addr, two.metadata.id, &two.to_vec().unwrap()).await,
        ResponseCode::FormErr
    );
    // Not a query at all (shorter than a header, or a response): no answer.
    assert!(exchange(s.addr, &[1, 2, 3]).await.is_none());
    let mut response = Message::query();
    response.metadata.message_type = hickory_proto::op::MessageType::Response;
    assert!(
        exchange(s.addr, &response.to_vec().unwrap())
            .await
            .is_none()
    );
    // An oversized name (labels past 255 octets) is a FORMERR.
    let mut long = vec![0x55, 0x55, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for _ in 0..5 {
        long.push(63);
        long.extend_from_slice(&[b'a'; 63]);
    }
    long.extend_from_slice(&[0, 0, 1, 0, 1]);
    assert_eq!(rcode_of(s.addr, 0x5555, &long).await, ResponseCode::FormErr);
    // And the server still answers.
    let m = ask(s.addr, name, RecordType::A).await;
    assert_eq!(m.answers.len(), 1);
}

#[tokio::test]
async fn servfail_until_the_first_sync() {
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(kubesrc::Objects::default()));
    let dir = tempfile::Builder::new()
        .prefix("wnt-dns-")
        .tempdir()
        .unwrap();
    let config = common::config(30, vec![], dir.path().to_path_buf());
    let sockets = dns::Sockets::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap();
    let running = dns::start(&config, sockets, rx).unwrap();
    let addr = running.addrs[0];
    let name = "web.default.svc.cluster.local";
    let m = ask(addr, name, RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    assert!(
        !running
            .metrics
            .ready
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    let mut objects = kubesrc::Objects::default();
    kubesrc::manifests::load_text(WEB, "web.yaml", &mut objects);
    tx.send(Arc::new(objects)).unwrap();
    common::eventually(addr, name, RecordType::A, |m| m.answers.len() == 1).await;
    assert!(
        running
            .metrics
            .ready
            .load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[tokio::test]
async fn a_manifest_change_shows_in_the_answers() {
    let slice = |ip: &str| {
        format!(
            "kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: db-1, namespace: default, labels: {{kubernetes.io/service-name: db}}}}\n\
             addressType: IPv4\nendpoints:\n- {{addresses: [{ip}], hostname: db-0}}\n"
        )
    };
    let svc = "kind: Service\napiVersion: v1\nmetadata: {name: db, namespace: default}\nspec: {clusterIP: None}\n";
    let first = slice("10.244.1.5");
    let s = common::start(&[("svc.yaml", svc), ("slice.yaml", &first)], 30, vec![]).await;
    let name = "db-0.db.default.svc.cluster.local";
    let m = ask(s.addr, name, RecordType::A).await;
    assert_eq!(common::answers(&m), [format!("{name}. a 10.244.1.5")]);
    common::write_manifests(s.dir.path(), &[("slice.yaml", &slice("10.244.1.77"))]);
    common::eventually(s.addr, name, RecordType::A, |m| {
        common::answers(m) == [format!("{name}. a 10.244.1.77")]
    })
    .await;
    std::fs::remove_file(s.dir.path().join("slice.yaml")).unwrap();
    common::eventually(s.addr, name, RecordType::A, |m| {
        m.metadata.response_code == ResponseCode::NXDomain
    })
    .await;
}

/// A question for `name`/`qtype`, with EDNS of `payload` and `version` when given.
fn question(name: &str, qtype: RecordType, edns: Option<(u16, u8)>) -> Message {
    let mut q = Message::query();
    q.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    if let Some((payload, version)) = edns {
        let mut e = Edns::new();
        e.set_max_payload(payload);
        e.set_version(version);
        q.set_edns(e);
    }
    q
}

#[tokio::test]
async fn a_headless_service_with_3000_endpoints_fits_every_transport() {
    let s = common::start(&[("big.yaml", &big_headless(3000))], 30, vec![]).await;
    let name = "big.default.svc.cluster.local";
    for (qtype, edns, tcp, limit) in [
        (RecordType::A, None, false, 512),
        (RecordType::A, Some((1232, 0)), false, 1232),
        (RecordType::A, None, true, 65535),
        (RecordType::SRV, None, false, 512),
        (RecordType::SRV, Some((4096, 0)), false, 1232),
        (RecordType::SRV, Some((4096, 0)), true, 65535),
    ] {
        let q = question(name, qtype, edns);
        let bytes = q.to_vec().unwrap();
        let reply = if tcp {
            exchange_tcp(s.addr, &bytes).await
        } else {
            exchange(s.addr, &bytes).await
        };
        let reply = reply.unwrap_or_else(|| panic!("{qtype} tcp={tcp}: no answer"));
        let what = format!("{qtype} tcp={tcp} ({} bytes)", reply.len());
        assert!(reply.len() <= limit, "{what}: over {limit}");
        let m = whole_message(&reply).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{what}");
        assert!(
            !m.answers.is_empty(),
            "{what}: the records that fit are sent: {m:?}"
        );
        // TC exactly when records were left out. SRV with the addresses of 3,000 targets never
        // fits; over TCP more than a thousand A records do (hickory compresses 120 names a
        // message, Unbound's limit, so past that each record carries its owner name whole).
        let sent = m.answers.len();
        let left_out = sent < 3000 || (qtype == RecordType::SRV && m.additionals.len() < 3000);
        assert_eq!(m.metadata.truncation, left_out, "{what}");
        if qtype == RecordType::A && tcp {
            assert!(sent > 1000, "{what}: {sent} records");
        }
        assert_eq!(m.edns.is_some(), edns.is_some(), "{what}");
    }
    // dig reads the TCP answers as whole messages.
    let out = dig(s.addr, &["+tcp", name, "SRV"]).await;
    assert!(
        out.contains("status: NOERROR") && out.contains("flags: qr aa tc"),
        "{out}"
    );
    assert!(
        !out.contains("extra bytes") && !out.contains("malformed"),
        "{out}"
    );
}

#[tokio::test]
async fn an_edns_version_past_0_gets_badvers() {
    let s = common::start(&[("web.yaml", WEB)], 30, vec![]).await;
    let q = question(
        "web.default.svc.cluster.local",
        RecordType::A,
        Some((1232, 1)),
    );
    let reply = exchange(s.addr, &q.to_vec().unwrap())
        .await
        .expect("an answer");
    let m = Message::from_vec(&reply).expect("a DNS message");
    // BADVERS (16; hickory names the code BADSIG, which shares it).
    assert_eq!(u16::from(m.metadata.response_code), 16, "{m:?}");
    assert!(m.answers.is_empty(), "{m:?}");
    assert_eq!(m.edns.map(|e| e.version()), Some(0), "our version");
    // dig says so too, and version 0 is answered.
    let out = dig(
        s.addr,
        &[
            "+edns=1",
            "+noednsnegotiation",
            "web.default.svc.cluster.local",
            "A",
        ],
    )
    .await;
    assert!(out.contains("status: BADVERS"), "{out}");
    let m = ask_with(
        s.addr,
        "web.default.svc.cluster.local",
        RecordType::A,
        Some(1232),
    )
    .await;
    assert_eq!(m.answers.len(), 1);
}

#[tokio::test]
async fn a_folder_moved_away_keeps_its_answers_and_a_missing_one_is_never_ready() {
    // The folder is inside a scratch directory, so a failing test leaves nothing behind.
    let parent = tempfile::Builder::new()
        .prefix("wnt-dns-")
        .tempdir()
        .unwrap();
    let dir = parent.path().join("manifests");
    std::fs::create_dir(&dir).unwrap();
    common::write_manifests(&dir, &[("web.yaml", WEB)]);
    let s = serve(&dir).await;
    let addr = s.addrs[0];
    let name = "web.default.svc.cluster.local";
    let m = ask(addr, name, RecordType::A).await;
    assert_eq!(m.answers.len(), 1);
    std::fs::rename(&dir, parent.path().join("away")).unwrap();
    common::eventually(addr, name, RecordType::A, |m| {
        m.metadata.response_code == ResponseCode::NXDomain || s.metrics.source_errors.get() > 0
    })
    .await;
    let m = ask(addr, name, RecordType::A).await;
    assert_eq!(
        common::answers(&m),
        ["web.default.svc.cluster.local. a 10.96.0.20"],
        "answered from the last good objects while the folder is away"
    );

    // Started on a folder that is not there (a mistyped path): not ready, SERVFAIL (never
    // NXDOMAIN, which clients would cache), until it appears.
    let dir = parent.path().join("mistyped");
    let running = serve(&dir).await;
    let ready = || {
        running
            .metrics
            .ready
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let m = ask(running.addrs[0], name, RecordType::A).await;
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail, "{m:?}");
    assert!(!ready());
    std::fs::create_dir(&dir).unwrap();
    common::write_manifests(&dir, &[("web.yaml", WEB)]);
    common::eventually(running.addrs[0], name, RecordType::A, |m| {
        m.answers.len() == 1
    })
    .await;
    assert!(ready());
}

/// The DNS serving the manifests in `dir` on a loopback port.
async fn serve(dir: &std::path::Path) -> dns::Running {
    let objects = kubesrc::manifests::watch(dir.to_path_buf(), dns::MANIFEST_POLL);
    let config = common::config(30, vec![], dir.to_path_buf());
    let sockets = dns::Sockets::bind(&["127.0.0.1:0".parse().unwrap()])
        .await
        .unwrap();
    dns::start(&config, sockets, objects).unwrap()
}
