//! `winnet flanneld` end to end, as root, over real namespaces: a fabric namespace with a
//! bridge and Debian's etcd on it, node namespaces plugged into the bridge, flanneld started in
//! each node as a node would start it. Linux nodes get the kernel's VXLAN device; Windows nodes
//! run hnsd with its data plane and flanneld builds their HNS network through it.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

const WINNET: &str = env!("CARGO_BIN_EXE_winnet");

fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "flanneld's tests build namespaces and devices: run them as root"
    );
}

/// Runs a command; its stdout, or a panic naming it and its stderr.
fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", args.join(" ")));
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A namespace, deleted on drop.
struct Ns(String);

impl Ns {
    fn new(name: String) -> Ns {
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        sh(&["ip", "netns", "add", &name]);
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        Ns(name)
    }
    fn ip(&self, args: &[&str]) -> String {
        let mut a = vec!["ip", "-n", &self.0];
        a.extend_from_slice(args);
        sh(&a)
    }
    fn exec(&self, args: &[&str]) -> String {
        let mut a = vec!["ip", "netns", "exec", &self.0];
        a.extend_from_slice(args);
        sh(&a)
    }
    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        host::netns::Netns::named(&self.0)
            .run(|| Ok(f()))
            .expect("enter netns")
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// A process, killed on drop.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(ns: &Ns, args: &[&str], log: PathBuf) -> Proc {
        let f = std::fs::File::create(&log).expect("log");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.0])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("log"))
            .stderr(f)
            .spawn()
            .expect("spawn");
        Proc { child, log }
    }
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

static NEXT: AtomicU8 = AtomicU8::new(0);

/// The fabric: a bridge namespace with etcd on it, and nodes plugged in.
struct Lab {
    procs: Vec<Proc>,
    pods: Vec<Ns>,
    nodes: Vec<Ns>,
    fabric: Ns,
    dir: tempfile::TempDir,
    name: String,
    net: u8,
}

impl Lab {
    fn new(test: &str) -> Lab {
        require_root();
        let net = 90 + NEXT.fetch_add(1, Ordering::SeqCst);
        let name = format!("wnt-fl-{test}");
        let fabric = Ns::new(format!("{name}-f"));
        fabric.ip(&["link", "add", "br0", "type", "bridge"]);
        fabric.ip(&["addr", "add", &format!("10.{net}.0.1/24"), "dev", "br0"]);
        fabric.ip(&["link", "set", "br0", "up"]);
        let mut lab = Lab {
            procs: Vec::new(),
            pods: Vec::new(),
            nodes: Vec::new(),
            fabric,
            dir: tempfile::tempdir().expect("dir"),
            name,
            net,
        };
        lab.etcd();
        lab
    }

    fn etcd_url(&self) -> String {
        format!("http://10.{}.0.1:2379", self.net)
    }

    fn etcd(&mut self) {
        let data = self.dir.path().join("etcd");
        let url = self.etcd_url();
        let peer = format!("http://10.{}.0.1:2380", self.net);
        let log = self.dir.path().join("etcd.log");
        let p = Proc::spawn(
            &self.fabric,
            &[
                "etcd",
                "--data-dir",
                &data.to_string_lossy(),
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
                "--initial-cluster",
                &format!("default={peer}"),
            ],
            log,
        );
        self.procs.push(p);
        wait_for("etcd", 30, || {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.fabric.0,
                    "etcdctl",
                    "--endpoints",
                    &url,
                    "endpoint",
                    "health",
                ])
                .env("ETCDCTL_API", "3")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    }

