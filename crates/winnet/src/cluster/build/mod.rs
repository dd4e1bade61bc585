//! `winnet cluster up`: what a cloud and a kubelet would make — the fabric (a Linux bridge in
//! its own namespace), the external host, node namespaces plugged into the fabric, the pods'
//! namespaces and the Kubernetes objects — and every node's components started as the node
//! would start them: flannel's etcd on the fabric ([`flannel`]), on Windows nodes hnsd, then
//! `winnet flanneld` (which makes the HNS network), the pods added by the CNI plugins as a
//! runtime calls them ([`pods`]), the cluster DNS's pods ([`cluster_dns`]) and `winnet proxy`
//! on the manifests ([`services`]); on Linux
//! nodes `winnet flanneld` (routes, VXLAN device), Debian's `bridge` + `host-local` plugins and
//! `winnet proxy --proxy-mode nftables` (kube-proxy's nftables mode).

pub(crate) mod cluster_dns;
mod flannel;
pub(crate) mod knot;
pub(crate) mod pods;
pub(crate) mod services;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use host::ethtool::{self, Offload};
use host::netlink::{MacText, RouteEntry};
use host::netns::Netns;
use ipnet::{IpNet, Ipv4Net};

use super::topology::{
    self, ETCD_IP, EXTERNAL_IP, HTTP_PORT, Mode, OUTSIDE_IP, Os, Topology, UDP_PORT,
};
use super::{NS_PREFIX, NodeState, State, netlink_in, procs, sh};

/// The fabric's bridge, which every node's and the external host's `eth0` is a port of.
const FABRIC_BRIDGE: &str = "br0";

pub use lab::sim::agents::cni::DEBIAN_CNI;

/// Builds the cluster; `progress` is told what is happening.
pub fn up(t: &Topology, dir: &Path, progress: &mut dyn FnMut(&str)) -> anyhow::Result<State> {
    if State::load(dir)?.is_some() {
        bail!(
            "a cluster is already up ({}); run `winnet cluster down` first",
            dir.display()
        );
    }
    let winnet = std::env::current_exe().context("cannot find the winnet binary")?;
    let mut b = Builder {
        dir: dir.to_path_buf(),
        state: State {
            topology: Some(t.clone()),
            ..State::default()
        },
        t: t.clone(),
        winnet: winnet.to_string_lossy().into_owned(),
        _lock: None,
    };
    b.state.save(dir)?;
    let plugins = dir.join("cni-bin");
    sh(&[&b.winnet, "install-cni", &plugins.to_string_lossy()])?;
    progress("fabric, external host and flannel's etcd");
    b.fabric()?;
    b.external()?;
    b.etcd()?;
    let mut win = 0;
    let mut lin = 0;
    for n in &t.nodes {
        let ip = match n.os {
            Os::Windows => {
                win += 1;
                topology::node_ip(Os::Windows, win - 1)
            }
            Os::Linux => {
                lin += 1;
                topology::node_ip(Os::Linux, lin - 1)
            }
        };
        progress(&format!("node {} ({:?}, {ip})", n.name, n.os));
        b.node(&n.name, n.os, ip)?;
    }
    for i in 0..t.nodes.len() {
        progress(&format!("flanneld on {} ({})", t.nodes[i].name, t.mode));
        b.flanneld(i)?;
    }
    progress("waiting for every node's routes to the others' subnets");
    b.wait_routes()?;
    b.route_external_to_pods()?;
    b.route_ipv6_pods()?;
    for i in 0..t.nodes.len() {
        for pod in t.nodes[i].pods.clone() {
            progress(&format!("pod {pod} on {}", t.nodes[i].name));
            b.pod(i, &pod, &plugins)?;
        }
    }
    progress("the cluster DNS's pods");
    let dns = b.dns_pods(&plugins)?;
    progress("Services (manifests), the cluster DNS and kube-proxy");
    b.services()?;
    b.preserve_destination_addresses()?;
    b.dns_objects()?;
    b.kube_dns(&dns)?;
    for i in 0..t.nodes.len() {
        match t.nodes[i].os {
            Os::Windows => b.proxy(i)?,
            Os::Linux => b.linux_proxy(i)?,
        }
    }
    b.wait_programmed(progress)?;
    b.wait_dns(progress)?;
    b.state.ready = true;
    b.state.save(dir)?;
    Ok(b.state)
}

