//! What the pod's DNS client costs: `dnsperf` in a pod namespace asking the stub (127.0.0.53,
//! Windows rules, a single label answered as CNAME + A; a dotted name relayed NXDOMAIN) against
//! the same `dnsperf` asking the DNS server (knotd) directly for the fully qualified name, in the
//! same run. Needs root, knotd and dnsperf (Debian packages knot, dnsperf). Everything made is
//! removed at the end.
//!
//! `cargo bench -p dnsclient --bench stub` (seconds per run from `DNS_BENCH_SECONDS`, default 3; three
//! alternating runs of each side, the median reported).

#[path = "../tests/common/knot.rs"]
mod knot;

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::Command;

use dnsclient::stub::{Stub, StubConfig};
use dnsclient::upstream::Schedule;
use dnsclient::{AskedName, Rules};
use host::netns::Netns;
use knot::{Knot, ROOT_ZONE, cluster_zone};

/// The bench's namespace and its files, removed on drop.
struct Pod {
    name: String,
    netns: Netns,
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.netns.delete();
    }
}

/// dnsperf's queries per second and average latency (ms) for `queries` sent to `server`.
fn dnsperf(pod: &str, server: &str, queries: &str, seconds: &str) -> (f64, f64) {
    let mut file = tempfile::NamedTempFile::new().expect("query file");
    file.write_all(queries.as_bytes()).expect("write queries");
    let out = Command::new("ip")
        .args(["netns", "exec", pod, "dnsperf", "-s", server, "-l", seconds])
        .args(["-c", "4", "-q", "64", "-d"])
        .arg(file.path())
        .output()
        .expect("run dnsperf (Debian package dnsperf)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |label: &str| -> f64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("dnsperf printed no {label:?}:\n{text}"))
    };
    (
        field("Queries per second:"),
        field("Average Latency (s):") * 1000.0,
    )
}

/// Runs of each side per row.
const ROUNDS: usize = 3;

/// The run with the median queries per second.
fn median(mut runs: Vec<(f64, f64)>) -> (f64, f64) {
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs[runs.len() / 2]
}

fn main() {
    testkit::require_root("the bench makes a namespace");
    let seconds = std::env::var("DNS_BENCH_SECONDS").unwrap_or_else(|_| "3".into());
    let name = format!("wnt-dns-bench-{}", std::process::id());
    let _ = Netns::named(&name).delete();
    let pod = Pod {
        netns: Netns::create(&name).expect("namespace"),
        name,
    };
    let server: SocketAddr = "127.0.0.2:53".parse().expect("addr");
    let zone = cluster_zone("10.244.1.20");
    let _knot = Knot::start(
        &pod.name,
        server,
        &[("cluster.local", &zone), (".", ROOT_ZONE)],
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _stub = Stub::start(
        StubConfig {
            netns: pod.netns.clone(),
            rules: Rules::Windows {
                suffixes: vec![AskedName::parse("default.svc.cluster.local").expect("suffix")],
                honoured: 1,
                profile: "ws2022".into(),
            },
            servers: vec![server],
            schedule: Schedule::windows(),
        },
        rt.handle(),
    )
    .expect("stub");
    let rows = [
        (
            "hit: `web` via the stub vs `web.default.svc.cluster.local` direct",
            "web A\n",
            "web.default.svc.cluster.local A\n",
        ),
        (
            "miss: `web-0.web` (NXDOMAIN) via the stub vs direct",
            "web-0.web A\n",
            "web-0.web A\n",
        ),
    ];
    println!("| what | via the stub | knotd direct (same run) | ratio |");
    println!("|---|---|---|---|");
    for (what, via, direct) in rows {
        // Alternating runs, the median of each: the machine is shared and its load moves.
        let (mut d, mut s) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            d.push(dnsperf(&pod.name, "127.0.0.2", direct, &seconds));
            s.push(dnsperf(&pod.name, "127.0.0.53", via, &seconds));
        }
        let ((d_qps, d_ms), (s_qps, s_ms)) = (median(d), median(s));
        println!(
            "| {what} | {s_qps:.0} q/s, {s_ms:.2} ms avg | {d_qps:.0} q/s, {d_ms:.2} ms avg | {:.2} |",
            s_qps / d_qps
        );
    }
}
