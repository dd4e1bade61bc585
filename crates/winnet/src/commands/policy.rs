//! `winnet policy`: the NetworkPolicy agent of a Windows node (`--style calico|npm`), its
//! Linux twin (`--mode nftables`), or `--lint FILE` offline: what each style skips and what a
//! Linux node does instead.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use policy::Style;
use policy::agent::Config;

/// `--mode`: where the policies are enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// A Windows node: HNS endpoint ACLs through hnsd.
    Hns,
    /// A Linux node: an nftables table of the agent's own in this network namespace.
    Nftables,
}

#[derive(clap::Args)]
pub struct Args {
    /// hns (a Windows node's endpoints) or nftables (a Linux node).
    #[arg(long, value_enum, default_value = "hns")]
    mode: Mode,
    /// Program as Calico for Windows (felix) or Azure NPM does.
    #[arg(long, default_value = "calico")]
    style: Style,
    /// Print what each style skips in the NetworkPolicies of FILE, then exit (offline).
    #[arg(long, value_name = "FILE")]
    lint: Option<PathBuf>,
    /// This node's name: the pods with this nodeName are programmed.
    #[arg(long)]
    node: Option<String>,
    /// The HNS network the pods are on.
    #[arg(long, env = "KUBE_NETWORK", default_value = "cbr0")]
    network_name: String,
    /// The node's addresses (calico: the node -> pod Allow at priority 900); repeatable.
    #[arg(long = "host-address")]
    host_addresses: Vec<ipnet::IpNet>,
    /// Kubernetes objects from a kube API (watch).
    #[arg(long, conflicts_with = "manifests")]
    kubeconfig: Option<PathBuf>,
    /// Kubernetes objects from a folder of manifests (reloaded on change).
    #[arg(long)]
    manifests: Option<PathBuf>,
    /// hnsd's socket (else HNS_SOCKET, else /run/winnet/hns.sock).
    #[arg(long)]
    hns_socket: Option<PathBuf>,
    /// Where /healthz and /metrics are served ("" to not serve).
    #[arg(long, default_value = "127.0.0.1:10258")]
    healthz_bind_address: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(file) = &args.lint {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("--lint {}: cannot read it", file.display()))?;
        let report = policy::lint::lint(&text, &file.display().to_string())
            .map_err(|e| anyhow::anyhow!(e))?;
        print!("{report}");
        return Ok(());
    }
    let source = match (args.manifests, args.kubeconfig) {
        (Some(dir), _) => kubesrc::Source::Manifests {
            dir,
            poll: Duration::from_millis(500),
        },
        (None, Some(path)) => kubesrc::Source::Kubeconfig {
            path,
            settle: Duration::from_millis(100),
        },
        (None, None) => bail!(
            "say where NetworkPolicies come from: --kubeconfig FILE or --manifests DIR (or --lint FILE)"
        ),
    };
    let Some(node) = args.node else {
        bail!("--node NAME: say which node's pods to program");
    };
    let healthz_bind = match args.healthz_bind_address.as_str() {
        "" => None,
        s => Some(s.parse::<SocketAddr>().with_context(|| {
            format!("--healthz-bind-address {s}: write ADDRESS:PORT, e.g. 127.0.0.1:10258")
        })?),
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    if args.mode == Mode::Nftables {
        let run = policy::nftables::run(source, node, healthz_bind, super::shutdown_signal());
        return rt.block_on(run).map_err(|e| anyhow::anyhow!(e));
    }
    let config = Config {
        style: args.style,
        node,
        network_name: args.network_name,
        hns_socket: hns_client::socket_path(args.hns_socket.as_deref()),
        source,
        host_addresses: args.host_addresses,
        healthz_bind,
    };
    rt.block_on(policy::agent::run(config, super::shutdown_signal()))
        .map_err(|e| anyhow::anyhow!(e))
}
