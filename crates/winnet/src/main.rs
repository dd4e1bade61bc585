//! `winnet`: one binary, every program of the stack as a subcommand.

mod cluster;
mod commands;
mod doctor;
mod output;

use clap::{Parser, Subcommand};

/// winnet: the Windows-node networking stack of Kubernetes, on Linux with real packets.
#[derive(Parser)]
#[command(name = "winnet", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Host Networking Service for one node.
    Hnsd(commands::hnsd::Args),
    /// Talk to hnsd: list, get, create, modify, delete and dump HNS objects.
    Hns(commands::hns::Args),
    /// flannel's daemon: a subnet lease, the node's pod network (host-gw or vxlan), subnet.env.
    Flanneld(commands::flanneld::Args),
    /// kube-proxy: Services to HNS load balancers on a Windows node (winkernel), or to
    /// nftables rules on a Linux node (--proxy-mode nftables).
    Proxy(commands::proxy::Args),
    /// The NetworkPolicy agent of a Windows node: NetworkPolicies to HNS ACLs as Calico
    /// (--style calico) or Azure NPM (--style npm) program them; --lint FILE offline.
    Policy(commands::policy::Args),
    /// The cluster DNS: Services, endpoints and pods by name (CoreDNS kubernetes), the rest forwarded.
    Dns(commands::dns::Args),
    /// Install the CNI plugins (win-bridge, win-overlay, flannel, sdn*) as links to winnet.
    InstallCni(commands::install_cni::Args),
    /// Explain what a node's switch does with a connection's first packet, layer by layer.
    Trace(commands::trace::Args),
    /// vfpctrl: list a switch's ports, and list, remove or add a port's rules by hand.
    ///
    /// As vfpctrl on Windows, this edits the live switch only: HNS objects are untouched. The
    /// next recompile of a removed rule's owner (a change to that endpoint, load balancer or
    /// network, or an hnsd restart) may put its rules back; rules added by hand are owned by
    /// `Operator <name>` and stay until removed, until their port is made again, or until hnsd
    /// restarts. `winnet doctor` names both: rules-missing and rules-without-owner.
    Vfpctrl(commands::vfpctrl::Args),
    /// Explain what a pod's resolver does with a name, step by step.
    Resolve(commands::resolve::Args),
    /// Build a mixed Windows + Linux cluster here, prove every documented flow, take it down.
    Demo(commands::demo::Args),
    /// Compare what Kubernetes wants, what HNS holds, what the switch and the kernel do; name each problem.
    Doctor(commands::doctor::Args),
    /// Write a support bundle that `doctor --bundle` and `trace --bundle` read offline.
    Collect(commands::collect::Args),
    /// The local cluster: up, check, status, down.
    Cluster(commands::cluster::Args),
    /// The small HTTP and UDP servers the local cluster's pods run.
    #[command(hide = true)]
    Serve(commands::cluster::ServeArgs),
}

fn main() -> std::process::ExitCode {
    // Installed under a CNI plugin's name (`winnet install-cni`), the binary is that plugin.
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if let Some(code) = cni::main_if_plugin(&argv0) {
        return std::process::ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Hnsd(args) => commands::hnsd::run(args),
        Command::Hns(args) => commands::hns::run(args),
        Command::Flanneld(args) => commands::flanneld::run(args),
        Command::Proxy(args) => commands::proxy::run(args),
        Command::Policy(args) => commands::policy::run(args),
        Command::Dns(args) => commands::dns::run(args),
        Command::InstallCni(args) => commands::install_cni::run(args),
        Command::Trace(args) => commands::trace::run(args),
        Command::Resolve(args) => commands::resolve::run(args),
        Command::Vfpctrl(args) => commands::vfpctrl::run(args),
        Command::Demo(args) => commands::demo::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::Collect(args) => commands::collect::run(args),
        Command::Cluster(args) => commands::cluster::run(args),
        Command::Serve(args) => commands::cluster::serve(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The doctor's report said what it found; the status says that it found something.
        Err(e)
            if e.downcast_ref::<commands::doctor::ProblemsFound>()
                .is_some() =>
        {
            std::process::ExitCode::FAILURE
        }
        // The reader of stdout went away (`winnet ... | head -1`): nothing to say about it.
        Err(e) if output::is_stdout_closed(&e) => {
            std::process::ExitCode::from(output::STDOUT_CLOSED_STATUS)
        }
        Err(e) => {
            output::note!("winnet: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
