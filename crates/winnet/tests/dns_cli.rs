//! `winnet dns`, the binary: flags, a manifest folder, answers to `dig`, `/metrics`, `/healthz`
//! and `/ready`, and clear errors for bad flags.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, out))
}

fn dig(port: u16, args: &[&str]) -> String {
    let out = Command::new("dig")
        .args(["@127.0.0.1", "-p", &port.to_string(), "+time=5", "+tries=1"])
        .args(args)
        .output()
        .expect("dig runs (Debian bind9-dnsutils)");
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    let _dns = Dns(Command::new(env!("CARGO_BIN_EXE_winnet"))
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
        .arg(dir.path())
        .stderr(Stdio::null())
        .spawn()
        .expect("winnet dns starts"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while http_get(metrics, "/ready").is_none_or(|(s, _)| s != 200) {
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
    assert_eq!(http_get(metrics, "/healthz").map(|(s, _)| s), Some(200));
    let (_, text) = http_get(metrics, "/metrics").unwrap();
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
