//! Programming Services into hnsd: N Services x 5 endpoints from a folder of manifests to every
//! load balancer in HNS, and, with 2,000 programmed, the latency of the incremental syncs users
//! wait on: one endpoint added to / removed from a Service (on ws2022, where a load balancer is
//! replaced by delete + create, and on unrestricted, where ModifyLoadBalancer updates it in
//! place), and a Service added / removed. Floors in the same run: the same load balancers
//! created straight through `hns_client::Client` with the same concurrency, and for each
//! incremental sync the same HNS calls in the same rounds straight to the same hnsd (what any
//! proxy pays to hnsd for that change), interleaved with the proxy's rounds.
//!
//! Run: `cargo bench -p proxy --bench program`. `PROXY_BENCH_SIZES` (default `2000,10000`)
//! picks the Service counts programmed, `PROXY_BENCH_ROUNDS` (default 200) the rounds of each
//! incremental sync; `bench/check.sh` runs `PROXY_BENCH_SIZES=2000 PROXY_BENCH_ROUNDS=40`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use hcn::{Endpoint, EndpointFlags, Guid, IpConfig, LoadBalancer, LoadBalancerPortMapping};
use hns::Profile;
use proxy::{Config, Proxy, SourceConfig};
use testkit::hnsd::{Hnsd, create_network, l2bridge};
use testkit::kube::{cluster_ip, endpoint_slice, http_port, ready, yaml_stream};

const NODE: &str = "win-1";
const LOCAL_PODS: usize = 15;
const REMOTE_PODS: usize = 5000;

fn remote_ip(i: usize) -> IpAddr {
    // 10.244.2.0 and up: other nodes' pods.
    let n = 2 * 256 + i;
    IpAddr::V4(Ipv4Addr::new(10, 244, (n / 250) as u8, (n % 250 + 2) as u8))
}

fn local_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 244, 1, (10 + i) as u8))
}

fn vip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 96, (i / 250) as u8, (i % 250 + 1) as u8))
}

/// The i-th Service's five endpoints: one local pod in three Services, the rest remote.
fn backends(i: usize) -> Vec<(IpAddr, &'static str)> {
    (0..5)
        .map(|k| {
            if k == 0 && i.is_multiple_of(3) {
                (local_ip(i % LOCAL_PODS), NODE)
            } else {
                (remote_ip((i * 5 + k) % REMOTE_PODS), "win-2")
            }
        })
        .collect()
}

/// What a round changes in the manifests of the programmed Services.
#[derive(Clone, Copy, PartialEq)]
enum Change {
    None,
    /// Service `i` has a sixth endpoint, on another node (a remote endpoint not in HNS yet).
    ExtraEndpoint(usize),
    /// One Service more, whose endpoints are pods HNS already has.
    ExtraService,
}

fn write_manifests(dir: &Path, services: usize, change: Change) {
    let mut objects = Vec::new();
    let count = services + usize::from(change == Change::ExtraService);
    for i in 0..count {
        let (name, ip) = (format!("svc-{i}"), vip(i).to_string());
        let mut eps: Vec<serde_json::Value> = backends(i)
            .iter()
            .map(|(ip, node)| ready(&ip.to_string(), node))
            .collect();
        if change == Change::ExtraEndpoint(i) {
            eps.push(ready(&extra_ip().to_string(), "win-3"));
        }
        objects.push(cluster_ip(&name, &ip, 80, 8080));
        objects.push(endpoint_slice(
            &format!("{name}-abc"),
            &name,
            "IPv4",
            http_port(8080),
            eps,
        ));
    }
    let path = dir.join("services.yaml");
    std::fs::write(&path, yaml_stream(&objects)).expect("write manifests");
    // On the disk before anything is timed: else the next fsync (hnsd's commit, in the timed
    // sync) also waits for these pages under ext4's ordered journal.
    std::fs::File::open(&path)
        .and_then(|f| f.sync_all())
        .expect("sync manifests");
}

/// The proxy's sixth endpoint's address.
fn extra_ip() -> IpAddr {
    remote_ip(REMOTE_PODS + 1)
}

struct Node {
    hnsd: Hnsd,
}

impl Node {
    fn manifests(&self) -> PathBuf {
        self.hnsd.dir().join("manifests")
    }
}

