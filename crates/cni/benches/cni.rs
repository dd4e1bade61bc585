//! ADD and DEL latency, as a runtime sees it (process start to exit): win-bridge (the winnet
//! binary linked as win-bridge, `winnet hnsd` as a separate process) with Debian's host-local,
//! and in the same run Debian's `bridge` plugin with host-local in a real network namespace,
//! plus host-local alone (the floor every plugin using it pays).
//!
//! Built as a bench of crates/winnet (which owns the binary); run as root:
//! `cargo bench -p winnet --bench cni` (`CNI_BENCH_N` iterations, default 300).

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEBIAN_CNI: &str = "/usr/lib/cni";
const HOST_NS: &str = "winnet-cnibench-host";
const POD_NS: &str = "winnet-cnibench-pod";

struct Scratch {
    dir: tempfile::TempDir,
    hnsd: Option<Child>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(mut h) = self.hnsd.take() {
            let _ = h.kill();
            let _ = h.wait();
        }
        for ns in [POD_NS, HOST_NS] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn run(path: &Path, env: &[(&str, &str)], stdin: &str) -> (Duration, String) {
    let start = Instant::now();
    let mut child = Command::new(path)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} failed: {text} {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    (took, text)
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let at = |q: f64| {
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        v[i].as_secs_f64() * 1000.0
    };
    (at(0.50), at(0.99))
}

/// `n` ADDs each followed by its DEL, pod IDs distinct, one namespace: the ADD and DEL times.
fn add_del(
    n: usize,
    plugin: &Path,
    env: &[(&str, &str)],
    netns: &str,
    conf: &str,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut adds, mut dels) = (Vec::new(), Vec::new());
    for i in 0..n {
        let id = format!("bench{i}");
        let mut e: Vec<(&str, &str)> = env.to_vec();
        e.extend([
            ("CNI_CONTAINERID", id.as_str()),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
        ]);
        let mut add = e.clone();
        add.push(("CNI_COMMAND", "ADD"));
        adds.push(run(plugin, &add, conf).0);
        let mut del = e.clone();
        del.push(("CNI_COMMAND", "DEL"));
        dels.push(run(plugin, &del, conf).0);
    }
    (adds, dels)
}

