//! `winnet collect`: a support bundle of a node (or every node of the local cluster) — HNS
//! objects, the compiled switch with owners and counters, devices, routes, neighbours, the
//! Kubernetes objects, recent logs — for `winnet doctor --bundle` and `winnet trace --bundle`
//! to read anywhere, without root.

use crate::output::outln;
use std::path::{Path, PathBuf};

use crate::doctor::bundle::Bundle;
use crate::doctor::collect;

#[derive(clap::Args)]
pub struct Args {
    /// The node to collect (default: every Windows node of the local cluster).
    #[arg(long)]
    node: Option<String>,
    /// The bundle to write.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    #[command(flatten)]
    outside: super::doctor::OutsideNode,
    /// Where the components' logs are (default: the local cluster's folder).
    #[arg(long, value_name = "DIR")]
    logs: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let sources = args.outside.sources(args.node.as_deref())?;
    let rt = super::runtime()?;
    let snaps = collect::snapshots(&rt, &sources)?;
    let manifests = sources.iter().find_map(|s| s.manifests.clone());
    let logs = args.logs.clone().or_else(|| {
        let dir = Path::new(crate::cluster::DIR);
        (args.outside.hns_socket.is_none() && dir.exists()).then(|| dir.to_path_buf())
    });
    let bundle = Bundle::new(snaps, manifests.as_deref(), logs.as_deref());
    bundle.write(&args.output)?;
    let rules: usize = bundle
        .nodes
        .iter()
        .filter_map(|n| n.switch.as_ref())
        .flat_map(|s| s.ports.iter())
        .flat_map(|p| p.layers.iter())
        .map(|l| l.rules.len())
        .sum();
    outln!(
        "wrote {}: {} node(s), {} HNS objects, {} switch rules, {} logs",
        args.output.display(),
        bundle.nodes.len(),
        bundle
            .nodes
            .iter()
            .map(|n| n.hns.networks.len()
                + n.hns.endpoints.len()
                + n.hns.namespaces.len()
                + n.hns.load_balancers.len()
                + n.hns.routes.len())
            .sum::<usize>(),
        rules,
        bundle.logs.len()
    )?;
    Ok(())
}
