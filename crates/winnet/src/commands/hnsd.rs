//! `winnet hnsd`: the Host Networking Service of one node.

use std::path::PathBuf;

use anyhow::Context;
use hns::Profile;
use hns_dataplane::HnsdConfig;

use crate::output::outln;

#[derive(clap::Args)]
pub struct Args {
    /// Where the durable store lives.
    #[arg(long, default_value = "/var/lib/winnet/hns")]
    state_dir: PathBuf,
    /// The Unix socket to serve the HCN API on (mode 0600).
    #[arg(long, env = "HNS_SOCKET", default_value = hns_client::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Which Windows build to reproduce: ws2019, ws2022, ws2025 or unrestricted.
    #[arg(long, default_value_t)]
    profile: Profile,
    /// Run the node whose host stack is this network namespace (`ip netns` name), with its
    /// data plane: TAP vNICs, the NIC taken over by external networks, packets carried.
    #[arg(long, value_name = "NAME")]
    node_netns: Option<String>,
    /// Carry packets in hnsd's own namespace (what --node-netns does in another). Without
    /// either, hnsd serves the objects only.
    #[arg(long)]
    dataplane: bool,
    /// The NIC external networks bind to (default: the interface of the default route).
    #[arg(long, value_name = "IFNAME")]
    nic: Option<String>,
    /// The node's name in traces (default: the namespace's name, else the host name).
    #[arg(long)]
    node_name: Option<String>,
    /// The dynamic port range the SNAT pools of OutBoundNAT and load balancers draw from, one
    /// pool of it per node address, as Windows' `netsh int ipv4 set dynamicport tcp start=N
    /// num=M` sets it: at least 255 ports, from port 1025, ending at 65535 at most.
    #[arg(long, value_name = "start=N,num=M", default_value_t)]
    dynamic_port_range: hns_client::switch::DynamicPortRange,
    /// Batch the data plane's TAP reads and writes with io_uring (one system call for a
    /// batch's frames instead of one per frame); where the kernel refuses io_uring, hnsd
    /// says so and uses plain reads and writes. `false` always uses the plain calls.
    #[arg(long, env = "WINNET_IO_URING", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    io_uring: bool,
    /// Repair a damaged store and exit, instead of serving: keep every object that is whole,
    /// drop the rest (an object whose only fault is a reference to something gone keeps the
    /// rest), print what was dropped, and keep the damaged file beside the new store. Run it
    /// with hnsd stopped; a whole store is left as it is.
    #[arg(long)]
    repair: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.repair {
        let store = args.state_dir.join(hns::store::FILE_NAME);
        let report = hns::store::repair(&store)?;
        return outln!("{report}");
    }
    if let Some(name) = &args.node_netns {
        // Before any other thread exists, so that every thread hnsd starts is in the node.
        host::netns::Netns::named(name)
            .enter()
            .with_context(|| format!("cannot enter the node's namespace {name}"))?;
    }
    let dataplane = (args.node_netns.is_some() || args.dataplane).then(|| hns_dataplane::Config {
        node_name: args
            .node_name
            .clone()
            .or_else(|| args.node_netns.clone())
            .unwrap_or_else(hostname),
        state_dir: args.state_dir.clone(),
        nic: args.nic.clone(),
        dynamic_ports: args.dynamic_port_range,
        io_uring: args.io_uring,
    });
    let config = HnsdConfig {
        server: hns::server::Config {
            state_dir: args.state_dir,
            socket: args.socket,
            profile: args.profile,
        },
        dataplane,
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async {
        hns_dataplane::run_hnsd(&config, super::shutdown_signal()).await?;
        tracing::info!("hnsd stopped");
        Ok(())
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "node".into())
}
