//! The backend limit per load balancer (issue 15), as users meet it: a Windows node as a
//! network namespace with `winnet hnsd --node-netns` under a profile, the real `winnet proxy`
//! on a folder of manifests, and a Service with more backends than the build's HNS takes. Under
//! ws2019 and ws2022 a Service with 65 backends is refused — HNS's own error in the proxy's log,
//! the failure counted in its metrics, no load balancer, the ClusterIP unanswered — and served
//! under ws2025, which refuses 1,025; `unrestricted` serves 1,025. The backends are addresses of
//! the external host (remote endpoints, as pods on other nodes would be), which answers HTTP on
//! all of them, so a served ClusterIP answers a pod's curl whichever backend HNS picks.
//! Root only (CI is root).

mod lab;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lab::cluster::{Cluster, Mode, node_ip};
use lab::ok;
use serde_json::Value;
use testkit::kube::{cluster_ip, endpoint_slice, http_port, ready, yaml_stream};
use testkit::wait::until;

/// The Service's ClusterIP and port.
const VIP: &str = "10.96.0.100";
/// The prefix the external host answers on (on its loopback), where the backends are.
const BACKENDS: &str = "10.201.0.0/16";
/// The port the backends serve.
const TARGET: u16 = 8080;
/// How long the proxy may take to program (or be refused) a Service of 1,025 backends.
const WAIT: Duration = Duration::from_secs(60);
/// The EndpointSlice controller's default maxEndpointsPerSlice.
const PER_SLICE: usize = 100;

/// The proxy process; killed and reaped when dropped, so a failing test leaves nothing.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Backend `k`: 10.201.<k / 250>.<k % 250 + 1>, all on the external host.
fn backend(k: usize) -> String {
    format!("10.201.{}.{}", k / 250, k % 250 + 1)
}

/// Service `big` and its EndpointSlices over `n` ready backends on node `win-2`.
fn big_service(n: usize) -> Vec<Value> {
    let mut objects = vec![cluster_ip("big", VIP, 80, TARGET)];
    let addresses: Vec<String> = (0..n).map(backend).collect();
    for (i, chunk) in addresses.chunks(PER_SLICE).enumerate() {
        let endpoints = chunk.iter().map(|ip| ready(ip, "win-2")).collect();
        objects.push(endpoint_slice(
            &format!("big-{i}"),
            "big",
            "IPv4",
            http_port(TARGET),
            endpoints,
        ));
    }
    objects
}

fn write(manifests: &Path, n: usize) {
    std::fs::write(manifests.join("big.yaml"), yaml_stream(&big_service(n))).expect("manifest");
}

/// The node with the proxy on its manifests, a client pod, and the external host serving
/// HTTP on every backend address.
struct Node {
    c: Cluster,
    client: String,
    manifests: tempfile::TempDir,
    log: std::path::PathBuf,
    _proxy: Proc,
}

