//! `winnet proxy`: kube-proxy, with the flags kube-proxy users know: the Windows proxier
//! (`--proxy-mode kernelspace`, the default) on a Windows node's hnsd, or the `nftables` mode on
//! a Linux node.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use proxy::{Config, FeatureGates, SourceConfig};

/// `--proxy-mode`: which proxier runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProxyMode {
    /// The Windows proxier (winkernel): HNS load balancers through hnsd.
    Kernelspace,
    /// The Linux nftables proxier: kube-proxy's tables in this network namespace.
    Nftables,
}

#[derive(clap::Args)]
pub struct Args {
    /// The proxier: kernelspace (Windows, HNS) or nftables (Linux).
    #[arg(long, value_enum, default_value = "kernelspace")]
    proxy_mode: ProxyMode,
    /// This node's name: EndpointSlice endpoints with this nodeName are local.
    #[arg(long)]
    hostname_override: Option<String>,
    /// The HNS network pods are on (kernelspace).
    #[arg(long, env = "KUBE_NETWORK")]
    network_name: Option<String>,
    /// The source VIP for non-DSR traffic (Overlay).
    #[arg(long)]
    source_vip: Option<IpAddr>,
    /// Direct server return for ClusterIP load balancers (needs WinDSR=true).
    #[arg(long)]
    enable_dsr: bool,
    /// Feature gates, e.g. WinDSR=true,WinOverlay=true.
    #[arg(long, default_value = "")]
    feature_gates: FeatureGates,
    /// The pod CIDR of the cluster.
    #[arg(long)]
    cluster_cidr: Option<ipnet::IpNet>,
    /// The node's address (repeat for dual-stack); else from its Node object.
    #[arg(long = "bind-address")]
    bind_address: Vec<IpAddr>,
    /// Where /healthz is served ("" to not serve).
    #[arg(long, default_value = "0.0.0.0:10256")]
    healthz_bind_address: String,
    /// Where /metrics is served ("" to not serve).
    #[arg(long, default_value = "127.0.0.1:10249")]
    metrics_bind_address: String,
    /// The root HNS endpoint, the backend of health-check load balancers.
    #[arg(long, default_value = "cbr0")]
    root_hnsendpoint_name: String,
    /// A health-check load balancer per ingress IP onto the root endpoint.
    #[arg(long)]
    forward_healthcheck_vip: bool,
    /// Kubernetes objects from a kube API (watch).
    #[arg(long, conflicts_with = "manifests")]
    kubeconfig: Option<PathBuf>,
    /// Kubernetes objects from a folder of manifests (reloaded on change).
    #[arg(long)]
    manifests: Option<PathBuf>,
    /// hnsd's socket (else HNS_SOCKET, else /run/winnet/hns.sock).
    #[arg(long)]
    hns_socket: Option<PathBuf>,
}

fn addr(flag: &str, s: &str) -> anyhow::Result<Option<SocketAddr>> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .with_context(|| format!("--{flag} {s}: write ADDRESS:PORT, e.g. 0.0.0.0:10256"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let source = match (args.manifests, args.kubeconfig) {
        (Some(dir), _) => SourceConfig::Manifests(dir),
        (None, Some(path)) => SourceConfig::Kubeconfig(path),
        (None, None) => bail!("say where Services come from: --kubeconfig FILE or --manifests DIR"),
    };
    let hostname = match args.hostname_override {
        Some(h) => h,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_lowercase())
            .context("no --hostname-override and the host name cannot be read")?,
    };
    let healthz_bind = addr("healthz-bind-address", &args.healthz_bind_address)?;
    let metrics_bind = addr("metrics-bind-address", &args.metrics_bind_address)?;
    if args.proxy_mode == ProxyMode::Nftables {
        let config = proxy::nftables::Config {
            node: proxy::nftables::LinuxNode {
                hostname,
                cluster_cidrs: args.cluster_cidr.into_iter().collect(),
            },
            source,
            healthz_bind,
            metrics_bind,
        };
        let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
        rt.block_on(proxy::nftables::run(config, super::shutdown_signal()))?;
        return Ok(());
    }
    let Some(network_name) = args.network_name else {
        bail!("--network-name (or KUBE_NETWORK): say which HNS network the pods are on");
    };
    let config = Config {
        hostname,
        network_name,
        source_vip: args.source_vip,
        enable_dsr: args.enable_dsr,
        feature_gates: args.feature_gates,
        cluster_cidr: args.cluster_cidr,
        node_ips: args
            .bind_address
            .into_iter()
            .filter(|a| !a.is_unspecified())
            .collect(),
        healthz_bind,
        metrics_bind,
        hns_socket: hns_client::socket_path(args.hns_socket.as_deref()),
        root_hnsendpoint_name: args.root_hnsendpoint_name,
        forward_healthcheck_vip: args.forward_healthcheck_vip,
        source,
        retry_after: Duration::from_secs(1),
        host_mac: None,
    };
    let config = Config {
        host_mac: config
            .node_ips
            .iter()
            .find_map(|ip| mac_of_interface_with(*ip)),
        ..config
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(proxy::run(config, super::shutdown_signal()))?;
    Ok(())
}

/// The MAC of the interface that holds `ip` (kube-proxy's host MAC on Overlay).
fn mac_of_interface_with(ip: IpAddr) -> Option<hcn::MacAddress> {
    let addrs: Vec<_> = nix::ifaddrs::getifaddrs().ok()?.collect();
    let name = addrs.iter().find_map(|a| {
        let sa = a.address.as_ref()?;
        let found = match ip {
            IpAddr::V4(v4) => sa.as_sockaddr_in().is_some_and(|s| s.ip() == v4),
            IpAddr::V6(v6) => sa.as_sockaddr_in6().is_some_and(|s| s.ip() == v6),
        };
        found.then(|| a.interface_name.clone())
    })?;
    addrs.iter().find_map(|a| {
        let link = a.address.as_ref()?.as_link_addr()?;
        (a.interface_name == name).then_some(())?;
        link.addr().map(hcn::MacAddress)
    })
}
