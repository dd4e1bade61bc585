//! Pods: a namespace per pod, added to the node's network by the CNI plugin a runtime would
//! call (win-bridge / win-overlay through the node's hnsd on Windows nodes; Debian's `bridge`
//! on the Linux node), with host-local on the subnet flanneld leased the node — read from the
//! node's subnet.env as the flannel CNI plugin reads it — and a server in each pod.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use flannel::windows::host_of;
use host::netns::Netns;
use ipnet::IpNet;
use lab::sim::agents::cni::{FIRST_POD, NetworkConf, PodOptions, cluster_dns_conf, cni_config};
use serde_json::{Value, json};

use super::super::leases;
use super::super::topology::{Mode, Os, linux_pod_resolv_conf};
use super::super::{NS_PREFIX, PodState, procs};
use super::{Builder, DEBIAN_CNI};

impl Builder {
    /// Pod `name` on node `i`, with `winnet serve` in it.
    pub(super) fn pod(&mut self, i: usize, name: &str, plugins: &Path) -> anyhow::Result<()> {
        let node = self.state.nodes[i].name.clone();
        let pod = self.add_pod(i, name, plugins)?;
        self.serve(&format!("{node}-{name}"), &pod.netns, true)
    }

    /// Pod `name`'s namespace on node `i`, added to the node's network by its CNI plugin and
    /// recorded; nothing runs in it yet.
    pub(super) fn add_pod(
        &mut self,
        i: usize,
        name: &str,
        plugins: &Path,
    ) -> anyhow::Result<PodState> {
        let node = self.state.nodes[i].name.clone();
        let ns = self.ns(&format!("{node}-{name}"))?;
        let result = self
            .cni(i, "ADD", name, &ns, plugins)?
            .with_context(|| format!("CNI ADD of {name}: no result"))?;
        let addresses: Vec<IpAddr> = result["ips"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["address"].as_str()?.split('/').next()?.parse().ok())
            .collect();
        let ip = addresses
            .iter()
            .find_map(|a| match a {
                IpAddr::V4(v4) => Some(*v4),
                IpAddr::V6(_) => None,
            })
            .with_context(|| format!("the CNI result of {name} has no IPv4 address: {result}"))?;
        let ip6 = addresses.iter().find_map(|a| match a {
            IpAddr::V6(v6) => Some(*v6),
            IpAddr::V4(_) => None,
        });
        if self.state.nodes[i].os == Os::Linux {
            // kubelet (through the runtime) gives a Linux pod its resolv.conf; `ip netns exec`
            // binds /etc/netns/<ns>/resolv.conf over /etc/resolv.conf.
            let etc = Path::new("/etc/netns").join(&ns);
            std::fs::create_dir_all(&etc).with_context(|| format!("create {}", etc.display()))?;
            std::fs::write(etc.join("resolv.conf"), linux_pod_resolv_conf())?;
        }
        let pod = PodState {
            name: name.to_string(),
            netns: ns,
            ip,
            ip6,
        };
        self.state.nodes[i].pods.push(pod.clone());
        self.state.save(&self.dir)?;
        Ok(pod)
    }

