//! `winnet cluster up|check|status|down`: the local cluster on this machine, and `winnet
//! serve`, the servers its pods run.

use crate::output::{note, outln};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::cluster::{self, State, Topology, check, flows};

/// The default topology, built into the binary (the same as `examples/cluster.yaml`).
pub const DEFAULT_TOPOLOGY: &str = include_str!("../../../../examples/cluster.yaml");

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Verb,
}

#[derive(clap::Subcommand)]
enum Verb {
    /// Build the cluster from a topology file (default: examples/cluster.yaml).
    Up(UpArgs),
    /// Run every flow of the matrix with real traffic; exit 0 only when every cell matches.
    Check(CheckArgs),
    /// Show the nodes with their flannel leases (subnet, public IP, backend, VtepMAC), the pods
    /// and their addresses.
    Status,
    /// Remove everything the cluster made.
    Down,
    /// Stop one of the cluster's processes as a crash does (SIGKILL) or a service manager
    /// does (SIGTERM), and start it again as it was started (e.g. `restart "win-1 hnsd"`;
    /// `cluster status` lists the names).
    Restart(RestartArgs),
    /// Add or delete a pod on a node, as a kubelet does through the node's CNI plugin.
    Pod(PodArgs),
    /// Add the NetworkPolicies of a (multi-document) YAML file; waits for every node's agent.
    Apply(FileArgs),
    /// Remove the NetworkPolicies of a YAML file; waits for every node's agent.
    Delete(FileArgs),
    /// Print the reachability matrix from every pod to every pod (rows from, columns to, `.`
    /// connected, `X` blocked).
    Probe(ProbeArgs),
}

#[derive(clap::Args)]
pub struct FileArgs {
    /// The YAML file of NetworkPolicies.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
}

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// The destination port.
    #[arg(long, default_value_t = 80)]
    pub port: u16,
    /// tcp or udp.
    #[arg(long, default_value = "tcp")]
    pub protocol: lab::workloads::Protocol,
    /// A list of {"from","to","port","protocol","connected"}.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct RestartArgs {
    /// The process, as `cluster status` names it (`win-1 hnsd`, `win-2 proxy`, ...).
    pub name: String,
    /// How to stop it: kill (a crash) or term (a clean stop).
    #[arg(long, default_value = "kill")]
    pub signal: StopSignal,
}

/// How `cluster restart` stops a process.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum StopSignal {
    Kill,
    Term,
}

#[derive(clap::Args)]
pub struct PodArgs {
    #[command(subcommand)]
    verb: PodVerb,
}

#[derive(clap::Subcommand)]
enum PodVerb {
    /// Add pod NAME to NODE: its namespace, the CNI ADD, a server in it.
    Add { node: String, name: String },
    /// Delete pod NAME from NODE: its server stopped, the CNI DEL, its namespace removed.
    Delete { node: String, name: String },
}

#[derive(clap::Args, Clone, Default)]
pub struct UpArgs {
    /// The topology file.
    pub file: Option<PathBuf>,
    /// Override the topology's network mode: l2bridge or overlay.
    #[arg(long)]
    pub mode: Option<cluster::Mode>,
    /// Override the topology's Windows build (ws2025 in the default topology): ws2019,
    /// ws2022, ws2025 or unrestricted.
    #[arg(long)]
    pub profile: Option<hns::Profile>,
    /// Override the topology's dynamic port range of the Windows nodes' hnsd, which the SNAT
    /// pools draw from (`start=N,num=M`, as `netsh int ipv4 set dynamicport`; Windows'
    /// default is start=49152,num=16384).
    #[arg(long, value_name = "start=N,num=M")]
    pub dynamic_port_range: Option<hns_client::switch::DynamicPortRange>,
}

