//! A proxy whose source cannot be read deletes nothing: started on a manifest folder that is
//! not there (a mistyped path, a folder moved away), it programs nothing and removes nothing
//! until the folder is read whole; then its first sync adopts what an earlier proxy made.

use std::path::Path;
use std::time::Duration;

use hns::Profile;
use proxy::SourceConfig;
use serde_json::Value;
use testkit::hnsd::{Hnsd, create_network, l2bridge};
use testkit::http;
use testkit::kube::{cluster_ip, endpoint_slice, http_port, ready, yaml_stream};
use testkit::proxy::Running;
use testkit::wait::until_async;

/// How long the proxy may take to act on what its source says.
const WAIT: Duration = Duration::from_secs(20);

/// Service `name` at `ip` with one remote backend, 10.244.2.5 on node win-2.
fn service(name: &str, ip: &str) -> Vec<Value> {
    let backend = vec![ready("10.244.2.5", "win-2")];
    let slice = endpoint_slice(&format!("{name}-1"), name, "IPv4", http_port(8080), backend);
    vec![cluster_ip(name, ip, 80, 8080), slice]
}

fn web() -> Vec<Value> {
    service("web", "10.96.0.10")
}

fn write(dir: &Path, file: &str, objects: &[Value]) {
    std::fs::write(dir.join(file), yaml_stream(objects)).expect("write manifest");
}

/// The load balancers' ids and the remote endpoints' ids in HNS.
async fn programmed(client: &hns_client::Client) -> (Vec<hcn::Guid>, Vec<hcn::Guid>) {
    let lbs = client.list_load_balancers().await.expect("list LBs");
    let remote = client.list_endpoints().await.expect("list endpoints");
    let remote = remote
        .into_iter()
        .filter(|e| e.ips().any(|ip| ip.to_string() == "10.244.2.5"))
        .map(|e| e.id)
        .collect();
    (lbs.into_iter().map(|l| l.id).collect(), remote)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_started_on_a_missing_folder_removes_nothing_until_it_is_read() {
    let hnsd = Hnsd::start(Profile::Ws2022).await;
    let client = hnsd.client();
    create_network(&client, &l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1")).await;
    let parent = tempfile::tempdir().expect("temp dir");
    let manifests = parent.path().join("manifests");
    std::fs::create_dir(&manifests).expect("dir");
    write(&manifests, "web.yaml", &web());

    // An earlier proxy programmed web.
    let config = testkit::proxy::config(&hnsd.socket(), SourceConfig::Manifests(manifests.clone()));
    let first = Running::start(config.clone());
    until_async("the first proxy's load balancer", WAIT, async || {
        programmed(&client).await.0.len() == 1
    })
    .await;
    first.stop().await;
    let before = programmed(&client).await;
    assert_eq!(before.1.len(), 1, "web's remote endpoint");

    // The next proxy starts while the folder is elsewhere (or its path mistyped).
    std::fs::rename(&manifests, parent.path().join("away")).expect("move the folder");
    let (healthz, metrics) = (http::free_addr(), http::free_addr());
    let config = proxy::Config {
        healthz_bind: Some(healthz),
        metrics_bind: Some(metrics),
        ..config
    };
    let second = Running::start(config);
    let text = until_async("the proxy's metrics", WAIT, async || {
        http::get(metrics, "/metrics").map(|(_, text)| text)
    })
    .await;
    assert!(
        text.contains("winnet_proxy_source_errors 1"),
        "the unreadable folder is counted: {text}"
    );
    assert_eq!(
        http::get(healthz, "/healthz").map(|(status, _)| status),
        Some(503),
        "not healthy before a first sync"
    );
    assert_eq!(programmed(&client).await, before, "nothing removed");

    // The folder is back, with one more Service: web's load balancer is adopted, not remade.
    let mut objects = web();
    objects.extend(service("api", "10.96.0.11"));
    write(&parent.path().join("away"), "web.yaml", &objects);
    std::fs::rename(parent.path().join("away"), &manifests).expect("move the folder back");
    until_async("api's load balancer", WAIT, async || {
        programmed(&client).await.0.len() == 2
    })
    .await;
    let after = programmed(&client).await;
    assert!(
        after.0.contains(&before.0[0]),
        "web's load balancer was deleted and made again: {before:?} -> {after:?}"
    );
    assert_eq!(after.1, before.1, "web's remote endpoint was remade");
    let text = until_async("the error to clear", WAIT, async || {
        http::get(metrics, "/metrics")
            .map(|(_, text)| text)
            .filter(|t| t.contains("winnet_proxy_source_errors 0"))
    })
    .await;
    assert!(text.contains("winnet_proxy_load_balancers 2"), "{text}");
    second.stop().await;
}
