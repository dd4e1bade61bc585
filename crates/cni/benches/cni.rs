//! ADD and DEL latency, as a runtime sees it (process start to exit), of three plugins measured
//! in the same run, interleaved in rounds so that a noisy moment hits all alike:
//!
//! - win-bridge: the winnet binary linked as win-bridge, with Debian's host-local, against
//!   `winnet hnsd --node-netns` as a separate process (profile ws2022). The node is a network
//!   namespace with a NIC `eth0` (a veth whose peer stays inside), an address and a default
//!   route, as in the end-to-end tests (crates/cni/tests/common/mod.rs); creating the L2Bridge
//!   network makes hnsd take the NIC over. An ADD therefore includes hnsd making the pod's TAP
//!   `eth0` in the pod's namespace (MAC, address, default route, MTU) before the attach returns;
//!   a DEL includes removing it.
//! - Debian's `bridge` with host-local: a veth into the pod's namespace and a Linux bridge in a
//!   scratch "host" namespace.
//! - Debian's host-local alone: the floor both pay.
//! - For reference, win-bridge against a second hnsd without a data plane (no `--node-netns`):
//!   the HNS calls without devices, so the difference to the first row is what making and
//!   removing the TAP costs. Its CNI_NETNS is an HCN namespace by ID, made once (as containerd
//!   on Windows passes one): a netns path would need the pod's vNIC, which only a data plane
//!   makes, and the first row's ADD also creates the pod's HCN namespace.
//!
//! Pod namespaces: by default each win-bridge and bridge iteration gets a fresh one, made with
//! `ip netns add` before the timed ADD and removed after the DEL, outside the timed region (as a
//! runtime makes one per pod sandbox). `CNI_BENCH_NETNS=reuse` keeps one per plugin for the whole
//! run instead, to see what the kernel's asynchronous teardown of the old namespaces costs the
//! next ADD. Each ADD is checked (outside the timed region) to have left `eth0` with its address
//! in the pod's namespace, and each DEL to have removed it.
//!
//! Everything the bench makes (namespaces, hnsd) is removed when it ends, also when it fails or
//! is interrupted (SIGINT, SIGTERM); hnsd is also told to stop if the bench dies outright, and a
//! run first removes namespaces an earlier, killed run left behind.
//!
//! - With `CNI_BENCH_SERVICES=N` (N > 0): win-bridge against a third hnsd with a data plane, on
//!   a second node namespace made the same way, holding N ClusterIP load balancers over
//!   `min(5 N, 5000)` remote endpoints (as kube-proxy programs 2,000 Services x 5 endpoints):
//!   the pod's endpoint added by the CNI on a node with Services programmed, against the first
//!   row (none programmed) in the same rounds.
//!
//! Built as a bench of crates/winnet (which owns the binary); run as root:
//! `CNI_BENCH_N=300 cargo bench -p winnet --bench cni` (`CNI_BENCH_N` iterations, default 300).

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use testkit::hnsd::{HnsdCommand, HnsdProcess};

const DEBIAN_CNI: &str = "/usr/lib/cni";
/// Every namespace the bench makes has this prefix, so a later run can sweep up a killed one's.
const PREFIX: &str = "winnet-cnibench-";
const NODE_NS: &str = "winnet-cnibench-node";
/// The node whose hnsd holds the Services' load balancers (`CNI_BENCH_SERVICES`).
const LOADED_NS: &str = "winnet-cnibench-loaded";
const HOST_NS: &str = "winnet-cnibench-host";
const RUN_NETNS: &str = "/run/netns";
/// The HCN namespace of the reference row's pods.
const BARE_NS: &str = "5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D";

/// Set by SIGINT or SIGTERM; the loops then stop by panicking, which unwinds into the cleanup.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// What the bench has made; dropped (also on a panic), it removes all of it.
struct Scratch {
    dir: tempfile::TempDir,
    hnsd: Vec<HnsdProcess>,
    namespaces: Vec<String>,
}

impl Scratch {
    /// Makes namespace `name` with `ip netns add` (removing a leftover first); its path.
    fn netns(&mut self, name: &str) -> String {
        remove_netns(name);
        self.namespaces.push(name.to_string());
        ip(&["netns", "add", name]);
        format!("{RUN_NETNS}/{name}")
    }

