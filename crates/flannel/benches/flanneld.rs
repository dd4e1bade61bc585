//! flanneld's two figures (issue 13), as root over real namespaces with Debian's etcd in a
//! fabric namespace; everything made is removed on the way out, also on a panic.
//!
//! 1. Lease convergence: N Windows vxlan nodes (default 50, `FLANNEL_BENCH_NODES`), each an
//!    in-process hnsd service (`hns::server::spawn`, no data plane) and a namespace whose
//!    management vNIC (`vEthernet-eth0`, a veth on the fabric) holds its address, each running
//!    `flannel::Daemon` (what `winnet flanneld` runs) on a thread in its namespace. Timed from
//!    starting them all to every node's HNS network holding a RemoteSubnetRoute for each other
//!    node. Baseline (same run, same etcd): N clients each put one key while N watchers on the
//!    prefix wait until each has seen all N puts — etcd's own fan-out of N leases.
//! 2. Node start to pod connectivity: two Linux vxlan nodes with a pod each already run; a
//!    third node's flanneld starts and, once it wrote subnet.env, gets a pod; timed until that
//!    pod reaches both other pods (TCP). Baseline: one etcd put seen by a watch.
//!
//! 3. A lease appearing with 100 other nodes' leases held (`FLANNEL_BENCH_LEASES`), over 50
//!    rounds (`FLANNEL_BENCH_ROUNDS`): see [`lease_appearing`].
//!
//! Run: `cargo bench -p flannel --bench flanneld`; `FLANNEL_BENCH_ONLY=lease` runs figure 3
//! alone (what `bench/check.sh` runs).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions, WatchOptions};
use flannel::{Daemon, Options, Os, SubnetSource};
use host::netns::Netns;
use testkit::cmd::sh;

const FABRIC: &str = "wnt-flb-f";
const ETCD: &str = "http://10.77.0.1:2379";

