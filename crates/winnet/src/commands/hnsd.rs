//! `winnet hnsd`: the Host Networking Service of one node.

use std::path::PathBuf;

use anyhow::Context;
use hns::Profile;
use hns::server::Config;

#[derive(clap::Args)]
pub struct Args {
    /// Where the durable store lives.
    #[arg(long, default_value = "/var/lib/winnet/hns")]
    state_dir: PathBuf,
    /// The Unix socket to serve the HCN API on (mode 0600).
    #[arg(long, env = "HNS_SOCKET", default_value = hns::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Which Windows build to reproduce: ws2019, ws2022, ws2025 or unrestricted.
    #[arg(long, default_value = "ws2022")]
    profile: Profile,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = Config {
        state_dir: args.state_dir,
        socket: args.socket,
        profile: args.profile,
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(async {
        hns::server::run(&config, super::shutdown_signal()).await?;
        tracing::info!("hnsd stopped");
        Ok(())
    })
}
