//! Property tests of every parser the DNS owns: the query handler given arbitrary (and mutated)
//! bytes, name-to-record resolution given arbitrary names, the reverse and pod name readers, and
//! the cluster view given arbitrary manifests. Never a panic; always a well-formed verdict.
//! And answers too big for their transport (headless Services with thousands of endpoints,
//! over UDP and TCP): always one whole message within the transport's size.

mod common;

use std::sync::Arc;

use arc_swap::ArcSwap;
use dns::answer::{Outcome, resolve};
use dns::cluster::Cluster;
use dns::forward::Forwarder;
use dns::handler::{Handler, Reply, Transport};
use dns::metrics::Metrics;
use dns::zone::Zone;
use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RecordType};
use proptest::prelude::*;
use serde_json::{Value, json};

const FIXTURES: &str = include_str!("fixtures.yaml");

/// Built once: the fixtures take a while to parse in a debug build.
static HANDLER: std::sync::LazyLock<Handler> = std::sync::LazyLock::new(build_handler);

fn handler() -> &'static Handler {
    &HANDLER
}

fn build_handler() -> Handler {
    let mut objects = kubesrc::Objects::default();
    kubesrc::manifests::load_text(FIXTURES, "fixtures.yaml", &mut objects);
    let zone = Zone::new("cluster.local", 30).unwrap();
    let view = Cluster::build(&objects, &zone.name);
    Handler {
        zone,
        view: ArcSwap::from_pointee(view),
        forwarder: Forwarder::new(vec![]),
        metrics: Arc::new(Metrics::default()),
    }
}

/// A reply, if any, is a DNS response to the same id.
fn check_reply(bytes: &[u8], reply: Reply) -> Result<(), TestCaseError> {
    match reply {
        Reply::Now(out) => {
            let m = Message::from_vec(&out)
                .map_err(|e| TestCaseError::fail(format!("unparseable reply: {e}")))?;
            prop_assert_eq!(m.metadata.id, u16::from_be_bytes([bytes[0], bytes[1]]));
            prop_assert!(
                out.len() <= 512 || m.edns.is_some(),
                "UDP reply over 512 bytes without EDNS"
            );
        }
        Reply::Drop => {}
        Reply::Upstream(_) => {}
    }
    Ok(())
}

fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("svc".to_string()),
        Just("pod".to_string()),
        Just("default".to_string()),
        Just("db".to_string()),
        Just("web".to_string()),
        Just("_http".to_string()),
        Just("_tcp".to_string()),
        Just("db-0".to_string()),
        Just("10-1-2-3".to_string()),
        Just("in-addr".to_string()),
        Just("arpa".to_string()),
        "[a-z0-9-]{1,12}",
        "[0-9]{1,3}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let h = handler();
        let reply = h.handle(&bytes, Transport::Udp);
        if bytes.len() >= 2 {
            check_reply(&bytes, reply)?;
        }
    }

    #[test]
    fn mutated_queries_never_panic(
        labels in prop::collection::vec(label(), 0..8),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let name = format!("{}.cluster.local", labels.join("."));
        let Ok(name) = Name::from_ascii(&name) else { return Ok(()) };
        let mut m = Message::query();
        m.add_query(Query::query(name, RecordType::A));
        let mut bytes = m.to_vec().unwrap();
        for (at, v) in flips {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        bytes.truncate(12.max(cut.index(bytes.len() + 1)));
        let h = handler();
        check_reply(&bytes.clone(), h.handle(&bytes, Transport::Udp))?;
        check_reply(&bytes.clone(), h.handle(&bytes, Transport::Tcp))?;
    }

    #[test]
    fn in_zone_names_are_always_answered_here(
        labels in prop::collection::vec(label(), 0..7),
        qtype in prop::sample::select(vec![RecordType::A, RecordType::AAAA, RecordType::SRV, RecordType::TXT,
            RecordType::PTR, RecordType::CNAME, RecordType::MX, RecordType::SOA, RecordType::NS, RecordType::Unknown(999)]),
    ) {
        let h = handler();
        let view = h.view.load();
        let text = if labels.is_empty() { "cluster.local".to_string() } else { format!("{}.cluster.local", labels.join(".")) };
        let Ok(name) = Name::from_ascii(&text) else { return Ok(()) };
        let outcome = resolve(&view, &h.zone, &name, qtype);
        prop_assert!(!matches!(outcome, Outcome::Forward | Outcome::NotSynced), "{text} {qtype}: {outcome:?}");
        // And out of the zone, nothing is answered here except our own addresses' PTRs.
        let outside = Name::from_ascii(format!("{}.example", labels.join("."))).unwrap_or_else(|_| Name::root());
        prop_assert_eq!(resolve(&view, &h.zone, &outside, qtype), Outcome::Forward);
    }

    #[test]
    fn name_readers_never_panic(s in ".{0,80}") {
        let _ = dns::names::pod_ip(&s);
        let _ = dns::names::absolute(&s);
        let _ = dns::names::label(&s);
        let labels: Vec<&[u8]> = s.split('.').map(str::as_bytes).collect();
        let _ = dns::names::reverse_ip(&labels);
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-zA-Z0-9_.:-]{0,20}".prop_map(Value::from),
        Just(json!("None")),
        Just(json!("10.96.0.1")),
        Just(json!("ExternalName")),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "metadata",
                        "spec",
                        "name",
                        "namespace",
                        "clusterIP",
                        "clusterIPs",
                        "type",
                        "externalName",
                        "ports",
                        "endpoints",
                        "addresses",
                        "hostname",
                        "labels",
                        "addressType",
                        "conditions",
                        "ready",
                        "port",
                        "protocol"
                    ]),
                    inner
                ),
                0..5
            )
            .prop_map(|kv| Value::Object(
                kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}

proptest! {
    #[test]
    fn arbitrary_manifests_never_panic_the_view(
        kind in prop::sample::select(vec!["Service", "EndpointSlice", "Namespace", "List"]),
        body in json_value(),
    ) {
        let mut obj = match body { Value::Object(m) => m, _ => Default::default() };
        obj.insert("kind".into(), json!(kind));
        let mut objects = kubesrc::Objects::default();
        kubesrc::manifests::load_text(&Value::Object(obj).to_string(), "fuzz.json", &mut objects);
        let zone = Zone::new("cluster.local", 30).unwrap();
        let view = Cluster::build(&objects, &zone.name);
        for p in &view.problems {
            prop_assert!(p.contains("fuzz.json"), "a problem says where: {p}");
        }
    }
}

/// Headless Service `big` in `default` with `n` ready endpoints in one slice (IPv6 when `v6`),
/// each named by a long `hostname` when `named` (long SRV targets), with port `http`.
fn big_headless(n: usize, v6: bool, named: bool) -> kubesrc::Objects {
    let service = json!({"apiVersion":"v1","kind":"Service",
        "metadata":{"name":"big","namespace":"default"},
        "spec":{"clusterIP":"None","ports":[{"name":"http","port":80}]}});
    let endpoints: Vec<Value> = (0..n)
        .map(|i| {
            let ip = if v6 {
                format!("fd00:244::{:x}", i + 1)
            } else {
                format!("10.244.{}.{}", i / 250, i % 250 + 1)
            };
            let mut ep = json!({"addresses":[ip]});
            if named {
                ep["hostname"] = json!(format!("endpoint-with-a-long-hostname-{i}"));
            }
            ep
        })
        .collect();
    let slice = json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":"big-1","namespace":"default","labels":{"kubernetes.io/service-name":"big"}},
        "addressType": if v6 { "IPv6" } else { "IPv4" },
        "ports":[{"name":"http","port":8080}],"endpoints":endpoints});
    let mut objects = kubesrc::Objects::default();
    let text = format!("---\n{service}\n---\n{slice}\n");
    kubesrc::manifests::load_text(&text, "big.yaml", &mut objects);
    objects
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Whatever the size of the answer, the transport and the client's EDNS size, the reply is
    /// one whole message (no record cut short, nothing after the last) within what the
    /// transport carries; TC is set exactly when records were left out; and every spelling of
    /// the name gets the same records.
    #[test]
    fn big_answers_are_whole_messages_within_the_transport(
        n in 1usize..4000,
        v6 in any::<bool>(),
        named in any::<bool>(),
        qtype in prop::sample::select(vec![RecordType::A, RecordType::AAAA, RecordType::SRV]),
        payload in prop::option::of(0u16..9000),
        tcp in any::<bool>(),
        upper in any::<bool>(),
    ) {
        let zone = Zone::new("cluster.local", 30).unwrap();
        let view = Cluster::build(&big_headless(n, v6, named), &zone.name);
        let h = Handler::new(zone, view, vec![]);
        let name = if upper { "BIG.Default.svc.cluster.local." } else { "big.default.svc.cluster.local." };
        let mut q = Message::query();
        let asked = Name::from_ascii(name).unwrap();
        q.add_query(Query::query(asked.clone(), qtype));
        if let Some(p) = payload {
            let mut e = Edns::new();
            e.set_max_payload(p);
            q.set_edns(e);
        }
        let (transport, limit) = match (tcp, payload) {
            (true, _) => (Transport::Tcp, 65535),
            (false, Some(p)) => (Transport::Udp, usize::from(p.clamp(512, 1232))),
            (false, None) => (Transport::Udp, 512),
        };
        let Reply::Now(out) = h.handle(&q.to_vec().unwrap(), transport) else {
            return Err(TestCaseError::fail("no answer"));
        };
        prop_assert!(out.len() <= limit, "{} bytes over {limit}", out.len());
        let m = common::whole_message(&out).map_err(TestCaseError::fail)?;
        prop_assert_eq!(m.metadata.id, q.metadata.id);
        prop_assert!(m.queries[0].name().eq_case(&asked));
        let family = if v6 { RecordType::AAAA } else { RecordType::A };
        let all = match qtype {
            RecordType::SRV => n,
            t if t == family => n,
            _ => 0,
        };
        prop_assert!(m.answers.len() <= all);
        prop_assert_eq!(m.metadata.truncation, m.answers.len() < all || (qtype == RecordType::SRV && m.additionals.len() < n), "{} of {} answers", m.answers.len(), all);
        for r in &m.answers {
            prop_assert!(r.name.eq_case(&asked), "owner {} for {}", r.name, asked);
        }
    }
}