impl Node {
    /// `tag` keeps the namespaces of tests running at the same time apart.
    fn start(tag: &str, profile: &str, backends: usize) -> Node {
        let mut c = Cluster::new(tag, 1, Mode::L2Bridge, profile);
        let client = c.pod(0, "client", 10);
        ok(&[
            "ip",
            "-n",
            &c.external,
            "addr",
            "add",
            BACKENDS,
            "dev",
            "lo",
        ]);
        c.lab.http_server(&c.external, TARGET);
        let manifests = tempfile::tempdir().expect("manifests dir");
        write(manifests.path(), backends);
        let log = manifests.path().join("proxy.log");
        let node = c.node_ns(0);
        let socket = c.lab.hnsds[0].socket().to_path_buf();
        let proxy = Command::new("ip")
            .args([
                "netns",
                "exec",
                &node,
                env!("CARGO_BIN_EXE_winnet"),
                "proxy",
            ])
            .args(["--network-name", "cbr0", "--hostname-override", "win-1"])
            .args(["--bind-address", &node_ip(0)])
            .arg("--manifests")
            .arg(manifests.path())
            .arg("--hns-socket")
            .arg(&socket)
            .args(["--metrics-bind-address", "127.0.0.1:10249"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("proxy log"))
            .spawn()
            .expect("winnet proxy");
        Node {
            c,
            client,
            log: log.clone(),
            manifests,
            _proxy: Proc(proxy),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The proxy's /metrics, read inside the node.
    fn metrics(&self) -> Result<String, String> {
        let out = self.c.lab.exec(
            &self.c.node_ns(0),
            &[
                "curl",
                "-sS",
                "--max-time",
                "2",
                "http://127.0.0.1:10249/metrics",
            ],
        );
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// A metric's value, 0 when it is not there yet.
    fn metric(&self, name: &str) -> Result<f64, String> {
        let text = self.metrics()?;
        Ok(text
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or(0.0))
    }

    /// The backends of the ClusterIP's load balancer in HNS, if there is one.
    fn lb_backends(&self) -> Option<usize> {
        let lbs = self
            .c
            .rt
            .block_on(self.c.client(0).list_load_balancers())
            .ok()?;
        lbs.iter()
            .find(|lb| lb.frontend_vips.iter().any(|v| v.to_string() == VIP))
            .map(|lb| lb.host_compute_endpoints.len())
    }

    /// Whether the pod's curl to the ClusterIP is answered.
    fn curl_vip(&self) -> Result<String, String> {
        self.c.lab.curl(&self.client, &format!("http://{VIP}/"))
    }

    /// The Service is programmed with `n` backends and answers from the pod.
    fn served(&self, profile: &str, n: usize) {
        let got = until(
            &format!("{profile}: the load balancer with {n} backends"),
            WAIT,
            || match self.lb_backends() {
                Some(k) if k == n => Ok(k),
                other => Err(format!("{other:?}; proxy log:\n{}", self.log())),
            },
        );
        assert_eq!(got, n);
        let body = self
            .curl_vip()
            .unwrap_or_else(|e| panic!("{profile}: {n} backends served, but {e}"));
        // The backend (the external host) saw the node: OutBoundNAT translated the pod, as for
        // any destination outside the cluster.
        let node: std::net::IpAddr = node_ip(0).parse().expect("the node's address");
        assert_eq!(lab::seen_from(&body), Some(node), "{body}");
        let pending = until("the sync's metrics", WAIT, || {
            self.metric("winnet_proxy_syncs_total")
                .and_then(|s| {
                    if s > 0.0 {
                        Ok(())
                    } else {
                        Err("no sync".into())
                    }
                })
                .and_then(|()| self.metric("winnet_proxy_services_pending"))
        });
        assert_eq!(pending, 0.0, "{profile}: nothing pending with {n} backends");
    }

    /// HNS refuses the Service's load balancer of `n` backends, the proxy logs HNS's error and
    /// counts it, and the ClusterIP does not answer.
    fn refused(&self, profile: &str, n: usize, limit: usize) {
        let hns_error =
            format!("HostComputeEndpoints has {n}; profile {profile} allows 1 to {limit}");
        until(
            &format!("{profile}: HNS's refusal of {n} backends in the proxy's log"),
            WAIT,
            || {
                let log = self.log();
                (log.contains("invalid number of destinations") && log.contains(&hns_error))
                    .then_some(())
                    .ok_or(log)
            },
        );
        let failures = until("the refusal counted in the metrics", WAIT, || {
            match self.metric("winnet_proxy_hns_call_failures_total") {
                Ok(v) if v >= 1.0 => Ok(v),
                other => Err(format!("{other:?}")),
            }
        });
        assert!(failures >= 1.0);
        assert_eq!(
            self.metric("winnet_proxy_services_pending"),
            Ok(1.0),
            "{profile}: the Service waits for a retry"
        );
        assert_eq!(self.lb_backends(), None, "{profile}: no load balancer");
        assert!(
            self.curl_vip().is_err(),
            "{profile}: the ClusterIP of a refused Service answers"
        );
    }
}

#[test]
fn sixty_five_backends_are_refused_by_ws2019_and_ws2022_with_hns_error_in_log_and_metrics() {
    for profile in ["ws2019", "ws2022"] {
        let node = Node::start("bla", profile, 65);
        node.refused(profile, 65, 64);
        // 64 is the most these builds take: the same Service with one backend fewer is served.
        write(node.manifests.path(), 64);
        node.served(profile, 64);
    }
}

#[test]
fn ws2025_serves_sixty_five_backends_and_refuses_1025() {
    let node = Node::start("blb", "ws2025", 65);
    node.served("ws2025", 65);
    write(node.manifests.path(), 1025);
    node.refused("ws2025", 1025, 1024);
}

#[test]
fn unrestricted_serves_1025_backends() {
    let node = Node::start("blc", "unrestricted", 1025);
    node.served("unrestricted", 1025);
}
