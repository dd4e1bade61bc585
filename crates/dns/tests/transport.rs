//! The server as a DNS client meets it: `dig` over UDP and TCP, EDNS0, truncation, bad input
//! (FORMERR / NOTIMP / REFUSED, silence for non-queries, never a stalled server), SERVFAIL
//! before the first sync, and a manifest change showing in answers.

mod common;

use std::sync::Arc;

use common::{ask, ask_with, dig, exchange};
use hickory_proto::op::{Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RecordType};

/// A headless Service with `n` ready endpoints: its A answer outgrows 512 bytes past ~30.
fn big_headless(n: usize) -> String {
    let eps: Vec<String> = (0..n)
        .map(|i| format!("- {{addresses: [10.244.{}.{}]}}", i / 200, i % 200 + 1))
        .collect();
    format!(
        "kind: Service\napiVersion: v1\nmetadata: {{name: big, namespace: default}}\nspec: {{clusterIP: None}}\n---\n\
         kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: big-1, namespace: default, labels: {{kubernetes.io/service-name: big}}}}\n\
         addressType: IPv4\nendpoints:\n{}\n",
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
    // No EDNS: 512 bytes, so TC and an empty answer.
    let m = ask(s.addr, name, RecordType::A).await;
    assert!(m.metadata.truncation && m.answers.is_empty(), "{m:?}");
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