    /// Removes namespace `name`, which this bench made.
    fn drop_netns(&mut self, name: &str) {
        remove_netns(name);
        self.namespaces.retain(|n| n != name);
    }

    /// What the hnsd called `name` logged.
    fn hnsd_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Dropped, each hnsd is killed and reaped.
        self.hnsd.clear();
        for ns in std::mem::take(&mut self.namespaces).iter().rev() {
            remove_netns(ns);
        }
    }
}

fn remove_netns(name: &str) {
    let _ = Command::new("ip")
        .args(["netns", "del", name])
        .stderr(Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(name));
}

/// Runs `ip ARGS`, which must succeed.
fn ip(args: &[&str]) {
    testkit::cmd::ok(Command::new("ip").args(args));
}

/// The addresses on `eth0` in namespace `ns` (`ip -br addr`), `None` when there is no `eth0`.
fn eth0_in(ns: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["-n", ns, "-br", "addr", "show", "dev", "eth0"])
        .stderr(Stdio::null())
        .output()
        .expect("run ip");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a plugin as a runtime does; how long it took from spawn to exit, and its stdout.
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
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write the config");
    let out = child.wait_with_output().expect("plugin exits");
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

/// One plugin under test.
struct Plugin {
    path: PathBuf,
    conf: String,
    /// Environment beyond `CNI_*` (which hnsd, where its records go).
    env: Vec<(&'static str, String)>,
    /// Where its pods live: `None` for host-local alone, which never enters a namespace.
    pods: Option<PodNetns>,
}

/// How a plugin's pods get their namespace.
enum PodNetns {
    /// A fresh `ip netns add` per iteration with this name prefix.
    Fresh(String),
    /// One namespace for the whole run.
    Reuse(String),
    /// An HCN namespace by ID, for the whole run: no Linux namespace, no vNIC.
    Hcn(&'static str),
}

#[derive(Default)]
struct Times {
    adds: Vec<Duration>,
    dels: Vec<Duration>,
}

/// `n` ADDs, each followed by its DEL, pod IDs distinct; the pod's namespace is made and removed
/// around each pair (untimed) when the plugin's pods are `Fresh`.
fn add_del(s: &mut Scratch, n: usize, p: &Plugin, env: &[(&str, &str)], times: &mut Times) {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    for _ in 0..n {
        assert!(
            !INTERRUPTED.load(Ordering::SeqCst),
            "interrupted; cleaning up"
        );
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let id = format!("bench{seq}");
        let ns = match &p.pods {
            Some(PodNetns::Fresh(prefix)) => Some(format!("{prefix}{seq}")),
            Some(PodNetns::Reuse(name)) => Some(name.clone()),
            Some(PodNetns::Hcn(_)) | None => None,
        };
        let netns = match (&p.pods, &ns) {
            (Some(PodNetns::Fresh(_)), Some(name)) => s.netns(name),
            (_, Some(name)) => format!("{RUN_NETNS}/{name}"),
            (Some(PodNetns::Hcn(id)), None) => id.to_string(),
            // host-local never enters it.
            _ => format!("{RUN_NETNS}/{HOST_NS}"),
        };
        let mut e: Vec<(&str, &str)> = env.to_vec();
        e.extend(p.env.iter().map(|(k, v)| (*k, v.as_str())));
        e.extend([
            ("CNI_CONTAINERID", id.as_str()),
            ("CNI_NETNS", netns.as_str()),
            ("CNI_IFNAME", "eth0"),
        ]);
        let mut add = e.clone();
        add.push(("CNI_COMMAND", "ADD"));
        let (took, out) = run(&p.path, &add, &p.conf);
        times.adds.push(took);
        if let Some(name) = &ns {
            let result: serde_json::Value = serde_json::from_str(&out).expect("ADD prints JSON");
            // The address only: win-bridge reports the HNS subnet's prefix length, as upstream
            // does, while the TAP has the endpoint's (host-local's range).
            let addr = result["ips"][0]["address"].as_str().unwrap_or_default();
            let addr = addr.split('/').next().unwrap_or_default();
            let have = eth0_in(name).unwrap_or_default();
            assert!(
                !addr.is_empty() && have.contains(&format!(" {addr}/")),
                "after the ADD of {id}, eth0 in {name} should hold {addr}; it is: {have:?}\n{}",
                s.hnsd_log("hnsd")
            );
        }
        let mut del = e;
        del.push(("CNI_COMMAND", "DEL"));
        times.dels.push(run(&p.path, &del, &p.conf).0);
        if let Some(name) = &ns {
            let left = eth0_in(name);
            assert!(
                left.is_none(),
                "after the DEL of {id}, {name} still has eth0: {left:?}"
            );
            if matches!(p.pods, Some(PodNetns::Fresh(_))) {
                s.drop_netns(name);
            }
        }
    }
}

/// A node namespace `node` with a NIC, as the end-to-end tests make it.
fn make_node(s: &mut Scratch, node: &str) {
    s.netns(node);
    ip(&["-n", node, "link", "set", "lo", "up"]);
    ip(&[
        "-n", node, "link", "add", "eth0", "type", "veth", "peer", "name", "wire0",
    ]);
    ip(&["-n", node, "addr", "add", "192.168.99.11/24", "dev", "eth0"]);
    ip(&["-n", node, "link", "set", "eth0", "up"]);
    ip(&["-n", node, "link", "set", "wire0", "up"]);
    ip(&["-n", node, "route", "add", "default", "via", "192.168.99.1"]);
}

/// `winnet hnsd` called `name` (its state, socket and log in the scratch dir), serving `node`
/// with its data plane, or objects only when `None`; returns its socket once it answers.
fn start_hnsd(s: &mut Scratch, winnet: &Path, name: &str, node: Option<&str>) -> PathBuf {
    let d = s.dir.path();
    let mut cmd = HnsdCommand::new(winnet, d)
        // The profile the figures of docs/benchmarks/cni.md were measured under.
        .profile("ws2022")
        .state_dir(d.join(name))
        .socket(d.join(format!("{name}.sock")))
        .log(d.join(format!("{name}.log")))
        .log_level("warn")
        // hnsd stops (and lets go of its TAPs) if the bench dies without cleaning up.
        .die_with_parent();
    if let Some(node) = node {
        cmd = cmd.node(node, "eth0");
    }
    let hnsd = cmd.start();
    let socket = hnsd.socket().to_path_buf();
    s.hnsd.push(hnsd);
    socket
}

/// `winnet hns create KIND` of `doc` in the hnsd called `name`.
fn hns_create(s: &Scratch, winnet: &Path, name: &str, socket: &Path, kind: &str, doc: &str) {
    let file = s.dir.path().join(format!("{kind}.json"));
    std::fs::write(&file, doc).expect("write the document");
    let ok = Command::new(winnet)
        .args(["hns", "create", kind, "-f"])
        .arg(&file)
        .env("HNS_SOCKET", socket)
        .stdout(Stdio::null())
        .status()
        .expect("run winnet hns");
    assert!(ok.success(), "create {kind}:\n{}", s.hnsd_log(name));
}

/// The L2Bridge network win-bridge's config names, in the hnsd called `name`; one with a data
/// plane (on `node`) takes the node's NIC over for it.
fn create_network(s: &Scratch, winnet: &Path, name: &str, socket: &Path, node: Option<&str>) {
    hns_create(
        s,
        winnet,
        name,
        socket,
        "networks",
        r#"{"Name":"cbr0","Type":"L2Bridge","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.244.0.0/16","Routes":[{"NextHop":"10.244.0.1","DestinationPrefix":"0.0.0.0/0"}]}]}]}"#,
    );
    let Some(node) = node else {
        return;
    };
    let mgmt = Command::new("ip")
        .args(["-n", node, "link", "show", "vEthernet-eth0"])
        .stdout(Stdio::null())
        .status()
        .expect("run ip");
    assert!(
        mgmt.success(),
        "hnsd did not take eth0 over (no vEthernet-eth0):\n{}",
        s.hnsd_log(name)
    );
}

/// The HCN namespace (`ID`, type Guest) the pods of the hnsd called `name` are added to.
fn create_namespace(s: &Scratch, winnet: &Path, name: &str, socket: &Path, id: &str) {
    let doc = format!(r#"{{"ID":"{id}","Type":"Guest"}}"#);
    hns_create(s, winnet, name, socket, "namespaces", &doc);
}

/// Leftovers of a killed run.
fn sweep() {
    for entry in std::fs::read_dir(RUN_NETNS).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(PREFIX) {
            eprintln!("removing {name}, left by an earlier run");
            remove_netns(&name);
        }
    }
}

fn main() {
    let n: usize = std::env::var("CNI_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let reuse = std::env::var("CNI_BENCH_NETNS").is_ok_and(|v| v == "reuse");
    let winnet = PathBuf::from(env!("CARGO_BIN_EXE_winnet"));
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
    sweep();
    let mut s = Scratch {
        dir: tempfile::tempdir().expect("temp dir"),
        hnsd: Vec::new(),
        namespaces: Vec::new(),
    };
    let d = s.dir.path().to_path_buf();

    // The node and its hnsd, a second hnsd without a data plane for reference; the plugins
    // installed as links to the winnet binary.
    make_node(&mut s, NODE_NS);
    let socket = start_hnsd(&mut s, &winnet, "hnsd", Some(NODE_NS));
    let bare_socket = start_hnsd(&mut s, &winnet, "hnsd-bare", None);
    let bin = d.join("bin");
    testkit::cmd::ok(Command::new(&winnet).arg("install-cni").arg(&bin));
    create_network(&s, &winnet, "hnsd", &socket, Some(NODE_NS));
    create_network(&s, &winnet, "hnsd-bare", &bare_socket, None);
    create_namespace(&s, &winnet, "hnsd-bare", &bare_socket, BARE_NS);
    let services: usize = std::env::var("CNI_BENCH_SERVICES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let loaded_socket = (services > 0).then(|| {
        make_node(&mut s, LOADED_NS);
        let socket = start_hnsd(&mut s, &winnet, "hnsd-loaded", Some(LOADED_NS));
        create_network(&s, &winnet, "hnsd-loaded", &socket, Some(LOADED_NS));
        program_services(&socket, services);
        socket
    });

    // A scratch "host" for bridge's Linux bridge; the plugins are spawned from it.
    let host_path = s.netns(HOST_NS);
    let host = std::fs::File::open(&host_path).expect("open host netns");
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
    let env: Vec<(&str, &str)> = vec![("CNI_PATH", &path)];
    let hns_env = |socket: &Path, state: &str| {
        vec![
            ("HNS_SOCKET", socket.to_string_lossy().into_owned()),
            (
                "WINNET_CNI_STATE_DIR",
                d.join(state).to_string_lossy().into_owned(),
            ),
        ]
    };
    let win_conf = |dir: &str| {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"cbr0","type":"win-bridge","apiVersion":2,"ipMasqNetwork":"10.244.0.0/16","policies":[{{"name":"EndpointPolicy","value":{{"Type":"OutBoundNAT","Settings":{{"Exceptions":["10.96.0.0/12"]}}}}}}],"ipam":{}}}"#,
            ipam("10.244.1.0/24", dir)
        )
    };

    let mut pods = |tag: &str| {
        let name = format!("{PREFIX}{tag}");
        if reuse {
            s.netns(&name);
            Some(PodNetns::Reuse(name))
        } else {
            Some(PodNetns::Fresh(name))
        }
    };
    let win = Plugin {
        path: bin.join("win-bridge"),
        conf: win_conf("ipam-win"),
        env: hns_env(&socket, "state"),
        pods: pods("win"),
    };
    let bridge = Plugin {
        path: Path::new(DEBIAN_CNI).join("bridge"),
        conf: format!(
            r#"{{"cniVersion":"1.0.0","name":"benchbr","type":"bridge","bridge":"cnibench0","isGateway":true,"ipMasq":false,"ipam":{}}}"#,
            ipam("10.250.0.0/24", "ipam-br")
        ),
        env: Vec::new(),
        pods: pods("br"),
    };
    let host_local = Plugin {
        path: Path::new(DEBIAN_CNI).join("host-local"),
        conf: format!(
            r#"{{"cniVersion":"1.0.0","name":"hl","ipam":{}}}"#,
            ipam("10.251.0.0/24", "ipam-hl")
        ),
        env: Vec::new(),
        pods: None,
    };
    let bare = Plugin {
        path: bin.join("win-bridge"),
        conf: win_conf("ipam-bare"),
        env: hns_env(&bare_socket, "state-bare"),
        pods: Some(PodNetns::Hcn(BARE_NS)),
    };

    let loaded = loaded_socket.as_ref().map(|socket| Plugin {
        path: bin.join("win-bridge"),
        conf: win_conf("ipam-loaded"),
        env: hns_env(socket, "state-loaded"),
        pods: pods("winl"),
    });

    // Warm up each (page cache, first connection), then measure, interleaved in rounds so a
    // noisy moment hits all alike.
    let mut plugins = vec![&win, &bridge, &host_local, &bare];
    plugins.extend(loaded.as_ref());
    for p in &plugins {
        add_del(&mut s, 5, p, &env, &mut Times::default());
    }
    let mut times: Vec<Times> = plugins.iter().map(|_| Times::default()).collect();
    let rounds = 10;
    for _ in 0..rounds {
        for (p, t) in plugins.iter().zip(times.iter_mut()) {
            add_del(&mut s, (n / rounds).max(1), p, &env, t);
        }
    }

    println!(
        "CNI ADD/DEL latency, process start to exit, {} calls each, pod namespaces {} (ms):",
        times[0].adds.len(),
        if reuse {
            "reused"
        } else {
            "fresh per iteration"
        }
    );
    println!("| plugin | ADD p50 | ADD p99 | DEL p50 | DEL p99 |");
    println!("|---|---:|---:|---:|---:|");
    let loaded_name = format!(
        "win-bridge + host-local with {services} ClusterIP load balancers programmed (hnsd --node-netns)"
    );
    let names = [
        "win-bridge + host-local (winnet, hnsd --node-netns, TAP in the pod's netns)",
        "bridge + host-local (Debian, veth + Linux bridge)",
        "host-local alone (Debian)",
        "win-bridge + host-local, hnsd without a data plane (no TAP; reference)",
        loaded_name.as_str(),
    ];
    for (name, t) in names.iter().zip(times) {
        let (a50, a99) = percentiles(t.adds);
        let (d50, d99) = percentiles(t.dels);
        println!("| {name} | {a50:.2} | {a99:.2} | {d50:.2} | {d99:.2} |");
    }
    for name in ["hnsd", "hnsd-bare", "hnsd-loaded"] {
        let log = s.hnsd_log(name);
        if !log.trim().is_empty() {
            eprintln!("{name} logged:\n{log}");
        }
    }
}

