//! What one query costs the handler (decode, resolve, encode; no sockets): a ClusterIP
//! Service's A record, the baseline, against a headless Service with 3,000 ready endpoints
//! asked for A over UDP (512 bytes, and EDNS 1232) and over TCP, and for SRV over TCP. Run:
//! `cargo bench -p dns --bench answer`; the figure that matters is each row's ratio to the
//! baseline in the same run.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use dns::cluster::Cluster;
use dns::handler::{Handler, Reply, Transport};
use dns::zone::Zone;
use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::{Name, RecordType};

fn handler() -> Handler {
    let eps: String = (0..3000)
        .map(|i| format!("- {{addresses: [10.244.{}.{}]}}\n", i / 250, i % 250 + 1))
        .collect();
    let text = format!(
        "kind: Service\napiVersion: v1\nmetadata: {{name: web, namespace: default}}\nspec: {{clusterIP: 10.96.0.20, ports: [{{port: 80}}]}}\n---\n\
         kind: Service\napiVersion: v1\nmetadata: {{name: big, namespace: default}}\nspec: {{clusterIP: None}}\n---\n\
         kind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: big-1, namespace: default, labels: {{kubernetes.io/service-name: big}}}}\n\
         addressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints:\n{eps}"
    );
    let mut objects = kubesrc::Objects::default();
    kubesrc::manifests::load_text(&text, "bench.yaml", &mut objects);
    let zone = Zone::new("cluster.local", 30).expect("zone");
    let view = Cluster::build(&objects, &zone.name);
    Handler::new(zone, view, Vec::new())
}

fn query(name: &str, qtype: RecordType, payload: Option<u16>) -> Vec<u8> {
    let mut q = Message::query();
    q.add_query(Query::query(Name::from_ascii(name).expect("name"), qtype));
    if let Some(p) = payload {
        let mut e = Edns::new();
        e.set_max_payload(p);
        q.set_edns(e);
    }
    q.to_vec().expect("encoded")
}

fn bench(c: &mut Criterion) {
    let h = handler();
    let big = "big.default.svc.cluster.local.";
    let cases = [
        (
            "clusterip A, UDP (baseline)",
            query("web.default.svc.cluster.local.", RecordType::A, None),
            Transport::Udp,
        ),
        (
            "headless 3000 A, UDP 512",
            query(big, RecordType::A, None),
            Transport::Udp,
        ),
        (
            "headless 3000 A, UDP EDNS 1232",
            query(big, RecordType::A, Some(1232)),
            Transport::Udp,
        ),
        (
            "headless 3000 A, TCP",
            query(big, RecordType::A, None),
            Transport::Tcp,
        ),
        (
            "headless 3000 SRV, TCP",
            query(big, RecordType::SRV, None),
            Transport::Tcp,
        ),
    ];
    let mut group = c.benchmark_group("dns_query");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    for (name, bytes, transport) in &cases {
        group.bench_function(*name, |b| {
            b.iter(|| match h.handle(black_box(bytes), *transport) {
                Reply::Now(out) => out.len(),
                Reply::Drop | Reply::Upstream(_) => 0,
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
