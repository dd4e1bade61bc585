//! One module per subcommand; each parses its arguments and calls into the library crates.

pub mod cluster;
pub mod collect;
pub mod demo;
pub mod dns;
pub mod doctor;
pub mod flanneld;
pub mod hns;
pub mod hnsd;
pub mod install_cni;
pub mod policy;
pub mod proxy;
pub mod resolve;
pub mod trace;
pub mod trace_policy;
pub mod vfpctrl;

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the program still runs; it stops when killed.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The single-threaded async runtime a one-shot verb drives hnsd's client with.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
