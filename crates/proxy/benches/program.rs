//! Programming Services into hnsd: N Services x 5 endpoints from a folder of manifests to every
//! load balancer in HNS, and the latency of one endpoint change. Baseline in the same run: the
//! same load balancers created straight through `hns_client::Client` with the same concurrency (the
//! floor any proxy pays to hnsd). Run: `cargo bench -p proxy --bench program`.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use hcn::{Endpoint, IpConfig, LoadBalancer, LoadBalancerPortMapping};
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

fn write_manifests(dir: &Path, services: usize, extra: Option<usize>) {
    let mut objects = Vec::new();
    for i in 0..services {
        let (name, ip) = (format!("svc-{i}"), vip(i).to_string());
        let mut eps: Vec<serde_json::Value> = backends(i)
            .iter()
            .map(|(ip, node)| ready(&ip.to_string(), node))
            .collect();
        if extra == Some(i) {
            eps.push(ready(&remote_ip(REMOTE_PODS + 1).to_string(), "win-3"));
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
    std::fs::write(dir.join("services.yaml"), yaml_stream(&objects)).expect("write manifests");
}

struct Node {
    hnsd: Hnsd,
}

impl Node {
    fn manifests(&self) -> PathBuf {
        self.hnsd.dir().join("manifests")
    }
}

async fn node() -> Node {
    let hnsd = Hnsd::start(Profile::Ws2022).await;
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
async fn program(services: usize) -> (Duration, Node) {
    let n = node().await;
    let manifests = n.manifests();
    std::fs::create_dir_all(&manifests).expect("dir");
    write_manifests(&manifests, services, None);
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
    let n = node().await;
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
                let lb = LoadBalancer {
                    host_compute_endpoints: backends,
                    frontend_vips: vec![vip(i)],
                    port_mappings: vec![LoadBalancerPortMapping {
                        protocol: 6,
                        internal_port: 8080,
                        external_port: 80,
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                c.create_load_balancer(&lb).await.expect("lb");
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
    started.elapsed()
}

/// p50/p99 of one endpoint added to (then removed from) one Service.
async fn one_change(n: &Node, services: usize, rounds: usize) -> (Duration, Duration) {
    let mut proxy = Proxy::connect(config(n)).await.expect("proxy");
    let manifests = n.manifests();
    proxy
        .sync(&proxy::source::manifests::load(&manifests))
        .await;
    let mut times = Vec::new();
    for r in 0..rounds {
        let changed = (r * 7919) % services;
        write_manifests(
            &manifests,
            services,
            if r.is_multiple_of(2) {
                Some(changed)
            } else {
                None
            },
        );
        let snapshot = proxy::source::manifests::load(&manifests);
        let started = Instant::now();
        let report = proxy.sync(&snapshot).await;
        times.push(started.elapsed());
        assert!(
            report.created + report.updated >= 1,
            "round {r}: {report:?}"
        );
    }
    times.sort();
    (times[times.len() / 2], times[times.len() * 99 / 100])
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        for services in [2000, 10000] {
            let (took, n) = program(services).await;
            let floor = baseline(services).await;
            println!(
                "program {services} Services x 5 endpoints: {:.2} s through the proxy (manifests parsed, {} remote endpoints created); baseline {services} LB creates straight to hnsd: {:.2} s; ratio {:.2}",
                took.as_secs_f64(),
                REMOTE_PODS.min(services * 5),
                floor.as_secs_f64(),
                took.as_secs_f64() / floor.as_secs_f64()
            );
            if services == 2000 {
                let (p50, p99) = one_change(&n, services, 200).await;
                println!(
                    "one endpoint change with {services} Services programmed (sync only, delete+create on ws2022): p50 {:.2} ms, p99 {:.2} ms",
                    p50.as_secs_f64() * 1e3,
                    p99.as_secs_f64() * 1e3
                );
            }
        }
    });
}
