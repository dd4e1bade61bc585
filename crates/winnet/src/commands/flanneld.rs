//! `winnet flanneld`: flannel's daemon, with flannel's flags, for a Windows node (through
//! hnsd: `--hns-socket`, or `--node-os windows`) or a Linux node (netlink).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use flannel::{Daemon, Options, Os, SubnetSource};

/// Which backend family the node takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeOs {
    Windows,
    Linux,
}

#[derive(clap::Args)]
pub struct Args {
    /// The interface (name or address) used for traffic between nodes; else the default
    /// route's.
    #[arg(long)]
    iface: Option<String>,
    /// The IP other nodes reach this one at; else the interface's.
    #[arg(long)]
    public_ip: Option<Ipv4Addr>,
    /// Where subnet.env is written.
    #[arg(long, default_value = "/run/flannel/subnet.env")]
    subnet_file: PathBuf,
    /// Masquerade traffic from pods leaving the cluster network (Linux: nftables rules;
    /// Windows: only FLANNEL_IPMASQ, which the CNI plugin turns into OutBoundNAT).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, default_value = "false", value_parser = clap::builder::BoolishValueParser::new())]
    ip_masq: bool,
    /// Lease subnets from the Kubernetes API (the Node's podCIDR) instead of etcd.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, default_value = "false", value_parser = clap::builder::BoolishValueParser::new())]
    kube_subnet_mgr: bool,
    /// kubeconfig for --kube-subnet-mgr; else in-cluster or ~/.kube/config.
    #[arg(long)]
    kubeconfig_file: Option<PathBuf>,
    /// This node's Node name (--kube-subnet-mgr).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// net-conf.json for --kube-subnet-mgr (etcd keeps it at <prefix>/config).
    #[arg(long, default_value = "/etc/kube-flannel/net-conf.json")]
    net_config_path: PathBuf,
    /// etcd endpoints, comma-separated.
    #[arg(long, default_value = "http://127.0.0.1:2379", value_delimiter = ',')]
    etcd_endpoints: Vec<String>,
    /// etcd key prefix.
    #[arg(long, default_value = "/coreos.com/network")]
    etcd_prefix: String,
    /// etcd lease TTL in seconds (flannel: 24 h); renewed every third of it.
    #[arg(long, default_value_t = 86400)]
    subnet_lease_ttl: u64,
    /// hnsd's socket; given (or HNS_SOCKET set), this is a Windows node.
    #[arg(long)]
    hns_socket: Option<PathBuf>,
    /// The node's OS; else windows when an HNS socket is named, linux otherwise.
    #[arg(long)]
    node_os: Option<NodeOs>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let named_socket = args.hns_socket.is_some() || std::env::var_os("HNS_SOCKET").is_some();
    let os = match args.node_os {
        Some(NodeOs::Windows) => Os::Windows {
            hns_socket: hns_client::socket_path(args.hns_socket.as_deref()),
        },
        Some(NodeOs::Linux) => Os::Linux,
        None if named_socket => Os::Windows {
            hns_socket: hns_client::socket_path(args.hns_socket.as_deref()),
        },
        None => Os::Linux,
    };
    let source = if args.kube_subnet_mgr {
        let Some(node_name) = args.node_name else {
            bail!("--kube-subnet-mgr needs this node's name: set NODE_NAME or --node-name");
        };
        SubnetSource::Kube {
            kubeconfig: args.kubeconfig_file,
            node_name,
            net_config_path: args.net_config_path,
        }
    } else {
        if args.subnet_lease_ttl == 0 {
            bail!("--subnet-lease-ttl must be at least 1 second");
        }
        SubnetSource::Etcd {
            endpoints: args.etcd_endpoints,
            prefix: args.etcd_prefix,
            ttl: Duration::from_secs(args.subnet_lease_ttl),
        }
    };
    let opts = Options {
        os,
        iface: args.iface,
        public_ip: args.public_ip,
        subnet_file: args.subnet_file,
        ip_masq: args.ip_masq,
        source,
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async {
        let daemon = Daemon::start(opts).await?;
        let lease = daemon.lease();
        tracing::info!(
            "flanneld ready: lease {} ({}, public IP {})",
            lease.subnet,
            lease.attrs.backend_type.as_str(),
            lease.attrs.public_ip
        );
        daemon.run(super::shutdown_signal()).await
    })?;
    Ok(())
}