/// `services` ClusterIP load balancers (TCP 80 -> 8080, 5 backends each) over up to 5,000
/// remote endpoints on cbr0, as kube-proxy programs them, into the hnsd on `socket`.
fn program_services(socket: &Path, services: usize) {
    use futures::StreamExt;
    let remote = (services * 5).min(5000);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let c = std::sync::Arc::new(hns_client::Client::new(socket));
        let net = c
            .get_network_by_name("cbr0")
            .await
            .expect("read cbr0")
            .expect("cbr0 exists");
        let ids: Vec<hcn::Guid> = futures::stream::iter(0..remote)
            .map(|i| {
                let c = std::sync::Arc::clone(&c);
                let n = 2 * 256 + i;
                let ep = hcn::Endpoint {
                    host_compute_network: net.id,
                    flags: hcn::EndpointFlags::REMOTE_ENDPOINT,
                    ip_configurations: vec![hcn::IpConfig {
                        ip_address: Some(
                            std::net::Ipv4Addr::new(10, 244, (n / 250) as u8, (n % 250 + 2) as u8)
                                .into(),
                        ),
                        prefix_length: 0,
                    }],
                    ..Default::default()
                };
                async move { c.create_endpoint(&ep).await.expect("remote endpoint").id }
            })
            .buffered(64)
            .collect()
            .await;
        futures::stream::iter(0..services)
            .map(|i| {
                let c = std::sync::Arc::clone(&c);
                let lb = hcn::LoadBalancer {
                    host_compute_endpoints: (0..5).map(|k| ids[(i * 5 + k) % remote]).collect(),
                    frontend_vips: vec![
                        std::net::Ipv4Addr::new(10, 96, (i / 250) as u8, (i % 250 + 1) as u8)
                            .into(),
                    ],
                    port_mappings: vec![hcn::LoadBalancerPortMapping {
                        protocol: 6,
                        internal_port: 8080,
                        external_port: 80,
                        ..Default::default()
                    }],
                    ..Default::default()
                };
                async move {
                    c.create_load_balancer(&lb).await.expect("load balancer");
                }
            })
            .buffer_unordered(64)
            .collect::<Vec<()>>()
            .await;
    });
}
