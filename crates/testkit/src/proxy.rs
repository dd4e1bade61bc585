//! kube-proxy's configuration as the tests and benches run it: node `win-1` (192.168.0.11) of
//! network `cbr0`, whose root endpoint is also called `cbr0`.

use std::path::Path;
use std::time::Duration;

use proxy::{Config, FeatureGates, SourceConfig};

/// The node the tests' proxy runs on.
pub const NODE: &str = "win-1";

/// The proxy of node `win-1` against the hnsd on `hns_socket`, reading Services from `source`;
/// no DSR, no source VIP, no health or metrics servers, retries after 100 ms. Tests change
/// what they exercise with struct update syntax.
pub fn config(hns_socket: &Path, source: SourceConfig) -> Config {
    Config {
        hostname: NODE.into(),
        network_name: "cbr0".into(),
        source_vip: None,
        enable_dsr: false,
        feature_gates: FeatureGates::default(),
        cluster_cidr: None,
        node_ips: vec![[192, 168, 0, 11].into()],
        healthz_bind: None,
        metrics_bind: None,
        hns_socket: hns_socket.to_path_buf(),
        root_hnsendpoint_name: "cbr0".into(),
        forward_healthcheck_vip: false,
        source,
        retry_after: Duration::from_millis(100),
        host_mac: None,
    }
}

/// `proxy::run` on the test's runtime, as `winnet proxy` runs it, until [`Running::stop`].
pub struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), proxy::ProxyError>>,
}

impl Running {
    /// Starts the proxy of `config`.
    pub fn start(config: Config) -> Running {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(proxy::run(config, async {
            let _ = stopped.await;
        }));
        Running { stop, task }
    }

    /// Stops it as SIGTERM would, and fails the test if it had failed.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("the proxy failed: {e}"),
            Err(e) => panic!("the proxy's task: {e}"),
        }
    }
}
