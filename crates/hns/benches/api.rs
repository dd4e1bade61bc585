//! hnsd through its Unix socket, as CNI plugins and kube-proxy use it: many clients at once
//! creating endpoints, then ClusterIP-style load balancers; calls/s and latency per phase,
//! against a baseline of `GET /globals/version` (the transport alone) at the same concurrency.
//!
//! `cargo bench -p hns --bench api`. Sizes: `HNS_BENCH_ENDPOINTS` (10000),
//! `HNS_BENCH_LBS` (2000), `HNS_BENCH_CLIENTS` (32). The store lives under `TMPDIR`.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hcn::{Endpoint, Guid, IpConfig, LoadBalancer, LoadBalancerPortMapping, MacAddress, Network};
use hns::Profile;
use hns_client::{Client, ClientError};
use testkit::hnsd::{Hnsd, l2bridge};
use tokio::runtime::Runtime;

/// How endpoint addresses are chosen in a run.
#[derive(Clone, Copy, PartialEq)]
enum Addressing {
    /// No address given: HNS takes the next free one from the subnet.
    HnsIpam,
    /// The caller names the address, as host-local IPAM does; HNS picks the MAC.
    ExplicitIp,
    /// The caller names address and MAC: no allocation in hnsd at all.
    ExplicitIpMac,
}

impl Addressing {
    fn label(self) -> &'static str {
        match self {
            Addressing::HnsIpam => "HNS IPAM",
            Addressing::ExplicitIp => "explicit IP",
            Addressing::ExplicitIpMac => "explicit IP and MAC",
        }
    }
}

/// Latencies of one phase.
struct Phase {
    name: String,
    wall: Duration,
    latencies: Vec<Duration>,
}

impl Phase {
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }

    fn percentile(&self, p: f64) -> Duration {
        let i = ((self.latencies.len() as f64 * p).ceil() as usize).saturating_sub(1);
        self.latencies.get(i).copied().unwrap_or_default()
    }

    /// Whether the phase meets the budget of issue 2.
    fn verdict(&self) -> String {
        let p99 = self.percentile(0.99).as_secs_f64() * 1e3;
        let met = self.rate() >= 2_000.0 && p99 < 10.0;
        format!(
            "{}: {} ({:.0}/s, p99 {p99:.2} ms)",
            self.name,
            if met { "met" } else { "MISSED" },
            self.rate()
        )
    }

    fn row(&self, baseline: Option<&Phase>) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let ratio = baseline.map_or("".to_string(), |b| format!("{:.3}", self.rate() / b.rate()));
        format!(
            "| {} | {} | {:.2} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
            self.name,
            self.latencies.len(),
            self.wall.as_secs_f64(),
            self.rate(),
            ms(self.percentile(0.50)),
            ms(self.percentile(0.99)),
            ms(self.latencies.last().copied().unwrap_or_default()),
            ratio
        )
    }
}

/// Runs calls `0..n` from `clients` concurrent tasks, each with its own connection, and times
/// every call. Any failed call aborts the benchmark: a benchmark of errors measures nothing.
async fn drive<F, Fut>(name: String, socket: &Path, clients: usize, n: usize, call: F) -> Phase
where
    F: Fn(Arc<Client>, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ClientError>> + Send,
{
    let call = Arc::new(call);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (call, next) = (call.clone(), next.clone());
            let client = Arc::new(Client::new(socket));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return latencies;
                    }
                    let t = Instant::now();
                    if let Err(e) = call(client.clone(), i).await {
                        panic!("call {i} failed: {e}");
                    }
                    latencies.push(t.elapsed());
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(n);
    for t in tasks {
        latencies.extend(t.await.expect("client task"));
    }
    let wall = start.elapsed();
    latencies.sort_unstable();
    Phase {
        name,
        wall,
        latencies,
    }
}

/// Lists every endpoint, one call after another, until `stop`.
async fn list_until(socket: PathBuf, stop: Arc<AtomicBool>) -> Phase {
    let client = Client::new(&socket);
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut len = 0;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        len = client.list_endpoints().await.expect("list endpoints").len();
        latencies.push(t.elapsed());
    }
    latencies.sort_unstable();
    Phase {
        name: format!("list all endpoints (up to {len}), concurrently"),
        wall: start.elapsed(),
        latencies,
    }
}

