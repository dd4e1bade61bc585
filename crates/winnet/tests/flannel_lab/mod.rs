//! The lab flanneld's end-to-end tests share: a fabric namespace with a bridge (and Debian's
//! etcd on it when the test leases from etcd), node namespaces plugged into the bridge, flanneld
//! started in each node as a node would start it, hnsd with its data plane for Windows nodes,
//! and pods. Everything made is removed on drop, also when a test fails.
#![allow(dead_code)]

pub mod kube_api;
pub mod pods;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use testkit::hnsd::{HnsdCommand, HnsdProcess};

pub const WINNET: &str = env!("CARGO_BIN_EXE_winnet");

/// Runs a command; its stdout, or a failed test naming it with its output.
pub use testkit::cmd::sh;

/// Waits up to `secs` seconds for `f` to hold; fails the test naming `what`.
#[track_caller]
pub fn wait_for(what: &str, secs: u64, f: impl FnMut() -> bool) {
    testkit::wait::until(what, Duration::from_secs(secs), f)
}

/// A namespace, deleted on drop.
pub struct Ns(pub String);

impl Ns {
    pub fn new(name: String) -> Ns {
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        sh(&["ip", "netns", "add", &name]);
        sh(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        Ns(name)
    }
    pub fn ip(&self, args: &[&str]) -> String {
        let mut a = vec!["ip", "-n", &self.0];
        a.extend_from_slice(args);
        sh(&a)
    }
    pub fn exec(&self, args: &[&str]) -> String {
        let mut a = vec!["ip", "netns", "exec", &self.0];
        a.extend_from_slice(args);
        sh(&a)
    }
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
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
pub struct Proc {
    child: Child,
    log: PathBuf,
}

impl Proc {
    pub fn spawn(ns: &Ns, args: &[&str], log: PathBuf) -> Proc {
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
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub static NEXT: AtomicU8 = AtomicU8::new(0);

/// The fabric: a bridge namespace (with etcd on it, or not), and nodes plugged in.
pub struct Lab {
    pub procs: Vec<Proc>,
    /// The Windows nodes' hnsd processes (stopped before the namespaces go).
    pub hnsds: Vec<HnsdProcess>,
    pub pods: Vec<Ns>,
    pub nodes: Vec<Ns>,
    pub fabric: Ns,
    /// Directories outside `dir` the lab made (host-local's), removed after the processes.
    pub cleanup: Vec<pods::RemoveDir>,
    pub dir: tempfile::TempDir,
    pub name: String,
    pub net: u8,
    /// The lab's names are fixed (`wnt-fl-<test>`): one lab of a name at a time on the
    /// machine, whichever run it belongs to. Held until everything above is gone.
    _alone: testkit::lock::Held,
}

impl Lab {
    /// A fabric with etcd on it.
    pub fn new(test: &str) -> Lab {
        let mut lab = Lab::bare(test);
        lab.etcd();
        lab
    }

    /// A fabric without etcd (the kube subnet manager's tests).
    pub fn bare(test: &str) -> Lab {
        testkit::require_root("flanneld's tests build namespaces and devices");
        let net = 90 + NEXT.fetch_add(1, Ordering::SeqCst);
        let name = format!("wnt-fl-{test}");
        let alone = testkit::lock::exclusive(&format!("winnet-tests-{name}"));
        let fabric = Ns::new(format!("{name}-f"));
        fabric.ip(&["link", "add", "br0", "type", "bridge"]);
        fabric.ip(&["addr", "add", &format!("10.{net}.0.1/24"), "dev", "br0"]);
        fabric.ip(&["link", "set", "br0", "up"]);
        Lab {
            procs: Vec::new(),
            hnsds: Vec::new(),
            pods: Vec::new(),
            nodes: Vec::new(),
            fabric,
            cleanup: Vec::new(),
            dir: tempfile::tempdir().expect("dir"),
            name,
            net,
            _alone: alone,
        }
    }

    /// The fabric's own address, where etcd and the API server listen.
    pub fn fabric_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net, 0, 1)
    }

    pub fn etcd_url(&self) -> String {
        format!("http://10.{}.0.1:2379", self.net)
    }

    pub fn etcd(&mut self) {
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
            self.etcdctl_output(&["endpoint", "health"])
                .is_ok_and(|o| o.status.success())
        });
    }

    fn etcdctl_output(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        Command::new("ip")
            .args(["netns", "exec", &self.fabric.0, "etcdctl", "--endpoints"])
            .arg(self.etcd_url())
            .args(args)
            .env("ETCDCTL_API", "3")
            .output()
    }