    fn etcdctl(&self, args: &[&str]) -> String {
        let url = self.etcd_url();
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.fabric.0,
                "etcdctl",
                "--endpoints",
                &url,
            ])
            .args(args)
            .env("ETCDCTL_API", "3")
            .output()
            .expect("etcdctl");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Adds node `i` at 10.<net>.0.(11+i); its namespace index.
    fn node(&mut self, i: u8) -> usize {
        let ns = Ns::new(format!("{}-n{i}", self.name));
        let port = format!("{}{i}", &self.name[..self.name.len().min(10)]);
        self.fabric.ip(&[
            "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns.0,
        ]);
        self.fabric
            .ip(&["link", "set", &port, "master", "br0", "up"]);
        ns.ip(&[
            "addr",
            "add",
            &format!("{}/24", self.node_ip(i)),
            "dev",
            "eth0",
        ]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
        self.nodes.push(ns);
        self.nodes.len() - 1
    }

    fn node_ip(&self, i: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net, 0, 11 + i)
    }

    fn subnet_file(&self, node: usize) -> PathBuf {
        self.dir.path().join(format!("n{node}/subnet.env"))
    }

    fn flanneld(&mut self, node: usize, extra: &[&str]) -> usize {
        let url = self.etcd_url();
        let sf = self.subnet_file(node);
        let _ = std::fs::remove_file(&sf);
        let mut args = vec![WINNET, "flanneld", "--iface", "eth0", "--subnet-file"];
        let sf_text = sf.to_string_lossy().into_owned();
        args.push(&sf_text);
        if !extra.contains(&"--etcd-endpoints") {
            args.extend_from_slice(&["--etcd-endpoints", &url]);
        }
        args.extend_from_slice(extra);
        let log = self
            .dir
            .path()
            .join(format!("flanneld-{node}-{}.log", self.procs.len()));
        let p = Proc::spawn(&self.nodes[node], &args, log);
        self.procs.push(p);
        self.procs.len() - 1
    }

    fn wait_ready(&self, proc_: usize) {
        wait_for("flanneld ready", 60, || {
            let log = self.procs[proc_].log();
            assert!(!log.contains("Error:"), "flanneld failed:\n{log}");
            log.contains("flanneld ready")
        });
    }

    /// A pod on a Linux node: a namespace with `10.244.x.5/24`, behind a veth whose node end
    /// holds .1.
    fn linux_pod(&mut self, node: usize, subnet: ipnet::Ipv4Net) -> Ipv4Addr {
        let ns = Ns::new(format!("{}-p{node}", self.name));
        let o = subnet.network().octets();
        let gw = Ipv4Addr::new(o[0], o[1], o[2], 1);
        let ip = Ipv4Addr::new(o[0], o[1], o[2], 5);
        let host = format!("pod{node}");
        self.nodes[node].ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &ns.0,
        ]);
        self.nodes[node].ip(&["addr", "add", &format!("{gw}/24"), "dev", &host]);
        self.nodes[node].ip(&["link", "set", &host, "up"]);
        ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["route", "add", "default", "via", &gw.to_string()]);
        self.pods.push(ns);
        ip
    }

    fn lease_of(&self, node: usize) -> ipnet::Ipv4Net {
        let text = std::fs::read_to_string(self.subnet_file(node)).expect("subnet.env");
        flannel::subnet_env::SubnetEnv::previous_subnet(&text).expect("FLANNEL_SUBNET")
    }
}

fn put_config(lab: &Lab, conf: &str) {
    lab.etcdctl(&["put", "/coreos.com/network/config", conf]);
}

/// The routes, neighbours, FDB and links of a node, to compare before and after.
fn kernel_state(ns: &Ns) -> (String, String, String, String) {
    (
        ns.ip(&["route", "show"]),
        ns.ip(&["neigh", "show", "nud", "permanent"]),
        ns.exec(&["bridge", "fdb", "show", "dev", "flannel.4096"]),
        ns.ip(&["-d", "link", "show", "flannel.4096"]),
    )
}

