//! The local cluster: a mixed Windows + Linux Kubernetes node set built on this machine from a
//! topology file ([`topology`]), with real namespaces, devices and processes ([`build`]); the
//! flow matrix of the Kubernetes "Networking on Windows" documentation run over it with real
//! TCP, UDP and ICMP ([`check`]); and its removal ([`teardown`]). What was made is recorded in
//! the cluster directory as it is made, so `down` removes everything, also after a failed `up`.

pub mod acl_steps;
pub mod build;
pub mod check;
pub mod enforcement;
pub mod flows;
pub mod leases;
pub mod netpol;
pub mod policy_rows;
pub mod probe;
pub mod procs;
pub mod render;
pub mod run_sim;
pub mod servers;
pub mod sim_dns;
pub mod teardown;
pub mod topology;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub use topology::{Mode, Os, Topology};

/// Where the cluster keeps its state, sockets, manifests and logs.
pub const DIR: &str = "/run/winnet/cluster";
/// Prefix of every namespace the cluster makes.
pub const NS_PREFIX: &str = "wn-";

/// A node as built.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NodeState {
    pub name: String,
    pub os: Os,
    pub netns: String,
    pub ip: std::net::Ipv4Addr,
    pub mac: String,
    /// The pod subnet flanneld leased the node (its subnet.env's `FLANNEL_SUBNET`), once it has.
    #[serde(default)]
    pub subnet: Option<ipnet::Ipv4Net>,
    /// kube-proxy's source VIP on an Overlay Windows node, reserved with host-local.
    #[serde(default)]
    pub source_vip: Option<std::net::Ipv4Addr>,
    pub pods: Vec<PodState>,
}

/// A pod as built.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PodState {
    pub name: String,
    /// Its Kubernetes namespace (`default` unless the topology gives another).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: lab::workloads::Labels,
    /// The ports its server answers on.
    #[serde(default)]
    pub ports: Vec<lab::workloads::ServePort>,
    pub netns: String,
    pub ip: std::net::Ipv4Addr,
    /// Its IPv6 address on a dual-stack cluster, where its CNI plugin gave it one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<std::net::Ipv6Addr>,
}

fn default_namespace() -> String {
    topology::NAMESPACE.to_string()
}

impl PodState {
    /// Pod `spec` as made: in namespace `netns` with its addresses.
    pub fn new(
        spec: &lab::workloads::PodSpec,
        netns: String,
        ip: std::net::Ipv4Addr,
        ip6: Option<std::net::Ipv6Addr>,
    ) -> PodState {
        PodState {
            name: spec.name.clone(),
            namespace: spec.namespace.clone(),
            labels: spec.labels.clone(),
            ports: spec.ports(),
            netns,
            ip,
            ip6,
        }
    }
}

#[cfg(test)]
impl PodState {
    /// A plain pod `name` at `ip` in namespace `wn-<name>`, for tests of what is written.
    pub fn plain_at(name: &str, ip: [u8; 4]) -> PodState {
        PodState::new(
            &lab::workloads::PodSpec::plain(name),
            format!("wn-{name}"),
            ip.into(),
            None,
        )
    }
}

/// Everything the cluster made, written after each step.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct State {
    pub topology: Option<Topology>,
    pub namespaces: Vec<String>,
    /// Every process the cluster started (etcd, hnsd, flanneld, kube-proxy, servers).
    #[serde(default)]
    pub procs: Vec<procs::Proc>,
    /// flannel's etcd (client URL), once started.
    #[serde(default)]
    pub etcd: Option<String>,
    pub nodes: Vec<NodeState>,
    pub ready: bool,
}

impl State {
    /// The state file in `dir`.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("state.json")
    }

    /// Reads the state of the cluster in `dir`, if there is one.
    pub fn load(dir: &Path) -> anyhow::Result<Option<State>> {
        match std::fs::read(State::path(dir)) {
            Ok(b) => Ok(Some(serde_json::from_slice(&b).with_context(|| {
                format!(
                    "{} is damaged; remove the namespaces named wn-* by hand",
                    State::path(dir).display()
                )
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("read {}", State::path(dir).display())),
        }
    }

    /// Writes the state (temp file + rename).
    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let tmp = dir.join("state.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, State::path(dir)).with_context(|| format!("rename {}", tmp.display()))
    }
}

/// Runs a command and fails with its output when it fails.
pub fn sh(args: &[&str]) -> anyhow::Result<String> {
    let (program, rest) = args.split_first().context("no command to run")?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    output(cmd, args)
}

/// Runs a command in the namespace `netns` ([`procs::command_in`]) and fails with its output
/// when it fails.
pub fn sh_in(netns: &str, args: &[&str]) -> anyhow::Result<String> {
    let (program, rest) = args.split_first().context("no command to run")?;
    let mut cmd = procs::command_in(netns, program);
    cmd.args(rest);
    output(cmd, args).with_context(|| format!("in network namespace {netns}"))
}

/// The standard output of `cmd` (`args` as words, for errors), or its standard error as the
/// reason it failed.
fn output(mut cmd: std::process::Command, args: &[&str]) -> anyhow::Result<String> {
    let program = args.first().copied().unwrap_or_default();
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `f` with a netlink socket opened in the namespace `netns`.
pub fn netlink_in<R: Send>(
    netns: &str,
    f: impl FnOnce(&mut host::netlink::Netlink) -> Result<R, host::HostError> + Send,
) -> anyhow::Result<R> {
    host::netns::Netns::named(netns)
        .run(|| f(&mut host::netlink::Netlink::open()?))
        .with_context(|| format!("in network namespace {netns}"))
}

/// True when running as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
