//! `winnet dns`: the cluster DNS (CoreDNS's `kubernetes` plugin as kubeadm configures it, plus
//! forwarding with a cache), from a kube API or a folder of manifests like `winnet proxy`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{Context, bail};
use kubesrc::Source;

#[derive(clap::Args)]
pub struct Args {
    /// The cluster domain served with Kubernetes records.
    #[arg(long, default_value = "cluster.local")]
    zone: String,
    /// TTL of the cluster records, in seconds.
    #[arg(long, default_value_t = 30)]
    ttl: u32,
    /// Where to answer, UDP and TCP (repeatable).
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:53")]
    listen: Vec<SocketAddr>,
    /// Where other names go (repeatable; port 53 unless given). Default: /etc/resolv.conf's
    /// nameservers.
    #[arg(long, value_name = "ADDR[:PORT]")]
    upstream: Vec<String>,
    /// Kubernetes objects from a kube API (watch).
    #[arg(long, conflicts_with = "manifests")]
    kubeconfig: Option<PathBuf>,
    /// Kubernetes objects from a folder of manifests (re-read on change).
    #[arg(long)]
    manifests: Option<PathBuf>,
    /// Where /metrics, /healthz and /ready are served (none if not given).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_addr: Option<SocketAddr>,
}

/// `ADDR` or `ADDR:PORT` (IPv6 with a port as `[ADDR]:PORT`).
fn upstream(s: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, 53));
    }
    s.parse().with_context(|| {
        format!(
            "--upstream {s}: write an IP address, ADDR:PORT or [IPv6]:PORT, e.g. 192.168.1.1:53"
        )
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let source = match (args.manifests, args.kubeconfig) {
        (Some(dir), _) => Source::Manifests {
            dir,
            poll: dns::MANIFEST_POLL,
        },
        (None, Some(path)) => Source::Kubeconfig {
            path,
            settle: dns::KUBE_SETTLE,
        },
        (None, None) => bail!("say where Services come from: --kubeconfig FILE or --manifests DIR"),
    };
    let upstreams = if args.upstream.is_empty() {
        let text = std::fs::read_to_string("/etc/resolv.conf")
            .context("no --upstream and /etc/resolv.conf cannot be read")?;
        dns::resolv_conf_nameservers(&text)
    } else {
        args.upstream
            .iter()
            .map(|s| upstream(s))
            .collect::<anyhow::Result<_>>()?
    };
    if upstreams.is_empty() {
        tracing::warn!("no upstream servers: names outside the cluster zone get SERVFAIL");
    }
    let config = dns::Config {
        zone: args.zone,
        ttl: args.ttl,
        listen: args.listen,
        upstreams,
        source,
        metrics_addr: args.metrics_addr,
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(dns::run(config, super::shutdown_signal()))?;
    Ok(())
}