fn main() {
    testkit::require_root("this bench makes namespaces and devices");
    let n: usize = std::env::var("FLANNEL_BENCH_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let env = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let only_lease = std::env::var("FLANNEL_BENCH_ONLY").is_ok_and(|v| v == "lease");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut lab = Lab::default();
    lab.fabric(dir.path().join("etcd"));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let leases = env("FLANNEL_BENCH_LEASES", 100);
    let (syncs, floors) = lease_appearing(
        &mut lab,
        &rt,
        dir.path(),
        leases,
        env("FLANNEL_BENCH_ROUNDS", 50),
    );
    let ((p50, p99), (f50, f99)) = (percentiles(syncs), percentiles(floors));
    println!(
        "one lease appearing or going with {leases} leases held, to the RemoteSubnetRoute in HNS: p50 {p50:.2} ms, p99 {p99:.2} ms; floor (an etcd put seen by a watch): p50 {f50:.2} ms, p99 {f99:.2} ms"
    );
    if only_lease {
        return;
    }

    let (converge, fanout) = convergence(&mut lab, &rt, dir.path(), n);
    println!(
        "lease convergence, {n} Windows vxlan nodes: {:.2} s; baseline etcd fan-out of {n} puts to {n} watchers: {:.3} s; ratio {:.1}",
        converge.as_secs_f64(),
        fanout.as_secs_f64(),
        converge.as_secs_f64() / fanout.as_secs_f64()
    );
    let (ready, connected, rtt) = node_start(&mut lab, dir.path());
    println!(
        "node start: flanneld start to subnet.env {:.0} ms, to its pod reaching both other nodes' pods {:.0} ms; baseline etcd put seen by a watch {:.2} ms; ratio {:.0}",
        ms(ready),
        ms(connected),
        ms(rtt),
        ms(connected) / ms(rtt)
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// What the bench made: removed in reverse on drop.
#[derive(Default)]
struct Lab {
    namespaces: Vec<Netns>,
    etcd: Option<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut e) = self.etcd.take() {
            let _ = e.kill();
            let _ = e.wait();
        }
        for ns in self.namespaces.iter().rev() {
            let _ = ns.delete();
        }
    }
}

impl Lab {
    fn netns(&mut self, name: &str) -> Netns {
        let old = Netns::named(name);
        if old.exists() {
            let _ = old.delete();
        }
        let ns = Netns::create(name).expect("create a namespace");
        self.namespaces.push(Netns::named(name));
        ns
    }

    /// The fabric namespace, its bridge at 10.77.0.1/16, and etcd on it.
    fn fabric(&mut self, data: PathBuf) {
        self.netns(FABRIC);
        sh(&["ip", "-n", FABRIC, "link", "add", "br0", "type", "bridge"]);
        sh(&[
            "ip",
            "-n",
            FABRIC,
            "addr",
            "add",
            "10.77.0.1/16",
            "dev",
            "br0",
        ]);
        sh(&["ip", "-n", FABRIC, "link", "set", "br0", "up"]);
        let peer = "http://10.77.0.1:2380";
        let etcd = Command::new("ip")
            .args(["netns", "exec", FABRIC, "etcd", "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                ETCD,
                "--advertise-client-urls",
                ETCD,
            ])
            .args([
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
            ])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd (apt-get install -y etcd-server)");
        self.etcd = Some(etcd);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !Command::new("ip")
            .args(["netns", "exec", FABRIC, "etcdctl", "--endpoints", ETCD])
            .args(["endpoint", "health"])
            .env("ETCDCTL_API", "3")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            assert!(Instant::now() < deadline, "etcd did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A node namespace `name` on the fabric at `ip`, its fabric-side link named `link`.
    fn node(&mut self, name: &str, port: &str, link: &str, ip: Ipv4Addr) {
        self.netns(name);
        sh(&[
            "ip", "-n", FABRIC, "link", "add", port, "type", "veth", "peer", "name", link, "netns",
            name,
        ]);
        sh(&[
            "ip", "-n", FABRIC, "link", "set", port, "master", "br0", "up",
        ]);
        sh(&[
            "ip",
            "-n",
            name,
            "addr",
            "add",
            &format!("{ip}/16"),
            "dev",
            link,
        ]);
        sh(&["ip", "-n", name, "link", "set", link, "up"]);
    }
}

/// Runs `Daemon` with `opts` on a thread inside `ns` until `stop` fires.
fn spawn_daemon(
    ns: String,
    opts: Options,
    stop: tokio::sync::watch::Receiver<bool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        Netns::named(&ns).enter().expect("enter the node namespace");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let d = match Daemon::start(opts).await {
                Ok(d) => d,
                Err(e) => panic!("flanneld in {ns}: {e}"),
            };
            let mut stop = stop;
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            if let Err(e) = d.run(shutdown).await {
                panic!("flanneld in {ns}: {e}");
            }
        });
    })
}

fn etcd_options(prefix: &str) -> SubnetSource {
    SubnetSource::Etcd {
        endpoints: vec![ETCD.to_string()],
        prefix: prefix.to_string(),
        ttl: Duration::from_secs(600),
    }
}

/// Runs `f` on a current-thread runtime on a thread in the fabric namespace (where etcd is).
/// Polls (every millisecond) the overlay network's RemoteSubnetRoutes until `done` holds.
async fn routes_until(hns: &hns_client::Client, done: impl Fn(&[String]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(net)) = hns.get_network_by_name("flannel.4096").await {
            let prefixes: Vec<String> = net
                .policies
                .iter()
                .filter_map(|p| match p {
                    hcn::NetworkPolicy::RemoteSubnetRoute(r) => {
                        Some(r.destination_prefix.to_string())
                    }
                    _ => None,
                })
                .collect();
            if done(&prefixes) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "the routes never showed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn in_fabric<R: Send>(f: impl std::future::Future<Output = R> + Send) -> R {
    Netns::named(FABRIC)
        .run(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            Ok(rt.block_on(f))
        })
        .expect("enter the fabric")
}