async fn node(profile: Profile) -> Node {
    let hnsd = Hnsd::start(profile).await;
    let c = hnsd.client();
    let net = create_network(&c, &l2bridge("cbr0", "10.244.0.0/16", "10.244.0.1")).await;
    for i in 0..LOCAL_PODS {
        let ep = Endpoint {
            host_compute_network: net.id,
            ip_configurations: vec![IpConfig {
                ip_address: Some(local_ip(i)),
                prefix_length: 16,
            }],
            ..Default::default()
        };
        c.create_endpoint(&ep).await.expect("local endpoint");
    }
    Node { hnsd }
}

fn config(n: &Node) -> Config {
    testkit::proxy::config(&n.hnsd.socket(), SourceConfig::Manifests(n.manifests()))
}

/// Manifests to every LB in hnsd, through the proxy.
async fn program(services: usize, profile: Profile) -> (Duration, Node) {
    let n = node(profile).await;
    let manifests = n.manifests();
    std::fs::create_dir_all(&manifests).expect("dir");
    write_manifests(&manifests, services, Change::None);
    let started = Instant::now();
    let snapshot = proxy::source::manifests::load(&manifests);
    let mut proxy = Proxy::connect(config(&n)).await.expect("proxy");
    let report = proxy.sync(&snapshot).await;
    let took = started.elapsed();
    assert!(
        report.retry.is_empty(),
        "{:?}",
        &report.problems[..report.problems.len().min(5)]
    );
    let lbs = n
        .hnsd
        .client()
        .list_load_balancers()
        .await
        .expect("list")
        .len();
    assert_eq!(lbs, services, "every Service programmed");
    (took, n)
}