    /// Removes pod `name` from node `i` as a runtime does when the pod goes: its server
    /// stopped, CNI DEL through the node's plugin, its namespace removed, its record dropped.
    /// A pod whose ADD failed has no record but its namespace: DEL and the namespace all the
    /// same (a runtime calls DEL after a failed ADD, and again until it succeeds).
    pub(super) fn delete_pod(
        &mut self,
        i: usize,
        name: &str,
        plugins: &Path,
    ) -> anyhow::Result<()> {
        let node = self.state.nodes[i].name.clone();
        let ns = format!("{NS_PREFIX}{node}-{name}");
        let at = self.state.nodes[i].pods.iter().position(|p| p.name == name);
        if at.is_none() && !self.state.namespaces.contains(&ns) {
            bail!("{node} has no pod {name}");
        }
        let server = format!("{node}-{name} serve");
        let (servers, rest): (Vec<_>, Vec<_>) =
            self.state.procs.drain(..).partition(|p| p.name == server);
        self.state.procs = rest;
        let left = procs::stop(&servers);
        self.state.save(&self.dir)?;
        if !left.is_empty() {
            bail!("cannot stop {}", left.join(", "));
        }
        self.cni(i, "DEL", name, &ns, plugins)?;
        Netns::named(&ns).delete()?;
        let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(&ns));
        self.state.namespaces.retain(|n| *n != ns);
        if let Some(at) = at {
            self.state.nodes[i].pods.remove(at);
        }
        self.state.save(&self.dir)
    }

    /// CNI `command` (ADD or DEL) for pod `name` in namespace `ns` on node `i`, as a runtime
    /// calls the node's plugin with the node's config; the plugin's result.
    fn cni(
        &self,
        i: usize,
        command: &str,
        name: &str,
        ns: &str,
        plugins: &Path,
    ) -> anyhow::Result<Option<Value>> {
        let conf = self.cni_conf(i)?;
        let (plugin, run_in) = self.cni_plugin(i, &conf, plugins);
        CniCall {
            command,
            plugin: &plugin,
            run_in: run_in.as_deref(),
            container: name,
            netns: ns,
            socket: &self.socket(i),
            node_dir: &self.node_dir(i),
            plugins,
        }
        .run(&conf)
    }

    /// The plugin a runtime runs for node `i` with `conf`, and the namespace to run it in.
    fn cni_plugin(&self, i: usize, conf: &Value, plugins: &Path) -> (PathBuf, Option<String>) {
        match self.state.nodes[i].os {
            // The plugin the config names, as a runtime picks it (win-bridge, win-overlay, or
            // sdnbridge on a dual-stack L2Bridge node).
            Os::Windows => (
                plugins.join(conf["type"].as_str().unwrap_or(match self.t.mode {
                    Mode::L2bridge => "win-bridge",
                    Mode::Overlay => "win-overlay",
                })),
                None,
            ),
            // Debian's bridge plugin makes its bridge in the namespace it runs in: the node's.
            Os::Linux => (
                Path::new(DEBIAN_CNI).join("bridge"),
                Some(self.state.nodes[i].netns.clone()),
            ),
        }
    }

    /// The node's CNI config, on the lease in its subnet.env.
    fn cni_conf(&self, i: usize) -> anyhow::Result<Value> {
        let n = &self.state.nodes[i];
        let env = cni::subnet_env::SubnetEnv::load(&self.subnet_file(i))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let Some(IpNet::V4(subnet)) = env.subnet else {
            bail!("{}: no IPv4 FLANNEL_SUBNET", self.subnet_file(i).display());
        };
        let name = leases::network_name(self.t.mode);
        if n.os == Os::Windows {
            // The same config the in-memory cluster gives its pods.
            let ipam_dir = self.ipam_dir(i);
            let net = NetworkConf {
                name: &name,
                overlay: self.t.mode == Mode::Overlay,
                subnet: IpNet::V4(subnet),
                node_ip: IpAddr::V4(n.ip),
                ipam_dir: &ipam_dir,
                subnet6: self.network_v6(i)?.map(IpNet::V6),
            };
            return cni_config(&net, &PodOptions::cluster())
                .map_err(|e| anyhow::anyhow!("{}", e.detail));
        }
        // Debian's bridge plugin on the Linux node, as flannel's CNI plugin delegates to it with
        // kube-flannel's `cni-conf.json`: hairpinMode lets a pod reach itself through a Service
        // (kube-proxy DNATs and masquerades the connection back to the pod, and the bridge, which
        // sees it through br_netfilter, must send it out of the port it came in by).
        let mut conf = json!({
            "cniVersion": "1.0.0", "name": "cbr0", "type": "bridge", "bridge": "cni0",
            "isGateway": true, "ipMasq": false, "hairpinMode": true, "mtu": env.mtu,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": subnet.to_string(), "rangeStart": host_of(subnet, u32::from(FIRST_POD)).to_string()}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": self.ipam_dir(i).to_string_lossy(),
            },
        });
        let dns = cluster_dns_conf();
        conf["capabilities"] = dns["capabilities"].clone();
        conf["runtimeConfig"] = dns["runtimeConfig"].clone();
        Ok(conf)
    }
}

/// A CNI call (ADD or DEL) as a runtime makes it.
struct CniCall<'a> {
    command: &'a str,
    plugin: &'a Path,
    /// The namespace to run the plugin in (Debian's bridge makes its bridge where it runs).
    run_in: Option<&'a str>,
    container: &'a str,
    netns: &'a str,
    socket: &'a Path,
    node_dir: &'a Path,
    plugins: &'a Path,
}

impl CniCall<'_> {
    /// Runs the plugin with `conf`; its result (DEL has none).
    fn run(&self, conf: &Value) -> anyhow::Result<Option<Value>> {
        let mut cmd = match self.run_in {
            Some(ns) => procs::command_in(ns, self.plugin),
            None => Command::new(self.plugin),
        };
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("CNI_COMMAND", self.command)
            .env("CNI_CONTAINERID", self.container)
            .env("CNI_NETNS", format!("/run/netns/{}", self.netns))
            .env("CNI_IFNAME", "eth0")
            .env(
                "CNI_PATH",
                format!("{}:{DEBIAN_CNI}", self.plugins.display()),
            )
            .env("HNS_SOCKET", self.socket)
            .env("WINNET_CNI_STATE_DIR", self.node_dir.join("cni-state"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot run {}", self.plugin.display()))?;
        child
            .stdin
            .take()
            .context("plugin stdin")?
            .write_all(conf.to_string().as_bytes())?;
        let out = child.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "CNI {} of {} with {} failed: {text} {}",
                self.command,
                self.container,
                self.plugin.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("CNI result of {}: {text}", self.container))
    }
}
