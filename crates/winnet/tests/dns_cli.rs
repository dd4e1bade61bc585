//! `winnet dns`, the binary: flags, a manifest folder, answers to `dig`, `/metrics`, `/healthz`
//! and `/ready`, and clear errors for bad flags.

use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use testkit::http::get;

/// The running binary; killed when dropped.
struct Dns(Child);

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    let t = std::net::TcpListener::bind(u.local_addr().unwrap()).unwrap();
    t.local_addr().unwrap().port()
}

fn dig(port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .args(["@127.0.0.1", "-p", &port.to_string(), "+time=5", "+tries=1"])
        .args(args)
        .output()
        .expect("dig runs (Debian bind9-dnsutils)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `winnet dns` answering on 127.0.0.1:`port` (TTL 12, an upstream that does not answer),
/// serving its metrics on `metrics`, reading the manifests in `dir`.
fn spawn_dns(port: u16, metrics: SocketAddr, dir: &std::path::Path) -> Dns {
    Dns(Command::new(env!("CARGO_BIN_EXE_winnet"))
        .args([
            "dns",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--ttl",
            "12",
            "--upstream",
            "127.0.0.1:9",
        ])
        .args(["--metrics-addr", &metrics.to_string(), "--manifests"])
        .arg(dir)
        .stderr(Stdio::null())
        .spawn()
        .expect("winnet dns starts"))
}

#[test]
fn serves_manifests_to_dig_with_metrics_and_readiness() {
    let dir = tempfile::Builder::new()
        .prefix("wnt-dns-cli-")
        .tempdir()
        .unwrap();
    std::fs::write(
        dir.path().join("web.yaml"),
        "kind: Service\napiVersion: v1\nmetadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.20, ports: [{port: 80}]}\n",
    )
    .unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    let metrics: SocketAddr = format!("127.0.0.1:{metrics_port}").parse().unwrap();
    let _dns = spawn_dns(port, metrics, dir.path());
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(metrics, "/ready").is_none_or(|(s, _)| s != 200) {
        assert!(Instant::now() < deadline, "/ready never said 200");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = dig(port, &["web.default.svc.cluster.local", "A"]);
    assert!(
        out.contains("status: NOERROR") && out.contains("flags: qr aa rd ra"),
        "{out}"
    );
    assert!(
        out.contains("web.default.svc.cluster.local. 12 IN\tA\t10.96.0.20"),
        "{out}"
    );
    let out = dig(port, &["+tcp", "nope.default.svc.cluster.local", "A"]);
    assert!(out.contains("status: NXDOMAIN"), "{out}");
    assert_eq!(get(metrics, "/healthz").map(|(s, _)| s), Some(200));
    let (_, text) = get(metrics, "/metrics").unwrap();
    assert!(
        text.contains("winnet_dns_queries_total{qtype=\"A\",rcode=\"NOERROR\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("winnet_dns_queries_total{qtype=\"A\",rcode=\"NXDOMAIN\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("winnet_dns_request_duration_seconds_count 2"),
        "{text}"
    );
    assert!(text.contains("winnet_dns_cache_misses_total 0"), "{text}");
}

#[test]
fn bad_flags_are_named() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_winnet"))
            .arg("dns")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&[
        "--manifests",
        "/nonexistent",
        "--upstream",
        "not-an-address",
    ]);
    assert!(err.contains("--upstream not-an-address"), "{err}");
    let err = run(&["--listen", "127.0.0.1:0"]);
    assert!(
        err.contains("--kubeconfig FILE or --manifests DIR"),
        "{err}"
    );
    let err = run(&[
        "--manifests",
        "/nonexistent",
        "--zone",
        "bad..zone",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1",
    ]);
    assert!(err.contains("--zone"), "{err}");
}

#[test]
fn a_missing_manifest_folder_is_not_ready_and_answers_servfail() {
    let (port, metrics) = (free_port(), testkit::http::free_addr());
    let _dns = spawn_dns(
        port,
        metrics,
        std::path::Path::new("/nonexistent/wnt-dns-cli"),
    );
    let text = testkit::wait::until(
        "winnet dns to serve its metrics",
        Duration::from_secs(20),
        || get(metrics, "/metrics").map(|(_, text)| text),
    );
    assert_eq!(get(metrics, "/ready").map(|(s, _)| s), Some(503));
    // SERVFAIL, which clients retry, not NXDOMAIN, which they cache.
    let out = dig(port, &["web.default.svc.cluster.local", "A"]);
    assert!(out.contains("status: SERVFAIL"), "{out}");
    assert!(text.contains("winnet_dns_source_errors 1"), "{text}");
}