/// The `i`th explicit address: 10.244.0.2 upwards, as a host-local range would hand them out.
fn explicit_ip(i: usize) -> IpAddr {
    let n = u32::try_from(i + 2).expect("address index");
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 0, 0)) + n))
}

fn endpoint_doc(network: Guid, i: usize, addressing: Addressing) -> Endpoint {
    let ip_configurations = match addressing {
        Addressing::HnsIpam => Vec::new(),
        Addressing::ExplicitIp | Addressing::ExplicitIpMac => vec![IpConfig {
            ip_address: Some(explicit_ip(i)),
            prefix_length: 16,
        }],
    };
    // Locally administered MACs, outside the network's pool.
    let mac_address = (addressing == Addressing::ExplicitIpMac)
        .then(|| MacAddress::from_u64(0x0200_0000_0000 + i as u64));
    Endpoint {
        name: format!("pod-{i}_cbr0"),
        host_compute_network: network,
        ip_configurations,
        mac_address,
        ..Endpoint::default()
    }
}

/// A ClusterIP Service as kube-proxy programs it: one VIP, one TCP port, five backends.
fn load_balancer_doc(i: usize, endpoints: &[Guid]) -> LoadBalancer {
    let n = u32::try_from(i + 1).expect("VIP index");
    let vip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 0)) + n);
    LoadBalancer {
        host_compute_endpoints: (0..5)
            .map(|k| endpoints[(i * 5 + k) % endpoints.len()])
            .collect(),
        frontend_vips: vec![IpAddr::V4(vip)],
        port_mappings: vec![LoadBalancerPortMapping {
            protocol: 6,
            internal_port: 8080,
            external_port: 80,
            ..LoadBalancerPortMapping::default()
        }],
        ..LoadBalancer::default()
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` endpoint creates; the IDs of the endpoints, in order.
async fn create_endpoints(
    socket: &Path,
    clients: usize,
    network: Guid,
    addressing: Addressing,
    n: usize,
) -> (Phase, Vec<Guid>) {
    let ids = Arc::new(Mutex::new(vec![Guid::default(); n]));
    let sink = ids.clone();
    let phase = drive(
        format!("create endpoint ({})", addressing.label()),
        socket,
        clients,
        n,
        move |c: Arc<Client>, i| {
            let sink = sink.clone();
            async move {
                let e = c
                    .create_endpoint(&endpoint_doc(network, i, addressing))
                    .await?;
                sink.lock().expect("ids")[i] = e.id;
                Ok(())
            }
        },
    )
    .await;
    let ids = std::mem::take(&mut *ids.lock().expect("ids"));
    (phase, ids)
}

/// `n` ClusterIP load balancer creates over `endpoints`.
async fn create_load_balancers(
    socket: &Path,
    clients: usize,
    endpoints: Vec<Guid>,
    n: usize,
) -> Phase {
    let endpoints = Arc::new(endpoints);
    drive(
        "create load balancer (1 VIP, 1 port, 5 backends)".to_string(),
        socket,
        clients,
        n,
        move |c: Arc<Client>, i| {
            let endpoints = endpoints.clone();
            async move {
                c.create_load_balancer(&load_balancer_doc(i, &endpoints))
                    .await
                    .map(drop)
            }
        },
    )
    .await
}

/// kube-proxy lists every endpoint on each sync: `n` more creates (numbered from `first`)
/// while one client lists back-to-back show what a list costs the writers.
async fn create_while_listing(
    socket: &Path,
    clients: usize,
    network: Guid,
    addressing: Addressing,
    first: usize,
    n: usize,
) -> (Phase, Phase) {
    let stop = Arc::new(AtomicBool::new(false));
    // The lister is another program (kube-proxy): its own thread and runtime, so decoding
    // the list does not hold up the creating clients' runtime.
    let lister = {
        let (socket, stop) = (socket.to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("lister runtime");
            rt.block_on(list_until(socket, stop))
        })
    };
    let creates = drive(
        format!(
            "create endpoint ({}) while 1 client lists all",
            addressing.label()
        ),
        socket,
        clients,
        n,
        move |c: Arc<Client>, i| async move {
            c.create_endpoint(&endpoint_doc(network, first + i, addressing))
                .await
                .map(drop)
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    (creates, lister.join().expect("lister"))
}

/// `n` calls of `GET /globals/version`: the transport alone.
async fn baseline(socket: &Path, clients: usize, n: usize) -> Phase {
    drive(
        format!("baseline: GET /globals/version x{n}"),
        socket,
        clients,
        n,
        |c: Arc<Client>, _| async move { c.get_version().await.map(drop) },
    )
    .await
}

/// One fresh hnsd: each phase with its baseline; the table rows and the budget verdicts.
async fn run(addressing: Addressing, sizes: Sizes) -> (Vec<String>, Vec<String>) {
    // hnsd on its own runtime: its worker threads are sized as in the real process.
    let hnsd = Hnsd::start_on_own_runtime(Profile::Ws2022);
    let socket = hnsd.socket();
    let clients = sizes.clients;
    let doc: Network = serde_json::from_value(l2bridge("cbr0", "10.244.0.0/16", "10.244.0.1"))
        .expect("network document");
    let network = Client::new(&socket)
        .create_network(&doc)
        .await
        .expect("create the network")
        .id;

    let base_ep = baseline(&socket, clients, sizes.endpoints).await;
    let (create_ep, ids) =
        create_endpoints(&socket, clients, network, addressing, sizes.endpoints).await;
    let base_lb = baseline(&socket, clients, sizes.lbs).await;
    let create_lb = create_load_balancers(&socket, clients, ids, sizes.lbs).await;
    let more = sizes.endpoints / 2;
    let (during_list, list) =
        create_while_listing(&socket, clients, network, addressing, sizes.endpoints, more).await;
    drop(hnsd);

    let rows = vec![
        format!(
            "| **fresh hnsd, endpoints with {}** | | | | | | | |",
            addressing.label()
        ),
        base_ep.row(None),
        create_ep.row(Some(&base_ep)),
        base_lb.row(None),
        create_lb.row(Some(&base_lb)),
        during_list.row(Some(&base_ep)),
        list.row(None),
    ];
    let verdicts = [&create_ep, &create_lb, &during_list]
        .iter()
        .map(|p| p.verdict())
        .collect();
    (rows, verdicts)
}

/// How much work a run does.
#[derive(Clone, Copy)]
struct Sizes {
    endpoints: usize,
    lbs: usize,
    clients: usize,
}

fn main() {
    let sizes = Sizes {
        endpoints: env_usize("HNS_BENCH_ENDPOINTS", 10_000),
        lbs: env_usize("HNS_BENCH_LBS", 2_000),
        clients: env_usize("HNS_BENCH_CLIENTS", 32),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The clients get their own runtime, so hnsd's runtime is sized as in the real process.
    let rt = Runtime::new().expect("client runtime");

    println!(
        "hnsd API through the socket: {} endpoints, {} load balancers, {} concurrent clients, {cores} cores, store in {}",
        sizes.endpoints,
        sizes.lbs,
        sizes.clients,
        std::env::temp_dir().display()
    );
    println!();
    println!(
        "| phase | calls | wall s | calls/s | p50 ms | p99 ms | max ms | ÷ baseline calls/s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut verdicts = Vec::new();
    for addressing in [
        Addressing::HnsIpam,
        Addressing::ExplicitIp,
        Addressing::ExplicitIpMac,
    ] {
        let (rows, run_verdicts) = rt.block_on(run(addressing, sizes));
        for row in rows {
            println!("{row}");
        }
        verdicts.extend(
            run_verdicts
                .into_iter()
                .map(|v| format!("{}: {v}", addressing.label())),
        );
    }
    println!();
    println!("Budget (issue 2): >= 2,000 creates/s and p99 < 10 ms");
    for v in verdicts {
        println!("- {v}");
    }
}
