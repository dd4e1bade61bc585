//! A node for end-to-end plugin tests: a Windows node as a network namespace with a NIC and
//! `winnet hnsd --node-netns` serving it (so attached endpoints become TAPs in the pods'
//! namespaces), the winnet binary installed under the plugin names (`winnet install-cni`), pod
//! namespaces made with `ip netns add` as a runtime makes them, and calls made as a runtime
//! makes them: a separate process, the `CNI_*` environment, the config on stdin. Root only
//! (CI is); everything made is removed when the node is dropped.

#![allow(dead_code)]

pub mod cri;
pub mod engines;

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use hcn::Guid;
use hns_client::Client;
use serde_json::{Value, json};
use testkit::hnsd::{HnsdCommand, HnsdProcess};

/// Debian's plugins (containernetworking-plugins).
pub const DEBIAN_CNI: &str = "/usr/lib/cni";

/// The winnet binary under test.
pub fn winnet() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_winnet"))
}

/// One Windows node: its namespace, hnsd, a plugin directory, scratch dirs, pod namespaces.
pub struct Node {
    pub dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    hnsd: Option<HnsdProcess>,
    /// The node's namespace (`ip netns` name).
    pub node_ns: String,
    /// Pod namespaces made so far.
    pods: Mutex<Vec<String>>,
}

/// What a plugin run printed and returned.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub out: Value,
    pub stderr: String,
}

impl Run {
    /// The result of a successful run; panics with the plugin's error otherwise.
    #[track_caller]
    pub fn ok(&self) -> &Value {
        assert_eq!(
            self.code, 0,
            "plugin failed: {} (stderr: {})",
            self.out, self.stderr
        );
        &self.out
    }

    /// The CNI error code of a failed run.
    #[track_caller]
    pub fn err_code(&self) -> u64 {
        assert_ne!(self.code, 0, "plugin succeeded: {}", self.out);
        self.out["code"]
            .as_u64()
            .expect("an error object with a code")
    }

    pub fn msg(&self) -> &str {
        self.out["msg"].as_str().unwrap_or_default()
    }
}