#[derive(clap::Args, Clone, Default)]
pub struct CheckArgs {
    /// Print the matrix as JSON.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the matrix as a Markdown table.
    #[arg(long)]
    pub markdown: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = Path::new(cluster::DIR);
    match args.command {
        Verb::Up(a) => {
            need_root("cluster up")?;
            let t = topology(&a)?;
            up(&t, dir).map(|_| ())
        }
        Verb::Check(a) => {
            need_root("cluster check")?;
            let state =
                State::load(dir)?.context("no cluster is up: run `winnet cluster up` first")?;
            let ok = check_and_print(&state, &a)?;
            if !ok {
                bail!("some flows did not behave as the profile says (see MISMATCH above)");
            }
            Ok(())
        }
        Verb::Apply(a) => {
            need_root("cluster apply")?;
            let n = cluster::netpol::change(dir, &a.file, true)?;
            note!("{n} NetworkPolicies applied; every agent has synced");
            Ok(())
        }
        Verb::Delete(a) => {
            need_root("cluster delete")?;
            let n = cluster::netpol::change(dir, &a.file, false)?;
            note!("{n} NetworkPolicies deleted; every agent has synced");
            Ok(())
        }
        Verb::Probe(a) => {
            need_root("cluster probe")?;
            let state =
                State::load(dir)?.context("no cluster is up: run `winnet cluster up` first")?;
            let cells = cluster::probe::matrix(&state, a.port, a.protocol);
            if a.json {
                outln!("{}", serde_json::to_string_pretty(&cells)?)
            } else {
                outln!("{}", cluster::probe::table(&cells).trim_end())
            }
        }
        Verb::Status => {
            need_root("cluster status")?;
            let state = State::load(dir)?.context("no cluster is up")?;
            status(&state)
        }
        Verb::Restart(a) => {
            need_root("cluster restart")?;
            let signal = match a.signal {
                StopSignal::Kill => nix::sys::signal::Signal::SIGKILL,
                StopSignal::Term => nix::sys::signal::Signal::SIGTERM,
            };
            cluster::build::restart(dir, &a.name, signal)?;
            outln!("{} restarted", a.name)
        }
        Verb::Pod(a) => {
            need_root("cluster pod")?;
            match a.verb {
                PodVerb::Add { node, name } => {
                    let pod = cluster::build::add_pod(dir, &node, &name)?;
                    match pod.ip6 {
                        Some(ip6) => outln!("{node}/{name} {} {ip6}", pod.ip),
                        None => outln!("{node}/{name} {}", pod.ip),
                    }
                }
                PodVerb::Delete { node, name } => {
                    cluster::build::delete_pod(dir, &node, &name)?;
                    outln!("{node}/{name} deleted")
                }
            }
        }
        Verb::Down => {
            need_root("cluster down")?;
            if cluster::teardown::down(dir)? {
                outln!("cluster removed")?;
            } else {
                outln!("no cluster is up")?;
            }
            Ok(())
        }
    }
}

fn need_root(what: &str) -> anyhow::Result<()> {
    if !cluster::is_root() {
        bail!(
            "winnet {what} makes network namespaces and devices: run it as root (or run `winnet demo`, which simulates the cluster without root)"
        );
    }
    Ok(())
}

/// The topology to build: the file (or the built-in default) with the overrides.
pub fn topology(a: &UpArgs) -> anyhow::Result<Topology> {
    let mut t = match &a.file {
        Some(f) => Topology::load(f)?,
        None => Topology::parse(DEFAULT_TOPOLOGY, "the built-in topology")?,
    };
    if let Some(m) = a.mode {
        t.mode = m;
    }
    if let Some(p) = a.profile {
        t.profile = p;
    }
    if let Some(r) = a.dynamic_port_range {
        t.dynamic_port_range = Some(r);
    }
    Ok(t)
}