fn convergence(
    lab: &mut Lab,
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    n: usize,
) -> (Duration, Duration) {
    let prefix = "/bench-windows";
    let conf = r#"{"Network":"10.128.0.0/9","Backend":{"Type":"vxlan","VNI":4096}}"#;
    in_fabric(async {
        let mut c = Client::connect([ETCD], None).await.expect("etcd");
        c.put(format!("{prefix}/config"), conf, None)
            .await
            .expect("put config");
    });
    let mut hnsds = Vec::new();
    let mut nodes = Vec::new();
    for i in 0..n {
        let name = format!("wnt-flb-w{i}");
        let ip = Ipv4Addr::new(10, 77, 1 + (i / 200) as u8, 1 + (i % 200) as u8);
        lab.node(&name, &format!("wflbw{i}"), "vEthernet-eth0", ip);
        // The NIC hnsd took; its address is on the management vNIC.
        // (A veth whose peer stays in the namespace: this kernel has no dummy links.)
        sh(&[
            "ip", "-n", &name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
        ]);
        let sock = dir.join(format!("hns-{i}.sock"));
        let _guard = rt.enter();
        let h = hns::server::spawn(&hns::server::Config {
            state_dir: dir.join(format!("hns-{i}")),
            socket: sock.clone(),
            profile: hns::Profile::Ws2022,
        })
        .expect("in-process hnsd");
        hnsds.push(h);
        nodes.push((name, sock, dir.join(format!("subnet-{i}.env"))));
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let start = Instant::now();
    let threads: Vec<_> = nodes
        .iter()
        .map(|(name, sock, env)| {
            let opts = Options {
                os: Os::Windows {
                    hns_socket: sock.clone(),
                },
                iface: Some("eth0".into()),
                public_ip: None,
                subnet_file: env.clone(),
                ip_masq: false,
                source: etcd_options(prefix),
            };
            spawn_daemon(name.clone(), opts, stop_rx.clone())
        })
        .collect();
    rt.block_on(async {
        let clients: Vec<_> = hnsds.iter().map(|h| h.client()).collect();
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let mut done = 0;
            for c in &clients {
                if let Ok(Some(net)) = c.get_network_by_name("flannel.4096").await {
                    let routes = net
                        .policies
                        .iter()
                        .filter(|p| matches!(p, hcn::NetworkPolicy::RemoteSubnetRoute(_)))
                        .count();
                    if routes == n - 1 {
                        done += 1;
                    }
                }
            }
            if done == n {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "only {done} of {n} nodes converged"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let converge = start.elapsed();
    let _ = stop_tx.send(true);
    for t in threads {
        let _ = t.join();
    }
    drop(hnsds);
    (converge, fanout(n))
}

/// etcd's own fan-out: `n` watchers on a prefix, `n` clients putting one key each; the time
/// until every watcher saw every put.
fn fanout(n: usize) -> Duration {
    in_fabric(async move {
        let prefix = "/bench-fanout/";
        let mut watchers = Vec::new();
        for _ in 0..n {
            let mut c = Client::connect([ETCD], None).await.expect("etcd");
            let rev = c
                .get(prefix, Some(GetOptions::new().with_prefix()))
                .await
                .expect("get")
                .header()
                .map_or(0, |h| h.revision());
            let s = c
                .watch(
                    prefix,
                    Some(
                        WatchOptions::new()
                            .with_prefix()
                            .with_start_revision(rev + 1),
                    ),
                )
                .await
                .expect("watch");
            watchers.push((c, s));
        }
        let mut putters = Vec::new();
        for _ in 0..n {
            putters.push(Client::connect([ETCD], None).await.expect("etcd"));
        }
        let start = Instant::now();
        let puts = putters
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| async move {
                c.put(format!("{prefix}{i}"), "x", None).await.expect("put");
            });
        let seen = watchers.into_iter().map(|(_c, mut s)| async move {
            let mut events = 0;
            while events < n {
                match s.message().await {
                    Ok(Some(r)) => events += r.events().len(),
                    other => panic!("watch ended: {other:?}"),
                }
            }
        });
        futures::future::join(
            futures::future::join_all(puts),
            futures::future::join_all(seen),
        )
        .await;
        start.elapsed()
    })
}

/// (flanneld start to subnet.env, start to pod connectivity, etcd put->watch round trip).
fn node_start(lab: &mut Lab, dir: &std::path::Path) -> (Duration, Duration, Duration) {
    let prefix = "/bench-linux";
    let conf = r#"{"Network":"10.64.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}"#;
    let rtt = in_fabric(async {
        let mut c = Client::connect([ETCD], None).await.expect("etcd");
        c.put(format!("{prefix}/config"), conf, None)
            .await
            .expect("put config");
        let mut w = Client::connect([ETCD], None).await.expect("etcd");
        let mut s = w.watch("/bench-rtt", None).await.expect("watch");
        let _created = s.message().await;
        let start = Instant::now();
        c.put("/bench-rtt", "x", None).await.expect("put");
        while s
            .message()
            .await
            .ok()
            .flatten()
            .is_some_and(|r| r.events().is_empty())
        {}
        start.elapsed()
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut threads = Vec::new();
    let mut servers = Vec::new();
    let mut start_node = |lab: &mut Lab, i: u8| -> (Instant, PathBuf, String) {
        let name = format!("wnt-flb-l{i}");
        let ip = Ipv4Addr::new(10, 77, 100, 1 + i);
        lab.node(&name, &format!("wflbl{i}"), "eth0", ip);
        let env = dir.join(format!("linux-{i}.env"));
        let opts = Options {
            os: Os::Linux,
            iface: Some("eth0".into()),
            public_ip: None,
            subnet_file: env.clone(),
            ip_masq: false,
            source: etcd_options(prefix),
        };
        let start = Instant::now();
        threads.push(spawn_daemon(name.clone(), opts, stop_rx.clone()));
        (start, env, name)
    };
    for i in 0..2u8 {
        let (_, env, name) = start_node(lab, i);
        let (pod, _) = pod(lab, &name, &env);
        // Connections complete in the listen backlog; nothing needs to accept them.
        let listener = Netns::named(&format!("{name}-pod"))
            .run(move || Ok(TcpListener::bind((pod, 7300)).expect("listen")))
            .expect("pod");
        servers.push((pod, listener));
    }
    let (start, env, name) = start_node(lab, 2);
    let (_, leased) = pod(lab, &name, &env);
    let ready = leased - start;
    let targets: Vec<SocketAddr> = servers.iter().map(|(ip, _)| (*ip, 7300).into()).collect();
    Netns::named(&format!("{name}-pod"))
        .run(|| {
            for t in &targets {
                let deadline = Instant::now() + Duration::from_secs(60);
                while TcpStream::connect_timeout(t, Duration::from_millis(200)).is_err() {
                    assert!(Instant::now() < deadline, "no connectivity to {t}");
                }
            }
            Ok(())
        })
        .expect("pod");
    let connected = start.elapsed();
    let _ = stop_tx.send(true);
    for t in threads {
        let _ = t.join();
    }
    (ready, connected, rtt)
}

/// Waits for `env` (flanneld's subnet.env), then makes a pod `<node>-pod` at the lease's .5
/// behind a veth whose node end holds .1; its address and when subnet.env was there.
fn pod(lab: &mut Lab, node: &str, env: &std::path::Path) -> (Ipv4Addr, Instant) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let subnet = loop {
        if let Some(s) = std::fs::read_to_string(env)
            .ok()
            .and_then(|t| flannel::subnet_env::SubnetEnv::previous_subnet(&t))
        {
            break s;
        }
        assert!(Instant::now() < deadline, "{node} wrote no subnet.env");
        std::thread::sleep(Duration::from_millis(5));
    };
    let leased = Instant::now();
    let o = subnet.network().octets();
    let (gw, ip) = (
        Ipv4Addr::new(o[0], o[1], o[2], 1),
        Ipv4Addr::new(o[0], o[1], o[2], 5),
    );
    let pod = format!("{node}-pod");
    lab.netns(&pod);
    sh(&[
        "ip", "-n", node, "link", "add", "pod", "type", "veth", "peer", "name", "eth0", "netns",
        &pod,
    ]);
    sh(&[
        "ip",
        "-n",
        node,
        "addr",
        "add",
        &format!("{gw}/24"),
        "dev",
        "pod",
    ]);
    sh(&["ip", "-n", node, "link", "set", "pod", "up"]);
    sh(&[
        "ip",
        "netns",
        "exec",
        node,
        "sysctl",
        "-qw",
        "net.ipv4.ip_forward=1",
    ]);
    sh(&[
        "ip",
        "-n",
        &pod,
        "addr",
        "add",
        &format!("{ip}/24"),
        "dev",
        "eth0",
    ]);
    sh(&["ip", "-n", &pod, "link", "set", "eth0", "up"]);
    sh(&[
        "ip",
        "-n",
        &pod,
        "route",
        "add",
        "default",
        "via",
        &gw.to_string(),
    ]);
    (ip, leased)
}

/// 3. One lease appearing, then going, while `leases` other nodes' leases are held: one Windows
///    vxlan node (an in-process hnsd and `flannel::Daemon` in its namespace, as in 1.) and
///    `leases` leases written to etcd as those nodes' flanneld write them (key and JSON value,
///    a VtepMAC each). Each round puts one more lease and times until the node's HNS network
///    holds its RemoteSubnetRoute, then deletes the key and times until the route is gone.
///    Floor, interleaved: an etcd put seen by a watch on the same etcd. p50/p99 of each.
fn lease_appearing(
    lab: &mut Lab,
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    leases: usize,
    rounds: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let prefix = "/bench-lease";
    let conf = r#"{"Network":"10.128.0.0/9","Backend":{"Type":"vxlan","VNI":4096}}"#;
    let lease = |i: usize| {
        let subnet = format!("10.{}.{}.0-24", 129 + i / 256, i % 256);
        let attrs = flannel::LeaseAttrs {
            public_ip: Ipv4Addr::new(10, 77, 2 + (i / 250) as u8, 1 + (i % 250) as u8),
            backend_type: flannel::BackendType::Vxlan,
            vxlan: Some(flannel::lease::VxlanData {
                vni: 4096,
                vtep_mac: Some(flannel::lease::Mac([
                    2,
                    0x11,
                    0,
                    0,
                    (i >> 8) as u8,
                    i as u8,
                ])),
            }),
        };
        (format!("{prefix}/subnets/{subnet}"), attrs.to_etcd_json())
    };
    in_fabric(async {
        let mut c = Client::connect([ETCD], None).await.expect("etcd");
        c.put(format!("{prefix}/config"), conf, None)
            .await
            .expect("put config");
        for i in 0..leases {
            let (k, v) = lease(i);
            c.put(k, v, None).await.expect("put lease");
        }
    });
    let name = "wnt-flb-lw";
    lab.node(
        name,
        "wflblw",
        "vEthernet-eth0",
        Ipv4Addr::new(10, 77, 200, 1),
    );
    sh(&[
        "ip", "-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p",
    ]);
    let sock = dir.join("hns-lease.sock");
    let hnsd = {
        let _guard = rt.enter();
        hns::server::spawn(&hns::server::Config {
            state_dir: dir.join("hns-lease"),
            socket: sock.clone(),
            profile: hns::Profile::Ws2022,
        })
        .expect("in-process hnsd")
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let opts = Options {
        os: Os::Windows {
            hns_socket: sock.clone(),
        },
        iface: Some("eth0".into()),
        public_ip: None,
        subnet_file: dir.join("subnet-lease.env"),
        ip_masq: false,
        source: etcd_options(prefix),
    };
    let daemon = spawn_daemon(name.to_string(), opts, stop_rx);
    let times = in_fabric(async move {
        let hns = hns_client::Client::new(&sock);
        routes_until(&hns, |p| p.len() == leases).await;
        let mut c = Client::connect([ETCD], None).await.expect("etcd");
        let mut w = Client::connect([ETCD], None).await.expect("etcd");
        let mut floor_watch = w.watch("/bench-lease-floor", None).await.expect("watch");
        let _created = floor_watch.message().await;
        let (mut syncs, mut floors) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            let (key, value) = lease(leases + r);
            let subnet = format!(
                "10.{}.{}.0/24",
                129 + (leases + r) / 256,
                (leases + r) % 256
            );
            let started = Instant::now();
            c.put(key.as_str(), value, None).await.expect("put lease");
            routes_until(&hns, |p| p.contains(&subnet)).await;
            syncs.push(started.elapsed());
            let started = Instant::now();
            c.delete(key.as_str(), None).await.expect("delete lease");
            routes_until(&hns, |p| !p.contains(&subnet)).await;
            syncs.push(started.elapsed());
            let started = Instant::now();
            c.put("/bench-lease-floor", r.to_string(), None)
                .await
                .expect("put");
            while floor_watch
                .message()
                .await
                .ok()
                .flatten()
                .is_some_and(|m| m.events().is_empty())
            {}
            floors.push(started.elapsed());
        }
        (syncs, floors)
    });
    let _ = stop_tx.send(true);
    let _ = daemon.join();
    drop(hnsd);
    times
}

fn percentiles(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (ms(v[v.len() / 2]), ms(v[v.len() * 99 / 100]))
}