impl Node {
    /// Makes the node's namespace (a NIC `eth0` whose peer stays inside it), starts `winnet
    /// hnsd --node-netns` (the default profile) and installs the plugins with `winnet install-cni`.
    pub fn start() -> Node {
        testkit::require_root("the CNI end-to-end tests make namespaces and TAPs");
        let ipam_ok = Path::new(DEBIAN_CNI).join("host-local").is_file();
        assert!(
            ipam_ok,
            "Debian's host-local is missing: apt-get install -y containernetworking-plugins"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let node_ns = format!("wc{}n{n}", std::process::id());
        let mut node = Node {
            dir,
            rt,
            hnsd: None,
            node_ns,
            pods: Mutex::new(Vec::new()),
        };
        let ns = node.node_ns.clone();
        ip(&["netns", "add", &ns]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&[
            "-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", "wire0",
        ]);
        ip(&["-n", &ns, "addr", "add", "192.168.99.11/24", "dev", "eth0"]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        ip(&["-n", &ns, "link", "set", "wire0", "up"]);
        ip(&["-n", &ns, "route", "add", "default", "via", "192.168.99.1"]);
        node.start_hnsd();
        testkit::cmd::ok(
            Command::new(winnet())
                .arg("install-cni")
                .arg(node.plugin_dir()),
        );
        node
    }

    fn start_hnsd(&mut self) {
        let dir = self.dir.path();
        let hnsd = HnsdCommand::new(winnet(), dir)
            .state_dir(dir.join("hnsd"))
            .node(&self.node_ns, "eth0")
            .log_level("warn")
            .start();
        self.hnsd = Some(hnsd);
    }

    /// What hnsd logged.
    pub fn hnsd_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("hnsd.log")).unwrap_or_default()
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("hns.sock")
    }
    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.path().join("bin")
    }
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("cni-state")
    }
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("host-local")
    }

    /// `CNI_PATH`: our plugins, then Debian's.
    pub fn cni_path(&self) -> String {
        format!("{}:{DEBIAN_CNI}", self.plugin_dir().display())
    }

    pub fn client(&self) -> Client {
        Client::new(self.socket())
    }

    /// Runs an HNS call (or any future) on the node's runtime.
    pub fn hns<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Stops hnsd (STATUS tests).
    pub fn stop_hnsd(&mut self) {
        // Dropping it kills and reaps it.
        self.hnsd = None;
    }

    /// A pod network namespace, made as a runtime makes it (`ip netns add`); its path.
    /// The same name twice gives the same namespace.
    pub fn netns(&self, name: &str) -> String {
        let full = format!("{}-{name}", self.node_ns);
        let mut pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        if !pods.contains(&full) {
            ip(&["netns", "add", &full]);
            pods.push(full.clone());
        }
        format!("/run/netns/{full}")
    }

    /// The addresses (`addr/len`) of interface `dev` in the namespace at `netns`; `None` when
    /// the interface does not exist.
    pub fn addresses_in(&self, netns: &str, dev: &str) -> Option<Vec<String>> {
        let name = netns.rsplit('/').next().unwrap_or(netns);
        let out = Command::new("ip")
            .args(["-n", name, "-j", "addr", "show", "dev", dev])
            .output()
            .expect("run ip");
        if !out.status.success() {
            return None;
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        Some(
            v.as_array()
                .into_iter()
                .flatten()
                .flat_map(|l| l["addr_info"].as_array().cloned().unwrap_or_default())
                .filter(|a| a["family"] == "inet" || a["scope"] == "global")
                .filter_map(|a| {
                    Some(format!(
                        "{}/{}",
                        a["local"].as_str()?,
                        a["prefixlen"].as_u64()?
                    ))
                })
                .collect(),
        )
    }

    /// An L2Bridge network like flanneld's host-gw one: `prefix`, gateway `.1`.
    pub fn l2bridge(&self, name: &str, prefix: &str, gateway: &str) -> Guid {
        self.network(json!({
            "Name": name, "Type": "L2Bridge",
            "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": prefix,
                "Routes": [{"NextHop": gateway, "DestinationPrefix": "0.0.0.0/0"}]}]}],
        }))
    }

    /// An Overlay network like flanneld's vxlan one, with VSID 4096 and the node's PA.
    pub fn overlay(&self, name: &str, prefix: &str, gateway: &str, pa: &str) -> Guid {
        self.network(json!({
            "Name": name, "Type": "Overlay",
            "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": prefix,
                "Routes": [{"NextHop": gateway, "DestinationPrefix": "0.0.0.0/0"}],
                "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
            "Policies": [{"Type": "ProviderAddress", "Settings": {"ProviderAddress": pa}}],
        }))
    }

    pub fn network(&self, doc: Value) -> Guid {
        let net: hcn::Network = serde_json::from_value(doc).expect("network document");
        self.hns(self.client().create_network(&net))
            .expect("create network")
            .id
    }

    /// Runs `plugin` with `env` (CNI_* and extras) and `stdin`, as a runtime does.
    pub fn call(&self, plugin: &str, env: &[(&str, &str)], stdin: &str) -> Run {
        let mut cmd = Command::new(self.plugin_dir().join(plugin));
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HNS_SOCKET", self.socket())
            .env("WINNET_CNI_STATE_DIR", self.state_dir())
            .env("CNI_PATH", self.cni_path())
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn plugin");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(stdin.as_bytes())
            .expect("write stdin");
        let out = child.wait_with_output().expect("plugin exits");
        let text = String::from_utf8_lossy(&out.stdout);
        let value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {text}"))
        };
        Run {
            code: out.status.code().unwrap_or(-1),
            out: value,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// `CNI_COMMAND=<verb>` for a container in `netns`, interface eth0.
    pub fn verb(&self, plugin: &str, verb: &str, container: &str, netns: &str, conf: &str) -> Run {
        self.call(
            plugin,
            &[
                ("CNI_COMMAND", verb),
                ("CNI_CONTAINERID", container),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", "eth0"),
            ],
            conf,
        )
    }

    /// CHECK with the ADD result as prevResult.
    pub fn check(
        &self,
        plugin: &str,
        container: &str,
        netns: &str,
        conf: &str,
        prev: &Value,
    ) -> Run {
        self.verb(
            plugin,
            "CHECK",
            container,
            netns,
            &with(conf, "prevResult", prev.clone()),
        )
    }

    /// GC keeping `valid` (container IDs on eth0).
    pub fn gc(&self, plugin: &str, conf: &str, valid: &[&str]) -> Run {
        let list: Vec<Value> = valid
            .iter()
            .map(|c| json!({"containerID": c, "ifname": "eth0"}))
            .collect();
        self.call(
            plugin,
            &[("CNI_COMMAND", "GC")],
            &with(conf, "cni.dev/valid-attachments", Value::Array(list)),
        )
    }

    /// Addresses host-local holds for `network`, with the container each is held for.
    pub fn allocations(&self, network: &str) -> Vec<(String, String)> {
        allocations_in(&self.ipam_dir().join(network))
    }

    pub fn endpoints(&self) -> Vec<hcn::Endpoint> {
        self.hns(self.client().list_endpoints())
            .expect("list endpoints")
    }

    pub fn namespaces(&self) -> Vec<hcn::Namespace> {
        self.hns(self.client().list_namespaces())
            .expect("list namespaces")
    }

    /// Every HNS object, for before/after comparisons.
    pub fn dump(&self) -> Vec<Vec<Value>> {
        hns_client::Kind::ALL
            .iter()
            .map(|k| self.hns(self.client().list_raw(*k, None)).expect("list"))
            .collect()
    }

    /// Files under the plugins' state dir (records of pods).
    pub fn records(&self) -> Vec<String> {
        let mut out = Vec::new();
        for net in std::fs::read_dir(self.state_dir())
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in std::fs::read_dir(net.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push(f.path().to_string_lossy().into_owned());
            }
        }
        out
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Namespaces hnsd made for HCN namespaces created without one (hcn-<id>) outlive it
        // by design (a restarted hnsd adopts them); the test removes them.
        if self.hnsd.is_some()
            && let Ok(nss) = self.hns(self.client().list_namespaces())
        {
            for ns in nss.iter().filter(|n| n.linux_netns.is_empty()) {
                let _ = Command::new("ip")
                    .args(["netns", "del", &format!("hcn-{}", ns.id)])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        self.stop_hnsd();
        let pods = std::mem::take(&mut *self.pods.lock().unwrap_or_else(|p| p.into_inner()));
        for p in pods {
            let _ = Command::new("ip").args(["netns", "del", &p]).status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(&p));
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.node_ns])
            .status();
    }
}