/// Adds pod `name` to node `node` of the cluster in `dir`, as a kubelet does: its namespace,
/// the node's CNI plugin, a server in it.
pub fn add_pod(dir: &Path, node: &str, name: &str) -> anyhow::Result<super::PodState> {
    let mut b = Builder::resume(dir)?;
    let i = b.node_index(node)?;
    if b.state.nodes[i].pods.iter().any(|p| p.name == name) {
        bail!("{node} already has a pod {name}");
    }
    let plugins = dir.join("cni-bin");
    if let Err(e) = b.pod(i, name, &plugins) {
        // As a runtime does after a failed ADD: DEL, so that nothing of the pod is left; when
        // that fails too (hnsd down), its namespace stays recorded for `cluster pod delete`.
        return Err(match b.delete_pod(i, name, &plugins) {
            Ok(()) => e.context(format!("pod {name} not added (CNI DEL cleaned up after it)")),
            Err(d) => e.context(format!(
                "pod {name} not added, and the CNI DEL after it failed too ({d:#}): run `winnet cluster pod delete {node} {name}`"
            )),
        });
    }
    b.state.nodes[i]
        .pods
        .last()
        .cloned()
        .context("the pod was not recorded")
}

/// Removes pod `name` from node `node` of the cluster in `dir`, as a kubelet does.
pub fn delete_pod(dir: &Path, node: &str, name: &str) -> anyhow::Result<()> {
    let mut b = Builder::resume(dir)?;
    let i = b.node_index(node)?;
    let plugins = dir.join("cni-bin");
    b.delete_pod(i, name, &plugins)
}

/// Stops the cluster's process `name` with `signal` and starts it again as it was started.
pub fn restart(dir: &Path, name: &str, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
    let mut b = Builder::resume(dir)?;
    let at = b
        .state
        .procs
        .iter()
        .position(|p| p.name == name)
        .with_context(|| {
            let names: Vec<&str> = b.state.procs.iter().map(|p| p.name.as_str()).collect();
            format!(
                "the cluster has no process {name:?}; it has {}",
                names.join(", ")
            )
        })?;
    let p = procs::restart(&b.state.procs[at], signal)?;
    b.state.procs[at] = p;
    b.state.save(&b.dir)
}

/// The cluster being built, and its record.
struct Builder {
    dir: PathBuf,
    state: State,
    t: Topology,
    /// This `winnet` binary: every component is one of its subcommands.
    winnet: String,
    /// Held while a change to a cluster that is up reads and writes its record, so that two
    /// changes at once (a pod added while a process restarts) do not lose one another's.
    _lock: Option<nix::fcntl::Flock<std::fs::File>>,
}

impl Builder {
    /// The cluster in `dir`, as recorded, to change it after `up`.
    fn resume(dir: &Path) -> anyhow::Result<Builder> {
        let path = dir.join("state.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("open {}", path.display()))?;
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| anyhow::anyhow!("lock {}: {e}", path.display()))?;
        let state = State::load(dir)?.context("no cluster is up: run `winnet cluster up` first")?;
        let t = state.topology.clone().context(
            "the cluster's record has no topology (made by an older winnet): take it down and up again",
        )?;
        let winnet = std::env::current_exe().context("cannot find the winnet binary")?;
        Ok(Builder {
            dir: dir.to_path_buf(),
            state,
            t,
            winnet: winnet.to_string_lossy().into_owned(),
            _lock: Some(lock),
        })
    }

    /// The index of node `name`.
    fn node_index(&self, name: &str) -> anyhow::Result<usize> {
        self.state
            .nodes
            .iter()
            .position(|n| n.name == name)
            .with_context(|| {
                let names: Vec<&str> = self.state.nodes.iter().map(|n| n.name.as_str()).collect();
                format!(
                    "the cluster has no node {name:?}; it has {}",
                    names.join(", ")
                )
            })
    }

