//! Pods on the lab's nodes. A Linux node's pod is a namespace behind a veth whose node end is
//! the subnet's .1 (what a bridge CNI on Linux gives). A Windows node's pod is made as a
//! container runtime makes one there: a namespace, then the flannel CNI plugin (installed by
//! `winnet install-cni`) run with ADD, which reads flanneld's subnet.env and delegates to
//! win-bridge (host-gw) or win-overlay (vxlan) with Debian's host-local.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use super::{Lab, Ns, WINNET, run_with_stdin};

/// Where Debian installs the reference CNI plugins (host-local).
const DEBIAN_CNI: &str = "/usr/lib/cni";
/// host-local's data dir for configs without `ipam.dataDir` (flannel's delegates have none).
const HOST_LOCAL_DIR: &str = "/var/lib/cni/networks";

/// A directory removed on drop.
pub struct RemoveDir(pub PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Which delegate the flannel plugin runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delegate {
    WinBridge,
    WinOverlay,
}

impl Lab {
    /// A Linux pod on `node`: `<subnet>.<host>/24` behind a veth whose node end holds .1.
    pub fn linux_pod(&mut self, node: usize, subnet: ipnet::Ipv4Net) -> Ipv4Addr {
        let k = self.pods.len();
        let ns = Ns::new(format!("{}-p{k}", self.name));
        let o = subnet.network().octets();
        let gw = Ipv4Addr::new(o[0], o[1], o[2], 1);
        let ip = Ipv4Addr::new(o[0], o[1], o[2], 5 + k as u8);
        let host = format!("pod{k}");
        self.nodes[node].ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &ns.0,
        ]);
        let have = self.nodes[node].ip(&["addr", "show"]);
        if !have.contains(&format!("inet {gw}/")) {
            self.nodes[node].ip(&["addr", "add", &format!("{gw}/24"), "dev", &host]);
        } else {
            // A second pod: reach it by a host route on its own veth.
            self.nodes[node].ip(&["link", "set", &host, "up"]);
            self.nodes[node].ip(&["route", "add", &format!("{ip}/32"), "dev", &host]);
        }
        self.nodes[node].ip(&["link", "set", &host, "up"]);
        ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        ns.ip(&["link", "set", "eth0", "up"]);
        ns.ip(&["route", "add", "default", "via", &gw.to_string()]);
        self.pods.push(ns);
        ip
    }

    /// The CNI plugins, installed once per lab.
    fn plugin_dir(&self) -> PathBuf {
        let dir = self.dir.path().join("cni-bin");
        if !dir.join("flannel").exists() {
            testkit::cmd::ok(Command::new(WINNET).arg("install-cni").arg(&dir));
        }
        assert!(
            Path::new(DEBIAN_CNI).join("host-local").is_file(),
            "Debian's host-local is missing: apt-get install -y containernetworking-plugins"
        );
        dir
    }

    /// The flannel CNI config a Windows node of this lab uses: the network `network` (the
    /// HNS network's name, as on a real node), subnet.env where flanneld wrote it.
    pub fn flannel_cni_conf(&self, node: usize, network: &str, delegate: Delegate) -> String {
        let net = self.net;
        let mut policies = vec![json!({"Name": "EndpointPolicy", "Value": {
            "Type": "OutBoundNAT",
            "ExceptionList": ["10.244.0.0/16", "10.96.0.0/12", format!("10.{net}.0.0/24")]}})];
        policies.push(json!({"Name": "EndpointPolicy", "Value": {
            "Type": "ROUTE", "DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}}));
        let (kind, key) = match delegate {
            Delegate::WinBridge => {
                let node_ip = self.node_ip(node as u8);
                policies.push(json!({"Name": "EndpointPolicy", "Value": {
                    "Type": "ROUTE", "DestinationPrefix": format!("{node_ip}/32"), "NeedEncap": true}}));
                ("win-bridge", "policies")
            }
            Delegate::WinOverlay => ("win-overlay", "Policies"),
        };
        json!({
            "cniVersion": "0.2.0",
            "name": network,
            "type": "flannel",
            "subnetFile": self.subnet_file(node),
            "dataDir": self.dir.path().join(format!("n{node}/flannel-cni")),
            "delegate": {"type": kind, key: policies},
        })
        .to_string()
    }

    /// Marks `ip` as taken in host-local's store of `network` (removed with the lab).
    pub fn reserve_in_host_local(&mut self, network: &str, ip: Ipv4Addr) {
        let dir = Path::new(HOST_LOCAL_DIR).join(network);
        std::fs::create_dir_all(&dir).expect("host-local's dir (run as root)");
        if !self.cleanup.iter().any(|d| d.0 == dir) {
            self.cleanup.push(RemoveDir(dir.clone()));
        }
        std::fs::write(dir.join(ip.to_string()), "reserved\neth0").expect("reserve");
    }

    /// A pod on the Windows node whose hnsd is at `sock`, made by the flannel CNI plugin with
    /// `conf`; its namespace index in `pods` and its address.
    pub fn windows_pod(&mut self, sock: &Path, conf: &str) -> (usize, Ipv4Addr) {
        let network = serde_json::from_str::<Value>(conf).expect("conf")["name"]
            .as_str()
            .expect("name")
            .to_string();
        let ipam = Path::new(HOST_LOCAL_DIR).join(&network);
        if !self.cleanup.iter().any(|d| d.0 == ipam) {
            self.cleanup.push(RemoveDir(ipam));
        }
        let k = self.pods.len();
        let ns = Ns::new(format!("{}-p{k}", self.name));
        let plugins = self.plugin_dir();
        let out = run_with_stdin(
            Command::new(plugins.join("flannel"))
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HNS_SOCKET", sock)
                .env("WINNET_CNI_STATE_DIR", self.dir.path().join("cni-state"))
                .env("CNI_PATH", format!("{}:{DEBIAN_CNI}", plugins.display()))
                .env("CNI_COMMAND", "ADD")
                .env("CNI_CONTAINERID", format!("{}-{k}", self.name))
                .env("CNI_NETNS", format!("/run/netns/{}", ns.0))
                .env("CNI_IFNAME", "eth0"),
            conf,
        );
        assert!(
            out.status.success(),
            "flannel ADD: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let r: Value = serde_json::from_slice(&out.stdout).expect("a CNI result");
        let ip = r["ip4"]["ip"]
            .as_str()
            .and_then(|s| s.split('/').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no ip4.ip in {r}"));
        self.pods.push(ns);
        (k, ip)
    }
}