#[test]
fn linux_vxlan_nodes_lease_from_etcd_and_reach_each_others_pods() {
    let mut lab = Lab::new("lx");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}"#,
    );
    let a = lab.node(0);
    let b = lab.node(1);
    let pa = lab.flanneld(a, &["--ip-masq"]);
    let pb = lab.flanneld(b, &["--subnet-lease-ttl", "4"]);
    lab.wait_ready(pa);
    lab.wait_ready(pb);
    let (sa, sb) = (lab.lease_of(a), lab.lease_of(b));
    assert_ne!(sa, sb);
    let env = std::fs::read_to_string(lab.subnet_file(a)).expect("env");
    assert!(
        env.starts_with("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET="),
        "{env}"
    );
    assert!(
        env.contains("FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"),
        "{env}"
    );
    // flannel's etcd schema.
    let key = format!(
        "/coreos.com/network/subnets/{}-{}",
        sb.network(),
        sb.prefix_len()
    );
    let value = lab.etcdctl(&["get", &key, "--print-value-only"]);
    assert!(
        value.contains(&format!("\"PublicIP\":\"{}\"", lab.node_ip(1))),
        "{value}"
    );
    assert!(
        value.contains("\"BackendType\":\"vxlan\"") && value.contains("\"VNI\":4096"),
        "{value}"
    );
    assert!(
        lab.nodes[a]
            .exec(&["nft", "list", "table", "ip", "winnet-flannel"])
            .contains("masquerade")
    );

    let ipa = lab.linux_pod(a, sa);
    let ipb = lab.linux_pod(b, sb);
    // Routes to the other subnet appear on each node once it has the other's lease.
    for (n, other) in [(a, sb), (b, sa)] {
        wait_for("the route to the other node's subnet", 30, || {
            lab.nodes[n]
                .ip(&["route", "show", &other.to_string()])
                .contains("flannel.4096")
        });
    }
    let server = lab.pods[1].run(move || TcpListener::bind((ipb, 7000)).expect("listen"));
    let mut client = lab.pods[0].run(move || TcpStream::connect((ipb, 7000)).expect("connect"));
    let (mut conn, peer) = server.accept().expect("accept");
    assert_eq!(
        peer.ip(),
        std::net::IpAddr::V4(ipa),
        "pod to pod is not masqueraded"
    );
    echo(&mut client, &mut conn, b"before");

    // Restart: kill -9, start again; the kernel state is untouched and the stream lives.
    let before = kernel_state(&lab.nodes[a]);
    lab.procs[pa].kill9();
    let pa2 = lab.flanneld(a, &["--ip-masq"]);
    lab.wait_ready(pa2);
    wait_for("the first sync", 30, || {
        lab.procs[pa2]
            .log()
            .contains("routes to the other nodes' subnets in place")
    });
    assert_eq!(lab.lease_of(a), sa, "the restarted node keeps its lease");
    assert_eq!(
        kernel_state(&lab.nodes[a]),
        before,
        "restart changed the kernel's state"
    );
    echo(&mut client, &mut conn, b"after");

    // Node b leaves: its flanneld stops renewing, the 4 s lease expires, and a loses its routes.
    lab.procs[pb].kill9();
    wait_for("b's lease to expire", 30, || {
        lab.etcdctl(&["get", &key, "--print-value-only"])
            .trim()
            .is_empty()
    });
    wait_for("a to drop b's route, neighbour and FDB entry", 30, || {
        let (routes, neigh, fdb, _) = kernel_state(&lab.nodes[a]);
        !routes.contains(&sb.to_string())
            && !neigh.contains(&sb.network().to_string())
            && !fdb.contains(&lab.node_ip(1).to_string())
    });
}

fn echo(client: &mut TcpStream, conn: &mut TcpStream, msg: &[u8]) {
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    client.write_all(msg).expect("send");
    let mut buf = vec![0; msg.len()];
    conn.read_exact(&mut buf).expect("receive");
    assert_eq!(buf, msg);
    conn.write_all(&buf).expect("echo");
    client.read_exact(&mut buf).expect("echo back");
    assert_eq!(buf, msg);
}

#[test]
fn etcd_unreachable_at_start_is_retried_with_a_clear_message_and_nothing_made() {
    let mut lab = Lab::new("noetcd");
    let a = lab.node(0);
    let p = lab.flanneld(a, &["--etcd-endpoints", "http://10.250.0.1:2379"]);
    wait_for("the retry message", 30, || {
        let log = lab.procs[p].log();
        log.contains("cannot reach etcd at http://10.250.0.1:2379") && log.contains("retrying")
    });
    assert!(
        !lab.subnet_file(a).exists(),
        "subnet.env written without a lease"
    );
    assert!(
        !lab.nodes[a].ip(&["link", "show"]).contains("flannel."),
        "a device made without a lease"
    );
}