    /// Makes the namespace `wn-<name>` (with `lo` up), removing one left by an earlier run,
    /// and records it.
    fn ns(&mut self, name: &str) -> anyhow::Result<String> {
        let full = format!("{NS_PREFIX}{name}");
        Netns::named(&full).delete()?;
        Netns::create(&full)?;
        self.state.namespaces.push(full.clone());
        self.state.save(&self.dir)?;
        if self.t.dual_stack {
            // The plan's IPv6 addresses are unique by construction: usable at once, without
            // a second of duplicate address detection on every interface.
            Netns::named(&full).run(|| {
                host::sysctl::set_sysctl("net.ipv6.conf.all.accept_dad", "0")?;
                host::sysctl::set_sysctl("net.ipv6.conf.default.accept_dad", "0")
            })?;
        }
        Ok(full)
    }

    /// Starts `args` in `netns` as `name`, logging to `<log>.log`, and records it.
    fn spawn(&mut self, name: &str, netns: &str, args: &[&str], log: &str) -> anyhow::Result<()> {
        let p = procs::spawn(name, netns, args, &self.dir.join(format!("{log}.log")))?;
        self.state.procs.push(p);
        self.state.save(&self.dir)
    }

    /// Starts `winnet serve` in `netns`.
    fn serve(&mut self, name: &str, netns: &str, udp: bool) -> anyhow::Result<()> {
        let tcp = HTTP_PORT.to_string();
        let udp_port = UDP_PORT.to_string();
        let mut args = vec![self.winnet.as_str(), "serve", "--tcp", &tcp];
        if udp {
            args.extend(["--udp", &udp_port]);
        }
        let w = args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let refs: Vec<&str> = w.iter().map(String::as_str).collect();
        self.spawn(
            &format!("{name} serve"),
            netns,
            &refs,
            &format!("{name}-serve"),
        )
    }

    /// The fabric: a bridge, holding the address etcd listens on.
    fn fabric(&mut self) -> anyhow::Result<()> {
        let f = self.ns("fabric")?;
        let etcd = IpNet::from(Ipv4Net::new(ETCD_IP, 24)?);
        netlink_in(&f, |nl| {
            nl.add_bridge(FABRIC_BRIDGE)?;
            let br = nl.existing_link(FABRIC_BRIDGE)?;
            nl.add_address(br.index, etcd)?;
            nl.set_up(br.index, true)
        })
    }

    /// Plugs `netns` into the fabric as `eth0` with `ip`; the fabric end is `port`, a port of
    /// the fabric's bridge. The MAC of `eth0`.
    fn plug(&mut self, netns: &str, port: &str, ip: Ipv4Addr) -> anyhow::Result<String> {
        let f = format!("{NS_PREFIX}fabric");
        let inside = Netns::named(netns);
        netlink_in(&f, |nl| {
            nl.add_veth(port, "eth0", Some(&inside))?;
            let br = nl.existing_link(FABRIC_BRIDGE)?;
            let end = nl.existing_link(port)?;
            nl.set_master(end.index, Some(br.index))?;
            nl.set_up(end.index, true)
        })?;
        let addr = IpNet::from(Ipv4Net::new(ip, 24)?);
        let addr6 = self
            .t
            .dual_stack
            .then(|| ipnet::Ipv6Net::new(topology::fabric_ip_v6(ip), 64))
            .transpose()?;
        let eth0 = netlink_in(netns, |nl| {
            let eth0 = nl.existing_link("eth0")?;
            nl.add_address(eth0.index, addr)?;
            if let Some(a6) = addr6 {
                nl.add_address(eth0.index, IpNet::V6(a6))?;
            }
            nl.set_up(eth0.index, true)?;
            Ok(eth0)
        })?;
        eth0.mac
            .map(|m| MacText(m).to_string())
            .with_context(|| format!("eth0 of {netns} has no MAC"))
    }

    fn external(&mut self) -> anyhow::Result<()> {
        let e = self.ns("external")?;
        self.plug(&e, "external", EXTERNAL_IP)?;
        let outside = IpNet::from(Ipv4Net::from(OUTSIDE_IP));
        netlink_in(&e, |nl| {
            let lo = nl.existing_link("lo")?;
            nl.add_address(lo.index, outside)
        })?;
        self.serve("external", &e, true)?;
        self.external_zone(&e)
    }