/// The floor: the same LBs created straight through the client, 64 in flight, on a fresh hnsd
/// whose backends already exist.
async fn baseline(services: usize) -> Duration {
    let n = node(Profile::Ws2022).await;
    let c = Arc::new(n.hnsd.client());
    let net = c
        .get_network_by_name("cbr0")
        .await
        .expect("net")
        .expect("net");
    let mut ids = Vec::new();
    for i in 0..REMOTE_PODS {
        let ep = Endpoint {
            host_compute_network: net.id,
            flags: 1,
            ip_configurations: vec![IpConfig {
                ip_address: Some(remote_ip(i)),
                prefix_length: 0,
            }],
            ..Default::default()
        };
        ids.push(c.create_endpoint(&ep).await.expect("endpoint").id);
    }
    let started = Instant::now();
    futures::stream::iter(0..services)
        .map(|i| {
            let c = Arc::clone(&c);
            let backends = (0..5).map(|k| ids[(i * 5 + k) % REMOTE_PODS]).collect();
            async move {
                c.create_load_balancer(&cluster_lb(vip(i), backends))
                    .await
                    .expect("lb");
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
    started.elapsed()
}

/// The ClusterIP load balancer of `vip` (TCP 80 -> 8080) over `backends`.
fn cluster_lb(vip: IpAddr, backends: Vec<Guid>) -> LoadBalancer {
    LoadBalancer {
        host_compute_endpoints: backends,
        frontend_vips: vec![vip],
        port_mappings: vec![LoadBalancerPortMapping {
            protocol: 6,
            internal_port: 8080,
            external_port: 80,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The floor's own frontends (10.97/16), apart from the proxy's so that both run in turn on
/// one hnsd without touching each other's load balancers.
fn floor_vip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 97, (i / 250) as u8, (i % 250 + 1) as u8))
}

/// The floor's sixth endpoint (the proxy's is [`extra_ip`]).
fn floor_extra_ip() -> IpAddr {
    remote_ip(REMOTE_PODS + 2)
}

/// What one incremental change costs at hnsd alone: the HNS calls the proxy makes for it, in
/// the same two rounds (first what provides or frees, then what uses it), straight through
/// the client on the same hnsd.
struct Floor {
    client: hns_client::Client,
    network: Guid,
    /// Every endpoint's ID by address.
    ids: HashMap<IpAddr, Guid>,
    /// The floor's load balancer for Service `i`'s backends.
    lbs: HashMap<usize, Guid>,
    /// ModifyLoadBalancer (else delete + create).
    modify: bool,
    extra: Option<Guid>,
}

impl Floor {
    async fn new(n: &Node, modify: bool) -> Floor {
        let client = n.hnsd.client();
        let network = client
            .get_network_by_name("cbr0")
            .await
            .expect("net")
            .expect("net")
            .id;
        let ids = client
            .list_endpoints()
            .await
            .expect("endpoints")
            .iter()
            .flat_map(|e| e.ips().map(|ip| (ip, e.id)).collect::<Vec<_>>())
            .collect();
        Floor {
            client,
            network,
            ids,
            lbs: HashMap::new(),
            modify,
            extra: None,
        }
    }

    fn backends(&self, i: usize) -> Vec<Guid> {
        backends(i).iter().map(|(ip, _)| self.ids[ip]).collect()
    }

    /// The floor's load balancer for Service `i`, made (untimed) on first use.
    async fn lb(&mut self, i: usize) -> Guid {
        if let Some(id) = self.lbs.get(&i) {
            return *id;
        }
        let lb = cluster_lb(floor_vip(i), self.backends(i));
        let id = self.client.create_load_balancer(&lb).await.expect("lb").id;
        self.lbs.insert(i, id);
        id
    }

    /// Replaces (or updates) the floor's load balancer `i` with `backends`.
    async fn write_lb(&mut self, i: usize, id: Guid, backends: Vec<Guid>) {
        let lb = cluster_lb(floor_vip(i), backends);
        let written = if self.modify {
            self.client.update_load_balancer(id, &lb).await
        } else {
            self.client.create_load_balancer(&lb).await
        };
        self.lbs.insert(i, written.expect("write lb").id);
    }

    async fn delete_unless_modify(&self, id: Guid) {
        if !self.modify {
            self.client
                .delete_load_balancer(id)
                .await
                .expect("delete lb");
        }
    }

    /// A sixth backend, on a remote endpoint made for it.
    async fn endpoint_added(&mut self, i: usize) -> Duration {
        let id = self.lb(i).await;
        let started = Instant::now();
        let remote = Endpoint {
            host_compute_network: self.network,
            flags: EndpointFlags::REMOTE_ENDPOINT,
            ip_configurations: vec![IpConfig {
                ip_address: Some(floor_extra_ip()),
                prefix_length: 0,
            }],
            ..Default::default()
        };
        let (made, ()) = futures::join!(
            self.client.create_endpoint(&remote),
            self.delete_unless_modify(id)
        );
        let extra = made.expect("remote endpoint").id;
        let mut backends = self.backends(i);
        backends.push(extra);
        self.write_lb(i, id, backends).await;
        self.extra = Some(extra);
        started.elapsed()
    }

    /// The sixth backend gone, and its remote endpoint with it.
    async fn endpoint_removed(&mut self, i: usize) -> Duration {
        let id = self.lb(i).await;
        let extra = self.extra.take().expect("an endpoint was added");
        let started = Instant::now();
        self.delete_unless_modify(id).await;
        let lb = cluster_lb(floor_vip(i), self.backends(i));
        let client = &self.client;
        let written = async {
            if self.modify {
                client.update_load_balancer(id, &lb).await
            } else {
                client.create_load_balancer(&lb).await
            }
        };
        let (written, deleted) = futures::join!(written, client.delete_endpoint(extra));
        deleted.expect("delete remote endpoint");
        let new_id = written.expect("write lb").id;
        self.lbs.insert(i, new_id);
        started.elapsed()
    }

    /// One load balancer created for a new Service, then (`removed`) deleted.
    async fn service(&mut self, i: usize, removed: bool) -> Duration {
        let started = Instant::now();
        if removed {
            let id = self.lbs.remove(&i).expect("the Service was added");
            self.client.delete_load_balancer(id).await.expect("delete");
        } else {
            let lb = cluster_lb(floor_vip(i), self.backends(i));
            let id = self.client.create_load_balancer(&lb).await.expect("lb").id;
            self.lbs.insert(i, id);
        }
        started.elapsed()
    }
}

/// p50 and p99.
fn percentiles(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    (
        ms(times[times.len() / 2]),
        ms(times[times.len() * 99 / 100]),
    )
}

/// Which incremental sync a run of rounds times.
#[derive(Clone, Copy, PartialEq)]
enum Step {
    /// Round r adds a sixth endpoint to a Service, round r + 1 removes it.
    Endpoint,
    /// Round r adds a Service, round r + 1 removes it.
    Service,
}

/// p50/p99 of `rounds` syncs through the proxy and of the same changes straight to hnsd
/// (interleaved: each proxy sync beside the floor's calls for the same change, in turn first).
async fn incremental(
    n: &Node,
    services: usize,
    rounds: usize,
    step: Step,
    modify: bool,
) -> ((f64, f64), (f64, f64)) {
    let mut proxy = Proxy::connect(config(n)).await.expect("proxy");
    let mut floor = Floor::new(n, modify).await;
    let manifests = n.manifests();
    write_manifests(&manifests, services, Change::None);
    proxy
        .sync(&proxy::source::manifests::load(&manifests))
        .await;
    let (mut times, mut floors) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let i = (r / 2 * 7919) % services;
        let adding = r.is_multiple_of(2);
        let change = match (step, adding) {
            (_, false) => Change::None,
            (Step::Endpoint, true) => Change::ExtraEndpoint(i),
            (Step::Service, true) => Change::ExtraService,
        };
        write_manifests(&manifests, services, change);
        let snapshot = proxy::source::manifests::load(&manifests);
        // Every other pair of rounds the floor goes first: neither is always the first HNS
        // work after the manifests' parse.
        let floor_first = (r / 2) % 2 == 1;
        let floor_round = async |floor: &mut Floor| match (step, adding) {
            (Step::Endpoint, true) => floor.endpoint_added(i).await,
            (Step::Endpoint, false) => floor.endpoint_removed(i).await,
            (Step::Service, _) => floor.service(services, !adding).await,
        };
        if floor_first {
            floors.push(floor_round(&mut floor).await);
        }
        let started = Instant::now();
        let report = proxy.sync(&snapshot).await;
        times.push(started.elapsed());
        assert!(
            report.created + report.updated + report.deleted >= 1 && report.retry.is_empty(),
            "round {r}: {report:?}"
        );
        if !floor_first {
            floors.push(floor_round(&mut floor).await);
        }
    }
    (percentiles(times), percentiles(floors))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let sizes: Vec<usize> = std::env::var("PROXY_BENCH_SIZES")
        .unwrap_or_else(|_| "2000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    // Even: every added endpoint or Service is removed again, leaving the programmed state.
    let rounds = env_or("PROXY_BENCH_ROUNDS", 200usize).max(2) / 2 * 2;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let report = |what: &str, (p50, p99): (f64, f64), (f50, f99): (f64, f64), floor: &str| {
        println!(
            "{what}: p50 {p50:.2} ms, p99 {p99:.2} ms; floor ({floor}): p50 {f50:.2} ms, p99 {f99:.2} ms; p99 ratio {:.2}",
            p99 / f99
        );
    };
    rt.block_on(async {
        for &services in &sizes {
            let (took, n) = program(services, Profile::Ws2022).await;
            let floor = baseline(services).await;
            println!(
                "program {services} Services x 5 endpoints: {:.2} s through the proxy (manifests parsed, {} remote endpoints created); baseline {services} LB creates straight to hnsd: {:.2} s; ratio {:.2}",
                took.as_secs_f64(),
                REMOTE_PODS.min(services * 5),
                floor.as_secs_f64(),
                took.as_secs_f64() / floor.as_secs_f64()
            );
            if services != 2000 {
                continue;
            }
            let calls = "the same HNS calls straight to hnsd";
            let (sync, floor) = incremental(&n, services, rounds, Step::Endpoint, false).await;
            report(
                &format!("one endpoint change with {services} Services programmed (sync only, delete+create on ws2022)"),
                sync,
                floor,
                calls,
            );
            let (sync, floor) = incremental(&n, services, rounds, Step::Service, false).await;
            report(
                &format!("one Service added / removed with {services} Services programmed (sync only, ws2022)"),
                sync,
                floor,
                calls,
            );
            drop(n);
            let (_, u) = program(services, Profile::Unrestricted).await;
            let (sync, floor) = incremental(&u, services, rounds, Step::Endpoint, true).await;
            report(
                &format!("one endpoint change with {services} Services programmed (sync only, ModifyLoadBalancer on unrestricted)"),
                sync,
                floor,
                calls,
            );
        }
    });
}