#[test]
fn windows_net_conf_refusals_are_flannels() {
    let mut lab = Lab::new("wref");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":1}}"#,
    );
    let a = lab.node(0);
    let sock = lab.dir.path().join("none.sock");
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.nodes[a].0,
            WINNET,
            "flanneld",
            "--iface",
            "eth0",
        ])
        .args([
            "--etcd-endpoints",
            &lab.etcd_url(),
            "--node-os",
            "windows",
            "--hns-socket",
        ])
        .arg(&sock)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("VNI [1] must be greater than or equal to 4096 on Windows"),
        "{err}"
    );
}

impl Lab {
    /// Starts hnsd with its data plane in node `node`'s namespace; its socket.
    fn hnsd(&mut self, node: usize) -> PathBuf {
        let dir = self.dir.path().join(format!("hnsd{node}"));
        let sock = dir.join("hns.sock");
        std::fs::create_dir_all(&dir).expect("dir");
        let (state, sock_text) = (dir.join("state"), sock.to_string_lossy().into_owned());
        let state_text = state.to_string_lossy().into_owned();
        let log = dir.join("hnsd.log");
        let p = Proc::spawn(
            &self.nodes[node],
            &[
                WINNET,
                "hnsd",
                "--dataplane",
                "--nic",
                "eth0",
                "--state-dir",
                &state_text,
                "--socket",
                &sock_text,
            ],
            log,
        );
        self.procs.push(p);
        wait_for("hnsd's socket", 30, || sock.exists());
        sock
    }
}

/// `winnet hns ARGS -o json` against `sock`.
fn hns_json(sock: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(WINNET)
        .arg("hns")
        .args(args)
        .args(["-o", "json", "--hns-socket"])
        .arg(sock)
        .output()
        .expect("winnet hns");
    assert!(
        out.status.success(),
        "winnet hns {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One object prints as itself, several as an array or one document each.
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("json");
    if args[0] != "list" {
        return docs.into_iter().next().expect("a document");
    }
    serde_json::Value::Array(
        docs.into_iter()
            .flat_map(|d| match d {
                serde_json::Value::Array(a) => a,
                other => vec![other],
            })
            .collect(),
    )
}

fn network(sock: &std::path::Path, name: &str) -> Option<serde_json::Value> {
    let all = hns_json(sock, &["list", "networks"]);
    all.as_array()?.iter().find(|n| n["Name"] == name).cloned()
}

fn policies_of<'a>(net: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    net["Policies"]
        .as_array()
        .map(|p| p.iter().filter(|p| p["Type"] == kind).collect())
        .unwrap_or_default()
}