    fn node(&mut self, name: &str, os: Os, ip: Ipv4Addr) -> anyhow::Result<()> {
        let ns = self.ns(name)?;
        let mac = self.plug(&ns, name, ip)?;
        route_via(&ns, IpNet::V4(Ipv4Net::default()), EXTERNAL_IP)?;
        // A node routes between its pods and the fabric.
        Netns::named(&ns).run(|| host::sysctl::set_sysctl("net.ipv4.ip_forward", "1"))?;
        if self.t.dual_stack {
            Netns::named(&ns)
                .run(|| host::sysctl::set_sysctl("net.ipv6.conf.all.forwarding", "1"))?;
        }
        if os == Os::Linux && self.t.mode == Mode::Overlay {
            // The kernel's VXLAN hands large segments to the NIC; the Windows nodes' AF_PACKET
            // uplinks take only plain frames, as a physical NIC would deliver them.
            Netns::named(&ns).run(|| {
                ethtool::set_offload("eth0", Offload::Tso, false)?;
                ethtool::set_offload("eth0", Offload::Gso, false)
            })?;
        }
        self.serve(name, &ns, false)?;
        self.state.nodes.push(NodeState {
            name: name.to_string(),
            os,
            netns: ns,
            ip,
            mac,
            subnet: None,
            source_vip: None,
            pods: Vec::new(),
        });
        self.state.save(&self.dir)?;
        if os == Os::Windows {
            let i = self.state.nodes.len() - 1;
            self.hnsd(i)?;
        }
        Ok(())
    }

    fn node_dir(&self, i: usize) -> PathBuf {
        self.dir.join(&self.state.nodes[i].name)
    }

    fn socket(&self, i: usize) -> PathBuf {
        self.node_dir(i).join("hns.sock")
    }

    /// hnsd of Windows node `i`, with its data plane on the node's NIC.
    fn hnsd(&mut self, i: usize) -> anyhow::Result<()> {
        let dir = self.node_dir(i);
        std::fs::create_dir_all(&dir)?;
        let ns = self.state.nodes[i].netns.clone();
        let name = self.state.nodes[i].name.clone();
        let sock = self.socket(i);
        let (state_dir, sock_s) = (
            dir.join("state").to_string_lossy().into_owned(),
            sock.to_string_lossy().into_owned(),
        );
        let profile = self.t.profile_name();
        let w = self.winnet.clone();
        let ports = self.t.dynamic_port_range.unwrap_or_default().to_string();
        let args = [
            w.as_str(),
            "hnsd",
            "--node-netns",
            &ns,
            "--nic",
            "eth0",
            "--node-name",
            &name,
            "--profile",
            &profile,
            "--state-dir",
            &state_dir,
            "--socket",
            &sock_s,
            "--dynamic-port-range",
            &ports,
        ];
        // hnsd enters the node's namespace itself (--node-netns); started from ours.
        self.spawn_here(&format!("{name} hnsd"), &args, &dir.join("hnsd.log"))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sock.exists() {
            if Instant::now() > deadline {
                bail!(
                    "hnsd of {name} did not start: see {}",
                    dir.join("hnsd.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Starts `args` in this namespace (for programs that enter theirs themselves).
    fn spawn_here(&mut self, name: &str, args: &[&str], log: &Path) -> anyhow::Result<()> {
        let launch = procs::Launch {
            netns: None,
            args: args.iter().map(|a| a.to_string()).collect(),
            log: log.to_path_buf(),
            rust_log: "warn".into(),
        };
        let p = procs::start(name, launch, false)?;
        self.state.procs.push(p);
        self.state.save(&self.dir)
    }
}

/// Routes `destination` via `gateway` in the namespace `netns`, replacing a route there to the
/// same destination (`ip route replace DST via GW`).
pub(super) fn route_via(
    netns: &str,
    destination: IpNet,
    gateway: impl Into<std::net::IpAddr>,
) -> anyhow::Result<()> {
    let route = RouteEntry {
        destination,
        gateway: Some(gateway.into()),
        oif: None,
        metric: None,
    };
    netlink_in(netns, |nl| nl.add_route(&route))
}
