//! `winnet resolve`: what a pod's resolver does with a name, step by step — the names it
//! tries and why, each query, the server that answered, the answer or the rcode, and the rule
//! that ended the walk (the DNS counterpart of `winnet trace`). A pod on a Windows node is
//! asked of its node's hnsd, which runs the walk through the pod's DNS client (`POST
//! /resolve`); a pod on a Linux node is walked here, with glibc's rules over its resolv.conf,
//! from inside its namespace.

use crate::output::outln;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use dnsclient::Walk;
use dnsclient::resolv_conf::ResolvConf;
use hns_client::{Client, ResolveRequest};

use crate::cluster::{self, Os};

#[derive(clap::Args)]
pub struct Args {
    /// The name to resolve, as the application writes it (`web`, `web.default`, `example.test.`).
    name: String,
    /// The pod's node in the local cluster.
    #[arg(long, requires = "pod", conflicts_with = "netns")]
    node: Option<String>,
    /// The pod, by name, in the local cluster.
    #[arg(long, requires = "node")]
    pod: Option<String>,
    /// Outside the local cluster: the pod's network namespace (`ip netns` name). With
    /// --hns-socket it is a Windows pod of that hnsd; without, a Linux pod resolving by its
    /// /etc/netns/NAME/resolv.conf.
    #[arg(long, required_unless_present = "node")]
    netns: Option<String>,
    /// The record type.
    #[arg(
        long = "type",
        default_value = "A",
        value_name = "A|AAAA|SRV|PTR|TXT|CNAME"
    )]
    qtype: String,
    /// The structured walk as JSON.
    #[arg(long)]
    json: bool,
    /// hnsd's socket of the pod's Windows node (with --netns).
    #[arg(long, requires = "netns")]
    hns_socket: Option<PathBuf>,
}

/// Where the pod's resolver runs.
enum Pod {
    /// A Windows node's pod: its hnsd walks it.
    Windows { socket: PathBuf, netns: String },
    /// A Linux pod: glibc's rules here, in its namespace.
    Linux { netns: String },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let pod = locate(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let walk = rt.block_on(walk(&pod, &args.name, &args.qtype))?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&walk)?)?;
    } else {
        outln!("{walk}")?;
    }
    Ok(())
}

/// The pod the flags name.
fn locate(args: &Args) -> anyhow::Result<Pod> {
    if let Some(netns) = &args.netns {
        check_netns(netns)?;
        return Ok(match &args.hns_socket {
            Some(s) => Pod::Windows {
                socket: s.clone(),
                netns: netns.clone(),
            },
            None => Pod::Linux {
                netns: netns.clone(),
            },
        });
    }
    let (Some(node), Some(pod)) = (&args.node, &args.pod) else {
        bail!("give --node NODE --pod POD (local cluster) or --netns NAME [--hns-socket PATH]");
    };
    let dir = Path::new(cluster::DIR);
    let state = cluster::State::load(dir)?.ok_or_else(|| {
        anyhow!(
            "no local cluster at {} (start one with `winnet cluster up`), or use --netns NAME --hns-socket PATH",
            dir.display()
        )
    })?;
    let n = state
        .nodes
        .iter()
        .find(|n| &n.name == node)
        .ok_or_else(|| {
            let names: Vec<&str> = state.nodes.iter().map(|n| n.name.as_str()).collect();
            anyhow!(
                "--node {node}: no such node; the cluster has {}",
                names.join(", ")
            )
        })?;
    let p = n.pods.iter().find(|p| &p.name == pod).ok_or_else(|| {
        let names: Vec<&str> = n.pods.iter().map(|p| p.name.as_str()).collect();
        anyhow!(
            "--pod {pod}: node {node} has no such pod; it has {}",
            names.join(", ")
        )
    })?;
    Ok(match n.os {
        Os::Windows => Pod::Windows {
            socket: dir.join(node).join("hns.sock"),
            netns: p.netns.clone(),
        },
        Os::Linux => Pod::Linux {
            netns: p.netns.clone(),
        },
    })
}

fn check_netns(netns: &str) -> anyhow::Result<()> {
    if netns.is_empty() || netns.contains('/') || netns == "." || netns == ".." {
        bail!(
            "--netns \"{netns}\" is not a namespace name; give the `ip netns` name, e.g. --netns pod1"
        );
    }
    Ok(())
}

async fn walk(pod: &Pod, name: &str, qtype: &str) -> anyhow::Result<Walk> {
    match pod {
        Pod::Windows { socket, netns } => {
            let path = format!("{}/{netns}", host::netns::Netns::RUN_DIR);
            let req = ResolveRequest::new(&path, name, qtype).map_err(|e| flag_error(&e))?;
            Client::new(socket)
                .resolve(&req)
                .await
                .with_context(|| format!("resolve in {netns} (hnsd at {})", socket.display()))
        }
        Pod::Linux { netns } => {
            let req = ResolveRequest::new(netns, name, qtype).map_err(|e| flag_error(&e))?;
            let file = Path::new(host::resolv::ETC_NETNS)
                .join(netns)
                .join("resolv.conf");
            let file = if file.exists() {
                file
            } else {
                PathBuf::from("/etc/resolv.conf")
            };
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("read the pod's {}", file.display()))?;
            let conf = ResolvConf::parse(&text, &hostname());
            let ns = host::netns::Netns::named(netns);
            Ok(dnsclient::resolve::glibc_walk(&ns, &conf, &req.name, req.qtype).await?)
        }
    }
}

/// The host name glibc derives a search domain from when resolv.conf has none.
fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

/// A request error named by the argument the user wrote.
fn flag_error(e: &hcn::error::HnsError) -> anyhow::Error {
    for (field, flag) in [("Name: ", "NAME: "), ("Type: ", "--type ")] {
        if let Some(rest) = e.detail.strip_prefix(field) {
            return anyhow!("{flag}{rest}");
        }
    }
    anyhow!("{}", e.detail)
}
