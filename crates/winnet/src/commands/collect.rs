//! `winnet collect`: a support bundle of a node (or every node of the local cluster) — HNS
//! objects, the compiled switch with owners and counters, devices, routes, neighbours, the
//! Kubernetes objects, recent logs — for `winnet doctor --bundle` and `winnet trace --bundle`
//! to read anywhere, without root.

use std::path::{Path, PathBuf};

use anyhow::Context;
use ipnet::IpNet;

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
    /// hnsd's socket, for a node outside the local cluster (with --node as its name).
    #[arg(long, requires = "node")]
    hns_socket: Option<PathBuf>,
    /// The Kubernetes objects kube-proxy reads, for a node outside the local cluster.
    #[arg(long, requires = "hns_socket")]
    manifests: Option<PathBuf>,
    /// The pods' addresses, for a node outside the local cluster.
    #[arg(long, requires = "hns_socket")]
    cluster_cidr: Option<IpNet>,
    /// The Services' ClusterIP range, for a node outside the local cluster.
    #[arg(long, requires = "hns_socket")]
    service_cidr: Option<IpNet>,
    /// Where the components' logs are (default: the local cluster's folder).
    #[arg(long, value_name = "DIR")]
    logs: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let sources = super::doctor::node_sources(
        args.node.as_deref(),
        args.hns_socket.as_ref(),
        args.manifests.as_ref(),
        doctor::snapshot::ClusterFacts {
            cluster_cidr: args.cluster_cidr,
            service_cidr: args.service_cidr,
        },
    )?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let snaps = collect::snapshots(&rt, &sources)?;
    let manifests = sources.iter().find_map(|s| s.manifests.clone());
    let logs = args.logs.clone().or_else(|| {
        let dir = Path::new(crate::cluster::DIR);
        (args.hns_socket.is_none() && dir.exists()).then(|| dir.to_path_buf())
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
    println!(
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
    );
    Ok(())
}