#[test]
fn a_windows_vxlan_node_gets_its_overlay_network_and_a_remote_subnet_route_per_lease() {
    let mut lab = Lab::new("wvx");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}"#,
    );
    let (w, l) = (lab.node(0), lab.node(1));
    let sock = lab.hnsd(w);
    let sock_text = sock.to_string_lossy().into_owned();
    let pw = lab.flanneld(w, &["--hns-socket", &sock_text]);
    let pl = lab.flanneld(l, &["--subnet-lease-ttl", "4"]);
    lab.wait_ready(pw);
    lab.wait_ready(pl);
    let (sw, sl) = (lab.lease_of(w), lab.lease_of(l));
    let env = std::fs::read_to_string(lab.subnet_file(w)).expect("env");
    assert!(
        env.contains("FLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"),
        "{env}"
    );
    let net = network(&sock, "flannel.4096").expect("the Overlay network flannel.4096");
    assert_eq!(net["Type"], "Overlay");
    let subnet = &net["Ipams"][0]["Subnets"][0];
    assert_eq!(subnet["IpAddressPrefix"], sw.to_string());
    assert_eq!(subnet["Policies"][0]["Settings"]["IsolationId"], 4096);
    assert_eq!(policies_of(&net, "HostRoute").len(), 1);
    assert_eq!(
        policies_of(&net, "NetAdapterName")[0]["Settings"]["NetworkAdapterName"],
        "eth0"
    );
    let dr_mac = policies_of(&net, "DrMacAddress")[0]["Settings"]["Address"]
        .as_str()
        .expect("DR MAC")
        .to_ascii_lowercase()
        .replace('-', ":");
    // The Windows lease carries the DR MAC as its VtepMAC; the Linux node programs it.
    wait_for(
        "the Linux node's FDB entry for the Windows DR MAC",
        30,
        || {
            lab.nodes[l]
                .exec(&["bridge", "fdb", "show", "dev", "flannel.4096"])
                .contains(&dr_mac)
        },
    );
    let linux_mac = lab.nodes[l]
        .exec(&["cat", "/sys/class/net/flannel.4096/address"])
        .trim()
        .to_string();
    let rsr = || {
        network(&sock, "flannel.4096")
            .map(|n| {
                policies_of(&n, "RemoteSubnetRoute")
                    .into_iter()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    wait_for("the RemoteSubnetRoute for the Linux node", 30, || {
        rsr().len() == 1
    });
    let r = &rsr()[0]["Settings"];
    assert_eq!(r["DestinationPrefix"], sl.to_string());
    assert_eq!(r["ProviderAddress"], lab.node_ip(1).to_string());
    assert_eq!(r["IsolationId"], 4096);
    assert_eq!(
        r["DistributedRouterMacAddress"]
            .as_str()
            .map(|m| m.to_ascii_lowercase().replace('-', ":")),
        Some(linux_mac)
    );

    // Restart is a no-op on HNS and the kernel.
    let dump = || hns_json(&sock, &["dump"]);
    let routes = |lab: &Lab| lab.nodes[w].ip(&["route", "show"]);
    let (before, before_routes) = (dump(), routes(&lab));
    lab.procs[pw].kill9();
    let pw2 = lab.flanneld(w, &["--hns-socket", &sock_text]);
    lab.wait_ready(pw2);
    wait_for("the first sync", 30, || {
        lab.procs[pw2]
            .log()
            .contains("routes to the other nodes' subnets in place")
    });
    assert_eq!(dump(), before, "restart changed HNS");
    assert_eq!(
        routes(&lab),
        before_routes,
        "restart changed the kernel's routes"
    );

    // The Linux node leaves; its RemoteSubnetRoute goes.
    lab.procs[pl].kill9();
    wait_for("the RemoteSubnetRoute to go with the lease", 40, || {
        rsr().is_empty()
    });
}

#[test]
fn a_windows_host_gw_node_gets_cbr0_its_bridge_endpoint_and_routes() {
    let mut lab = Lab::new("whg");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let (w, l) = (lab.node(0), lab.node(1));
    let sock = lab.hnsd(w);
    let sock_text = sock.to_string_lossy().into_owned();
    let pw = lab.flanneld(w, &["--hns-socket", &sock_text]);
    let pl = lab.flanneld(l, &[]);
    lab.wait_ready(pw);
    lab.wait_ready(pl);
    let (sw, sl) = (lab.lease_of(w), lab.lease_of(l));
    let net = network(&sock, "cbr0").expect("the L2Bridge network cbr0");
    assert_eq!(net["Type"], "L2Bridge");
    let eps = hns_json(&sock, &["list", "endpoints"]);
    let ep = eps
        .as_array()
        .and_then(|e| e.iter().find(|e| e["Name"] == "cbr0_ep"))
        .expect("cbr0_ep");
    let o = sw.network().octets();
    assert_eq!(
        ep["IpConfigurations"][0]["IpAddress"],
        format!("{}.{}.{}.2", o[0], o[1], o[2])
    );
    let ns = hns_json(&sock, &["list", "namespaces"]);
    let host = ns
        .as_array()
        .and_then(|n| n.iter().find(|n| n["Type"] == "Host"))
        .expect("the host namespace");
    assert!(
        host.to_string().contains(ep["ID"].as_str().expect("id")),
        "cbr0_ep not attached to the host: {host}"
    );
    wait_for("the Windows node's route to the Linux subnet", 30, || {
        lab.nodes[w]
            .ip(&["route", "show", &sl.to_string()])
            .contains(&format!("via {}", lab.node_ip(1)))
    });
    wait_for("the Linux node's route to the Windows subnet", 30, || {
        lab.nodes[l]
            .ip(&["route", "show", &sw.to_string()])
            .contains(&format!("via {}", lab.node_ip(0)))
    });
}
