//! `winnet doctor`: a node's Kubernetes objects, HNS objects, compiled switch and kernel side
//! compared; each problem named with its objects, the flows it breaks and the fix. Exit status
//! 0 only when nothing is found (1 when something is).

use crate::output::{note, outln};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use doctor::{Finding, NodeSnapshot, Repair, diagnose, render};
use ipnet::IpNet;

use crate::doctor::bundle::Bundle;
use crate::doctor::collect::{self, NodeSource};
use crate::doctor::fix;

/// How long `--fix` waits for kube-proxy's resync to show in HNS.
const RESYNC_WAIT: Duration = Duration::from_secs(15);

#[derive(clap::Args)]
pub struct Args {
    /// The node to examine (default: every Windows node of the local cluster).
    #[arg(long, conflicts_with = "all")]
    node: Option<String>,
    /// Every Windows node of the local cluster (or of the bundle).
    #[arg(long)]
    all: bool,
    /// The report's form.
    #[arg(
        short = 'o',
        long = "output",
        default_value = "table",
        value_name = "table|json"
    )]
    output: Output,
    /// Read a bundle made by `winnet collect` instead of the live node (no root needed).
    #[arg(long, value_name = "FILE")]
    bundle: Option<PathBuf>,
    /// Repair what is safe to repair (listing each change first), then examine again.
    #[arg(long, conflicts_with = "bundle")]
    fix: bool,
    #[command(flatten)]
    outside: OutsideNode,
}

/// The flags that name a node outside the local cluster (`doctor` and `collect` take the same).
#[derive(clap::Args)]
pub struct OutsideNode {
    /// hnsd's socket, for a node outside the local cluster (with --node as its name).
    #[arg(long, requires = "node")]
    pub hns_socket: Option<PathBuf>,
    /// The Kubernetes objects kube-proxy reads, for a node outside the local cluster (and the
    /// node's Pods, when the folder holds Pods).
    #[arg(long, requires = "hns_socket")]
    manifests: Option<PathBuf>,
    /// Or the kube API server kube-proxy reads (`--kubeconfig`): Services, EndpointSlices,
    /// Nodes and the node's Pods, listed once.
    #[arg(long, requires = "hns_socket", conflicts_with = "manifests")]
    kubeconfig: Option<PathBuf>,
    /// The pods' addresses (kube-proxy's --cluster-cidr), for a node outside the local cluster.
    #[arg(long, requires = "hns_socket")]
    cluster_cidr: Option<IpNet>,
    /// The Services' ClusterIP range, for a node outside the local cluster.
    #[arg(long, requires = "hns_socket")]
    service_cidr: Option<IpNet>,
}

impl OutsideNode {
    /// Where the nodes to examine are: `node` (or every node of the local cluster), or the node
    /// these flags name.
    pub fn sources(&self, node: Option<&str>) -> anyhow::Result<Vec<NodeSource>> {
        node_sources(
            node,
            self.hns_socket.as_ref(),
            self.manifests.as_ref(),
            self.kubeconfig.as_ref(),
            doctor::snapshot::ClusterFacts {
                cluster_cidr: self.cluster_cidr,
                service_cidr: self.service_cidr,
            },
        )
    }
}

/// The report's form.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// The doctor found something: the exit status is 1, and the report says what.
#[derive(Debug)]
pub struct ProblemsFound(pub usize);

impl std::fmt::Display for ProblemsFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} problem(s) found", self.0)
    }
}

impl std::error::Error for ProblemsFound {}

pub fn run(args: Args) -> anyhow::Result<()> {
    let snaps = if let Some(path) = &args.bundle {
        let b = Bundle::read(path)?;
        match &args.node {
            Some(n) => vec![b.node(n)?.clone()],
            None => b.nodes,
        }
    } else {
        let rt = super::runtime()?;
        let sources = args.outside.sources(args.node.as_deref())?;
        let snaps = collect::snapshots(&rt, &sources)?;
        if args.fix {
            return fix_then_report(&rt, &args, &sources, &snaps);
        }
        snaps
    };
    report(&args, &snaps)
}

/// Prints the report of `snaps`; an error (exit status 1) when it names a problem.
fn report(args: &Args, snaps: &[NodeSnapshot]) -> anyhow::Result<()> {
    let nodes: Vec<(String, Vec<Finding>)> = doctor::diagnose_nodes(snaps);
    let text = match args.output {
        Output::Table => render::table(&nodes),
        Output::Json => render::json(&nodes),
    };
    outln!("{}", text.trim_end())?;
    let found: usize = nodes.iter().map(|(_, f)| f.len()).sum();
    if found > 0 {
        return Err(ProblemsFound(found).into());
    }
    Ok(())
}

fn fix_then_report(
    rt: &tokio::runtime::Runtime,
    args: &Args,
    sources: &[NodeSource],
    snaps: &[NodeSnapshot],
) -> anyhow::Result<()> {
    let findings: Vec<Finding> = snaps.iter().flat_map(diagnose).collect();
    let planned = fix::plan(snaps, &findings);
    if planned.is_empty() {
        note!("doctor --fix: nothing to repair safely");
    } else {
        note!("doctor --fix: the changes, before any is made:");
        for p in &planned {
            match &p.refused {
                None => note!("  {}: {}", p.node, p.repair),
                Some(why) => note!("  {}: {} -- refused: {why}", p.node, p.repair),
            }
        }
        for line in fix::apply(rt, &planned, sources) {
            note!("  {line}");
        }
    }
    let resynced = planned
        .iter()
        .any(|p| p.repair == Repair::ResyncProxy && p.refused.is_none());
    let mut after = collect::snapshots(rt, sources)?;
    if resynced {
        // kube-proxy resyncs in its own time; wait until what it was asked to repair is there.
        let deadline = Instant::now() + RESYNC_WAIT;
        let pending = |snaps: &[NodeSnapshot]| {
            snaps
                .iter()
                .flat_map(diagnose)
                .any(|f| f.repair == Some(Repair::ResyncProxy))
        };
        while pending(&after) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            after = collect::snapshots(rt, sources)?;
        }
    }
    report(args, &after)
}

/// The sources of `node` (or every node of the local cluster).
fn node_sources(
    node: Option<&str>,
    hns_socket: Option<&PathBuf>,
    manifests: Option<&PathBuf>,
    kubeconfig: Option<&PathBuf>,
    cluster: doctor::snapshot::ClusterFacts,
) -> anyhow::Result<Vec<NodeSource>> {
    if let Some(socket) = hns_socket {
        let Some(name) = node else {
            bail!("--hns-socket needs --node NAME (the node's Kubernetes name)");
        };
        return Ok(vec![NodeSource {
            name: name.to_string(),
            socket: socket.clone(),
            manifests: manifests.cloned(),
            kubeconfig: kubeconfig.cloned(),
            pods: None,
            netns: None,
            peers: Vec::new(),
            flannel: None,
            dns: None,
            agent: Default::default(),
            cluster,
        }]);
    }
    collect::cluster_nodes(node)
}
