//! The cluster DNS's answer after an EndpointSlice change, in process: `dns::start` serving
//! 10,000 Services (+ their EndpointSlices) and a headless Service `moving` whose one endpoint
//! moves, fed through a `watch` channel as the kube source feeds it. Each round publishes the
//! objects with `moving`'s slice replaced and asks over UDP on loopback until the answer holds
//! the new address: the time from the source publishing to the changed answer (the manifest
//! folder's poll or the kube watch's settle time come on top; `bench/dns.sh` measures from a
//! file rewrite). Floor in the same run, between rounds: the same question answered with
//! nothing changed (one UDP round trip to the same server). Budget (DESIGN §6): a change
//! visible in < 100 ms p99.
//!
//! Run: `cargo bench -p dns --bench change` (`DNS_BENCH_SERVICES`, default 10,000;
//! `DNS_BENCH_CHANGES`, default 200).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use kubesrc::Objects;

const NAME: &str = "moving.ns-0.svc.cluster.local.";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` ClusterIP Services in 50 namespaces, three endpoints each, as manifests.
fn cluster(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        let (ns, name) = (format!("ns-{}", i % 50), format!("svc-{i}"));
        let ip = |base: usize, k: usize| {
            format!(
                "10.{}.{}.{}",
                base + i / 65536,
                (i / 256) % 256,
                (i + 97 * k) % 256
            )
        };
        let _ = write!(
            text,
            "---\nkind: Service\napiVersion: v1\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{clusterIP: {}, ports: [{{name: http, port: 80}}]}}\n",
            ip(96, 0)
        );
        let _ = write!(
            text,
            "---\nkind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: {name}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {name}}}}}\naddressType: IPv4\nports: [{{name: http, port: 8080}}]\nendpoints:\n"
        );
        for k in 0..3 {
            let _ = writeln!(
                text,
                "- {{addresses: [{}], conditions: {{ready: true}}}}",
                ip(128, k)
            );
        }
    }
    text.push_str("---\nkind: Service\napiVersion: v1\nmetadata: {name: moving, namespace: ns-0}\nspec: {clusterIP: None}\n");
    text.push_str(&moving_slice(moving_ip(0)));
    text
}

/// The headless Service's slice with its one endpoint at `ip`.
fn moving_slice(ip: Ipv4Addr) -> String {
    format!(
        "---\nkind: EndpointSlice\napiVersion: discovery.k8s.io/v1\nmetadata: {{name: moving-1, namespace: ns-0, labels: {{kubernetes.io/service-name: moving}}}}\naddressType: IPv4\nendpoints:\n- {{addresses: [{ip}]}}\n"
    )
}

fn moving_ip(round: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 200, 1 + (round / 250) as u8, 1 + (round % 250) as u8)
}

/// A blocking UDP client of the server at `addr`.
struct Asker {
    socket: UdpSocket,
    query: Message,
    id: u16,
}

impl Asker {
    fn new(addr: SocketAddr) -> Asker {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket.connect(addr).expect("connect");
        socket
            .set_read_timeout(Some(Duration::from_secs(3)))
            .expect("timeout");
        let mut query = Message::query();
        query.metadata.recursion_desired = true;
        query.add_query(Query::query(
            Name::from_ascii(NAME).expect("name"),
            RecordType::A,
        ));
        Asker {
            socket,
            query,
            id: 0,
        }
    }

    /// The A answer's first address.
    fn ask(&mut self) -> Option<IpAddr> {
        self.id = self.id.wrapping_add(1);
        self.query.metadata.id = self.id;
        let bytes = self.query.to_vec().expect("encode");
        self.socket.send(&bytes).expect("send");
        let mut buf = [0u8; 4096];
        loop {
            let n = self.socket.recv(&mut buf).expect("an answer within 3 s");
            let m = Message::from_vec(&buf[..n]).expect("a DNS message");
            if m.metadata.id != self.id {
                continue; // a late answer to an earlier question
            }
            return m.answers.iter().find_map(|r| match &r.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                _ => None,
            });
        }
    }
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (ms(v[v.len() / 2]), ms(v[v.len() * 99 / 100]))
}

fn main() {
    let services = env_or("DNS_BENCH_SERVICES", 10_000);
    let changes = env_or("DNS_BENCH_CHANGES", 200).max(2);
    let mut objects = Objects::default();
    kubesrc::manifests::load_text(&cluster(services), "bench", &mut objects);
    assert!(objects.problems.is_empty(), "{:?}", objects.problems);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(objects.clone()));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dns::Config {
        zone: "cluster.local".into(),
        ttl: 5,
        listen: vec![],
        upstreams: vec![],
        source: kubesrc::Source::Manifests {
            dir: dir.path().to_path_buf(),
            poll: dns::MANIFEST_POLL,
        },
        metrics_addr: None,
    };
    let running = rt.block_on(async {
        let sockets = dns::Sockets::bind(&["127.0.0.1:0".parse().expect("addr")])
            .await
            .expect("bind loopback");
        dns::start(&config, sockets, rx).expect("start")
    });
    let mut asker = Asker::new(running.addrs[0]);
    assert_eq!(asker.ask(), Some(IpAddr::V4(moving_ip(0))));
    let (mut times, mut floors, mut copies) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=changes {
        let ip = moving_ip(round);
        let mut one = Objects::default();
        kubesrc::manifests::load_text(&moving_slice(ip), "bench change", &mut one);
        objects.slices.extend(one.slices);
        // What the kube source does per publish (its maps copied whole), timed apart: it
        // comes before the answer's wait, in proportion to the cluster.
        let started = Instant::now();
        let published = Arc::new(objects.clone());
        copies.push(started.elapsed());
        let started = Instant::now();
        tx.send(published).expect("the DNS watches");
        while asker.ask() != Some(IpAddr::V4(ip)) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "round {round}: {ip} never answered"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        times.push(started.elapsed());
        let started = Instant::now();
        assert_eq!(asker.ask(), Some(IpAddr::V4(ip)));
        floors.push(started.elapsed());
    }
    let ((p50, p99), (f50, f99)) = (percentiles(times), percentiles(floors));
    let (c50, c99) = percentiles(copies);
    println!(
        "DNS answer after an EndpointSlice change, {services} Services, {changes} changes: p50 {p50:.2} ms, p99 {p99:.2} ms; floor (the same question, nothing changed): p50 {f50:.3} ms, p99 {f99:.3} ms; before it, the source's copy of its objects (not in the figure): p50 {c50:.2} ms, p99 {c99:.2} ms"
    );
    drop(running);
}