/// Builds the cluster with a progress display; removes what it made when it fails.
pub fn up(t: &Topology, dir: &Path) -> anyhow::Result<State> {
    let start = std::time::Instant::now();
    note!(
        "building the cluster: {} mode, profile {}",
        t.mode,
        t.profile
    );
    let mut step = 0;
    let built = cluster::build::up(t, dir, &mut |what| {
        step += 1;
        note!("  [{:>5.1}s] {what}", start.elapsed().as_secs_f64());
    });
    match built {
        Ok(s) => {
            note!("cluster up in {:.1} s", start.elapsed().as_secs_f64());
            Ok(s)
        }
        Err(e) => {
            let logs = dir.display().to_string();
            let kept = std::env::temp_dir().join("winnet-cluster-failed");
            let _ = copy_logs(dir, &kept);
            if let Err(d) = cluster::teardown::down(dir) {
                note!("cleaning up after the failure also failed: {d:#}");
            }
            Err(e.context(format!(
                "cluster up failed; everything made was removed (logs of {logs} kept in {})",
                kept.display()
            )))
        }
    }
}

fn copy_logs(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)?.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "log") {
            std::fs::copy(&p, to.join(e.file_name()))?;
        } else if p.is_dir() {
            let log = p.join("hnsd.log");
            if log.exists() {
                std::fs::copy(
                    &log,
                    to.join(format!("{}-hnsd.log", e.file_name().to_string_lossy())),
                )?;
            }
        }
    }
    Ok(())
}

/// Runs the matrix, prints it; true when every cell matches.
pub fn check_and_print(state: &State, a: &CheckArgs) -> anyhow::Result<bool> {
    let profile = state
        .topology
        .as_ref()
        .map(|t| t.profile)
        .unwrap_or_default();
    let outcomes = check::run_all(&flows::matrix(state, profile));
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&outcomes)?)?;
    } else {
        let header = state
            .topology
            .as_ref()
            .map(|t| cluster::render::header(t, false))
            .unwrap_or_default();
        outln!(
            "{}",
            cluster::render::render(&outcomes, &header, a.markdown)
        )?;
    }
    let bad = outcomes.iter().filter(|o| !o.matches).count();
    let expected_failures = outcomes
        .iter()
        .filter(|o| !o.flow.expect_pass && o.matches)
        .count();
    note!(
        "{} flows: {} as the profile says ({} of them documented limitations), {bad} mismatched",
        outcomes.len(),
        outcomes.len() - bad,
        expected_failures
    );
    Ok(bad == 0)
}

fn status(s: &State) -> anyhow::Result<()> {
    if let Some(t) = &s.topology {
        outln!(
            "mode {}, profile {}{}",
            t.mode,
            t.profile,
            if s.ready { "" } else { " (not ready)" }
        )?;
    }
    // The leases as flannel's etcd holds them (what every node's flanneld follows).
    let leases = match &s.etcd {
        Some(url) => match cluster::leases::read(url) {
            Ok(l) => l,
            Err(e) => {
                outln!("flannel's etcd at {url}: {e:#}")?;
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    for n in &s.nodes {
        outln!(
            "{:<10} {:<8} {:<15} ({})",
            n.name,
            format!("{:?}", n.os).to_lowercase(),
            n.ip,
            n.netns
        )?;
        match leases.iter().find(|l| l.attrs.public_ip == n.ip) {
            Some(l) => outln!("  {}", cluster::leases::describe(l))?,
            None => outln!("  no lease in etcd")?,
        }
        if let Some(vip) = n.source_vip {
            outln!("  kube-proxy source VIP {vip}")?;
        }
        for p in &n.pods {
            outln!("  {:<12} {:<15} ({})", p.name, p.ip, p.netns)?;
        }
    }
    outln!("processes (`cluster restart NAME`):")?;
    for p in &s.procs {
        let how = if p.alive() { "running" } else { "gone" };
        outln!("  {:<24} PID {:<8} {how}", p.name, p.pid)?;
    }
    Ok(())
}

/// `winnet serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Answer HTTP on this TCP port with the client's address (repeat for more ports).
    #[arg(long)]
    tcp: Vec<u16>,
    /// Echo UDP on this port with the client's address (repeat for more ports).
    #[arg(long)]
    udp: Vec<u16>,
}

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    if a.tcp.is_empty() && a.udp.is_empty() {
        bail!("winnet serve: give --tcp PORT, --udp PORT or both");
    }
    cluster::servers::serve(&a.tcp, &a.udp)
}