fn main() {
    let n: usize = std::env::var("CNI_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let winnet = PathBuf::from(env!("CARGO_BIN_EXE_winnet"));
    let mut s = Scratch {
        dir: tempfile::tempdir().unwrap(),
        hnsd: None,
    };
    let d = s.dir.path().to_path_buf();

    // winnet: hnsd as its own process, the plugins installed as links.
    let socket = d.join("hns.sock");
    s.hnsd = Some(
        Command::new(&winnet)
            .args(["hnsd", "--state-dir"])
            .arg(d.join("hnsd"))
            .arg("--socket")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start winnet hnsd"),
    );
    for _ in 0..500 {
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let bin = d.join("bin");
    let ok = Command::new(&winnet)
        .arg("install-cni")
        .arg(&bin)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success(), "install-cni");
    std::fs::write(
        d.join("net.json"),
        r#"{"Name":"cbr0","Type":"L2Bridge","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.244.0.0/16","Routes":[{"NextHop":"10.244.0.1","DestinationPrefix":"0.0.0.0/0"}]}]}]}"#,
    )
    .unwrap();
    let ok = Command::new(&winnet)
        .args(["hns", "create", "networks", "-f"])
        .arg(d.join("net.json"))
        .env("HNS_SOCKET", &socket)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success(), "create network");

    // Real namespaces for bridge: a scratch "host" holding the Linux bridge, and a pod.
    for ns in [HOST_NS, POD_NS] {
        let _ = Command::new("ip")
            .args(["netns", "del", ns])
            .stderr(Stdio::null())
            .status();
        let ok = Command::new("ip")
            .args(["netns", "add", ns])
            .status()
            .expect("ip netns add");
        assert!(ok.success(), "ip netns add {ns} (the bench needs root)");
    }
    let host = std::fs::File::open(format!("/var/run/netns/{HOST_NS}")).expect("open host netns");
    // SAFETY: `host` is an open netns file descriptor for the duration of the call; setns only
    // switches this (main) thread's network namespace, from which the plugins are spawned.
    let rc = unsafe { libc::setns(host.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(
        rc,
        0,
        "setns into {HOST_NS}: {}",
        std::io::Error::last_os_error()
    );

    let ipam = |sub: &str, dir: &str| {
        format!(
            r#"{{"type":"host-local","ranges":[[{{"subnet":"{sub}","rangeStart":"{}"}}]],"dataDir":"{}"}}"#,
            sub.replace(".0/16", ".10").replace(".0/24", ".10"),
            d.join(dir).display()
        )
    };
    let path = format!("{}:{DEBIAN_CNI}", bin.display());
    let sock = socket.to_string_lossy().into_owned();
    let state = d.join("state").to_string_lossy().into_owned();
    let env: Vec<(&str, &str)> = vec![
        ("CNI_PATH", &path),
        ("HNS_SOCKET", &sock),
        ("WINNET_CNI_STATE_DIR", &state),
    ];

    let pod_file = d.join("pod-netns");
    std::fs::write(&pod_file, b"").unwrap();
    let pod_path = format!("/var/run/netns/{POD_NS}");

    let win_conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"cbr0","type":"win-bridge","apiVersion":2,"ipMasqNetwork":"10.244.0.0/16","policies":[{{"name":"EndpointPolicy","value":{{"Type":"OutBoundNAT","Settings":{{"Exceptions":["10.96.0.0/12"]}}}}}}],"ipam":{}}}"#,
        ipam("10.244.1.0/24", "ipam-win")
    );
    let bridge_conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"benchbr","type":"bridge","bridge":"cnibench0","isGateway":true,"ipMasq":false,"ipam":{}}}"#,
        ipam("10.250.0.0/24", "ipam-br")
    );
    let hl_conf = format!(
        r#"{{"cniVersion":"1.0.0","name":"hl","ipam":{}}}"#,
        ipam("10.251.0.0/24", "ipam-hl")
    );

    // Warm up each (page cache, first connection), then measure, interleaved in rounds so a
    // noisy moment hits all three alike.
    let win = bin.join("win-bridge");
    let bridge = Path::new(DEBIAN_CNI).join("bridge");
    let host_local = Path::new(DEBIAN_CNI).join("host-local");
    add_del(5, &win, &env, &pod_path, &win_conf);
    add_del(5, &bridge, &env, &pod_path, &bridge_conf);
    add_del(5, &host_local, &env, &pod_path, &hl_conf);
    let (mut w, mut b, mut h) = ((vec![], vec![]), (vec![], vec![]), (vec![], vec![]));
    let rounds = 10;
    for _ in 0..rounds {
        let (a, d) = add_del(
            n / rounds,
            &win,
            &env,
            &pod_file.to_string_lossy(),
            &win_conf,
        );
        w.0.extend(a);
        w.1.extend(d);
        let (a, d) = add_del(n / rounds, &bridge, &env, &pod_path, &bridge_conf);
        b.0.extend(a);
        b.1.extend(d);
        let (a, d) = add_del(n / rounds, &host_local, &env, &pod_path, &hl_conf);
        h.0.extend(a);
        h.1.extend(d);
    }
    println!(
        "CNI ADD/DEL latency, process start to exit, {} calls each (ms):",
        w.0.len()
    );
    println!("| plugin | ADD p50 | ADD p99 | DEL p50 | DEL p99 |");
    println!("|---|---:|---:|---:|---:|");
    for (name, (adds, dels)) in [
        (
            "win-bridge + host-local (winnet, hnsd process; no TAP yet)",
            w,
        ),
        (
            "bridge + host-local (Debian, real netns, veth + Linux bridge)",
            b,
        ),
        ("host-local alone (Debian)", h),
    ] {
        let (a50, a99) = percentiles(adds);
        let (d50, d99) = percentiles(dels);
        println!("| {name} | {a50:.2} | {a99:.2} | {d50:.2} | {d99:.2} |");
    }
}