    /// `etcdctl ARGS` against the lab's etcd; its stdout, or a panic with its stderr.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let out = self.etcdctl_output(args).expect("etcdctl");
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// etcd's current revision.
    pub fn etcd_revision(&self) -> i64 {
        let out = self.etcdctl(&["get", "/", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl's JSON");
        v["header"]["revision"].as_i64().expect("a revision")
    }

    /// Every value etcd held for `key` at each revision after `since`, oldest first (empty
    /// where the key did not exist).
    pub fn values_since(&self, key: &str, since: i64) -> Vec<String> {
        (since + 1..=self.etcd_revision())
            .map(|rev| {
                self.etcdctl(&["get", key, "--rev", &rev.to_string(), "--print-value-only"])
                    .trim()
                    .to_string()
            })
            .collect()
    }

    /// The etcd key of node `node`'s lease.
    pub fn lease_key(&self, node: usize) -> String {
        let s = self.lease_of(node);
        format!(
            "/coreos.com/network/subnets/{}-{}",
            s.network(),
            s.prefix_len()
        )
    }

    /// Asserts that every value of node `node`'s lease since revision `since` (a restart of
    /// its flanneld) carried a VtepMAC: the other nodes never saw it without one.
    #[track_caller]
    pub fn assert_vtep_mac_kept(&self, node: usize, since: i64) {
        let key = self.lease_key(node);
        for v in self.values_since(&key, since) {
            assert!(
                v.contains("\"VtepMAC\""),
                "the restart published {key} without its VtepMAC: {v:?}"
            );
        }
    }

    /// Waits for flanneld `proc_` to have programmed its first routes to the other nodes.
    pub fn wait_synced(&self, proc_: usize) {
        wait_for("flanneld's first sync", 30, || {
            self.procs[proc_]
                .log()
                .contains("routes to the other nodes' subnets in place")
        });
    }

    /// Adds node `i` at 10.<net>.0.(11+i); its namespace index.
    pub fn node(&mut self, i: u8) -> usize {
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

    pub fn node_ip(&self, i: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, self.net, 0, 11 + i)
    }

    pub fn subnet_file(&self, node: usize) -> PathBuf {
        self.dir.path().join(format!("n{node}/subnet.env"))
    }

    pub fn flanneld(&mut self, node: usize, extra: &[&str]) -> usize {
        let url = self.etcd_url();
        let sf = self.subnet_file(node);
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

    pub fn wait_ready(&self, proc_: usize) {
        wait_for("flanneld ready", 60, || {
            let log = self.procs[proc_].log();
            assert!(!log.contains("Error:"), "flanneld failed:\n{log}");
            log.contains("flanneld ready")
        });
    }

    pub fn lease_of(&self, node: usize) -> ipnet::Ipv4Net {
        let text = std::fs::read_to_string(self.subnet_file(node)).expect("subnet.env");
        flannel::subnet_env::SubnetEnv::previous_subnet(&text).expect("FLANNEL_SUBNET")
    }
}

pub fn put_config(lab: &Lab, conf: &str) {
    lab.etcdctl(&["put", "/coreos.com/network/config", conf]);
}

/// The routes, neighbours, FDB and links of a node, to compare before and after.
pub fn kernel_state(ns: &Ns) -> (String, String, String, String) {
    (
        ns.ip(&["route", "show"]),
        ns.ip(&["neigh", "show", "nud", "permanent"]),
        ns.exec(&["bridge", "fdb", "show", "dev", "flannel.4096"]),
        ns.ip(&["-d", "link", "show", "flannel.4096"]),
    )
}

pub fn echo(client: &mut TcpStream, conn: &mut TcpStream, msg: &[u8]) {
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

impl Lab {
    /// Starts hnsd with its data plane in node `node`'s namespace; its socket.
    pub fn hnsd(&mut self, node: usize) -> PathBuf {
        let dir = self.dir.path().join(format!("hnsd{node}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let hnsd = HnsdCommand::new(WINNET, &dir)
            .in_netns(&self.nodes[node].0)
            .args(&["--dataplane", "--nic", "eth0"])
            .log_level("info")
            .start();
        let sock = hnsd.socket().to_path_buf();
        self.hnsds.push(hnsd);
        sock
    }
}

/// `winnet hns ARGS -o json` against `sock`.
pub fn hns_json(sock: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let stdout = testkit::cmd::ok(
        Command::new(WINNET)
            .arg("hns")
            .args(args)
            .args(["-o", "json", "--hns-socket"])
            .arg(sock),
    );
    // One object prints as itself, several as an array or one document each.
    let docs: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&stdout)
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

pub fn network(sock: &std::path::Path, name: &str) -> Option<serde_json::Value> {
    let all = hns_json(sock, &["list", "networks"]);
    all.as_array()?.iter().find(|n| n["Name"] == name).cloned()
}

pub fn policies_of<'a>(net: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    net["Policies"]
        .as_array()
        .map(|p| p.iter().filter(|p| p["Type"] == kind).collect())
        .unwrap_or_default()
}

impl Proc {
    /// Waits for the process to exit by itself; its status.
    pub fn wait_exit(&mut self, secs: u64) -> std::process::ExitStatus {
        let log = self.log.clone();
        testkit::wait::until("the process to exit", Duration::from_secs(secs), || {
            let read = || std::fs::read_to_string(&log).unwrap_or_default();
            self.child.try_wait().expect("try_wait").ok_or_else(read)
        })
    }
}

impl Lab {
    /// Writes net-conf.json for the kube subnet manager; its path.
    pub fn net_conf_file(&self, text: &str) -> PathBuf {
        let path = self.dir.path().join("net-conf.json");
        std::fs::write(&path, text).expect("write net-conf.json");
        path
    }

    /// Writes the node's subnet.env as a last run of flanneld left it.
    pub fn put_subnet_env(&self, node: usize, text: &str) {
        let sf = self.subnet_file(node);
        std::fs::create_dir_all(sf.parent().expect("dir")).expect("mkdir");
        std::fs::write(&sf, text).expect("the last run's subnet.env");
    }

    /// The keys of every lease in etcd, sorted.
    pub fn lease_keys(&self) -> Vec<String> {
        let keys = self.etcdctl(&[
            "get",
            "/coreos.com/network/subnets/",
            "--prefix",
            "--keys-only",
        ]);
        let mut keys: Vec<String> = keys.split_whitespace().map(String::from).collect();
        keys.sort();
        keys
    }

    /// The node's subnet.env, if flanneld wrote it.
    pub fn subnet_env(&self, node: usize) -> Option<String> {
        std::fs::read_to_string(self.subnet_file(node)).ok()
    }
}

/// Runs `cmd` with `input` on its stdin; its output.
pub fn run_with_stdin(cmd: &mut Command, input: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("the process exits")
}