/// Runs `ip ARGS`, which must succeed.
fn ip(args: &[&str]) {
    testkit::cmd::ok(Command::new("ip").args(args));
}

/// host-local's files in a network dir: one per address, holding `<container>\r\n<ifname>`.
pub fn allocations_in(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for f in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if name.parse::<std::net::IpAddr>().is_ok() {
            let holder = std::fs::read_to_string(f.path()).unwrap_or_default();
            let id = holder.lines().next().unwrap_or_default().trim().to_string();
            out.push((name, id));
        }
    }
    out.sort();
    out
}

/// `conf` with a top-level key set.
pub fn with(conf: &str, key: &str, value: Value) -> String {
    let mut v: Value = serde_json::from_str(conf).expect("conf is JSON");
    v[key] = value;
    v.to_string()
}

/// A win-bridge config on `network` with host-local IPAM in the node's scratch dir.
pub fn win_bridge_conf(
    node: &Node,
    version: &str,
    network: &str,
    subnet: &str,
    range_start: &str,
) -> String {
    json!({
        "cniVersion": version,
        "name": network,
        "type": "win-bridge",
        "apiVersion": 2,
        "capabilities": {"portMappings": true, "dns": true},
        "ipMasqNetwork": "10.244.0.0/16",
        "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]},
        "policies": [
            {"name": "EndpointPolicy", "value": {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.96.0.0/12"]}}},
            {"name": "EndpointPolicy", "value": {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}}}
        ],
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": subnet, "rangeStart": range_start}]],
            "dataDir": node.ipam_dir().to_string_lossy(),
        },
    })
    .to_string()
}

/// The first address of a result, in any version's shape.
pub fn result_ip(r: &Value) -> String {
    r["ips"][0]["address"]
        .as_str()
        .or_else(|| r["ip4"]["ip"].as_str())
        .unwrap_or_else(|| panic!("no address in {r}"))
        .to_string()
}
