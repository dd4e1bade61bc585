//! `winnet proxy --manifests DIR` as users run it: a real process against hnsd, programming
//! Services from a folder that changes under it, serving /healthz, /metrics and the health
//! check node port of an ExternalTrafficPolicy=Local Service.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hcn::{Endpoint, IpConfig};
use hns::Profile;
use serde_json::json;
use testkit::hnsd::{Hnsd, create_network, l2bridge};
use testkit::http::{free_addr, get};
use testkit::kube::{cluster_ip, endpoint_slice, http_port, ready, yaml_stream};
use testkit::wait::until_async;

/// The proxy process; killed and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long the proxy may take to act on a change.
const WAIT: Duration = Duration::from_secs(15);

fn write(dir: &Path, file: &str, objects: &[serde_json::Value]) {
    std::fs::write(dir.join(file), yaml_stream(objects)).expect("write manifest");
}

fn web(extra: serde_json::Value) -> serde_json::Value {
    let mut web = cluster_ip("web", "10.96.0.10", 80, 8080);
    for (k, v) in extra.as_object().expect("object") {
        web["spec"][k] = v.clone();
    }
    web
}

fn web_slice() -> serde_json::Value {
    let endpoints = vec![ready("10.244.1.10", "win-1"), ready("10.244.2.5", "win-2")];
    endpoint_slice("web-1", "web", "IPv4", http_port(8080), endpoints)
}

/// `winnet proxy` on node win-1's network cbr0, reading `manifests`, programming the hnsd on
/// `hns_socket`, serving `/healthz` and `/metrics` on the addresses given; its log is
/// `proxy.log` in `dir`.
fn spawn_proxy(
    manifests: &Path,
    hns_socket: &Path,
    healthz: SocketAddr,
    metrics: SocketAddr,
    dir: &Path,
) -> Proc {
    let log = std::fs::File::create(dir.join("proxy.log")).expect("log");
    Proc(
        Command::new(env!("CARGO_BIN_EXE_winnet"))
            .args([
                "proxy",
                "--network-name",
                "cbr0",
                "--hostname-override",
                "win-1",
                "--bind-address",
                "192.168.0.11",
            ])
            .arg("--manifests")
            .arg(manifests)
            .arg("--hns-socket")
            .arg(hns_socket)
            .args(["--healthz-bind-address", &healthz.to_string()])
            .args(["--metrics-bind-address", &metrics.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("winnet proxy"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_programs_a_changing_folder_and_serves_health() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hnsd = Hnsd::start(Profile::Ws2022).await;
    let client = hnsd.client();
    let net = create_network(&client, &l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1")).await;
    let pod = Endpoint {
        host_compute_network: net.id,
        ip_configurations: vec![IpConfig {
            ip_address: Some("10.244.1.10".parse().expect("ip")),
            prefix_length: 24,
        }],
        ..Default::default()
    };
    client.create_endpoint(&pod).await.expect("pod endpoint");

    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("dir");
    write(&manifests, "web.yaml", &[web(json!({})), web_slice()]);
    let (healthz, metrics, health_node_port) = (free_addr(), free_addr(), free_addr());
    let _proxy = spawn_proxy(&manifests, &hnsd.socket(), healthz, metrics, dir.path());
    let log_text = || std::fs::read_to_string(dir.path().join("proxy.log")).unwrap_or_default();

    let lbs = until_async("the ClusterIP load balancer", WAIT, async || {
        let lbs = client.list_load_balancers().await.ok()?;
        (lbs.len() == 1).then_some(lbs)
    })
    .await;
    assert_eq!(lbs[0].host_compute_endpoints.len(), 2);
    // Healthy once the first sync is recorded, which may come a moment after the load
    // balancer is in HNS.
    let (status, body) = until_async("/healthz to say 200", WAIT, async || {
        get(healthz, "/healthz").filter(|(status, _)| *status == 200)
    })
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("lastUpdated"), "{body}");
    let (_, text) = until_async("/metrics", WAIT, async || get(metrics, "/metrics")).await;
    assert!(text.contains("winnet_proxy_load_balancers 1"), "{text}");
    assert!(text.contains("winnet_proxy_remote_endpoints 1"), "{text}");
    assert!(
        text.contains("kubeproxy_sync_proxy_rules_duration_seconds_count"),
        "{text}"
    );

    // The folder changes: a NodePort with ExternalTrafficPolicy Local and a health check port.
    write(
        &manifests,
        "web.yaml",
        &[
            web(
                json!({"type":"NodePort","externalTrafficPolicy":"Local","healthCheckNodePort":health_node_port.port(),
            "ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP","nodePort":30080}]}),
            ),
            web_slice(),
        ],
    );
    until_async("the NodePort load balancer", WAIT, async || {
        let lbs = client.list_load_balancers().await.ok()?;
        lbs.iter()
            .any(|lb| lb.frontend_vips.is_empty() && lb.port_mappings[0].external_port == 30080)
            .then_some(())
    })
    .await;
    let (status, body) = until_async("the health check node port", WAIT, async || {
        get(health_node_port, "/")
    })
    .await;
    assert_eq!(status, 200, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(health["localEndpoints"], 1);
    assert_eq!(health["service"]["name"], "web");

    // A bad manifest beside it is reported and the rest stays programmed.
    std::fs::write(
        manifests.join("broken.yaml"),
        "kind: Service\nmetadata: {name: bad}\nspec: {ports: [{port: 0}]}\n",
    )
    .expect("write");
    until_async("the bad manifest to be reported", WAIT, async || {
        log_text().contains("broken.yaml").then_some(())
    })
    .await;
    assert_eq!(
        client.list_load_balancers().await.expect("list").len(),
        2,
        "{}",
        log_text()
    );

    // The Service goes: its load balancers and remote endpoint go with it.
    std::fs::remove_file(manifests.join("web.yaml")).expect("remove");
    until_async("everything to be removed", WAIT, async || {
        let lbs = client.list_load_balancers().await.ok()?;
        let remotes = client
            .list_endpoints()
            .await
            .ok()?
            .into_iter()
            .filter(|e| e.is_remote())
            .count();
        (lbs.is_empty() && remotes == 0).then_some(())
    })
    .await;
    assert_eq!(
        client.list_endpoints().await.expect("list").len(),
        1,
        "the pod's endpoint is never touched"
    );
}

/// The load balancers' ids and the remote endpoints' ids in HNS.
async fn programmed(client: &hns_client::Client) -> (Vec<hcn::Guid>, Vec<hcn::Guid>) {
    let lbs = client.list_load_balancers().await.expect("list LBs");
    let remote = client.list_endpoints().await.expect("list endpoints");
    let remote = remote.into_iter().filter(|e| e.is_remote()).map(|e| e.id);
    (lbs.into_iter().map(|l| l.id).collect(), remote.collect())
}

/// Waits until `/metrics` on `metrics` has a line `line`.
async fn until_metric(metrics: SocketAddr, line: &str) -> String {
    let what = format!("/metrics to say {line}");
    until_async(&what, WAIT, async || {
        get(metrics, "/metrics")
            .map(|(_, text)| text)
            .filter(|text| text.lines().any(|l| l == line))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_moved_away_or_a_file_half_written_deletes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let hnsd = testkit::hnsd::HnsdCommand::new(env!("CARGO_BIN_EXE_winnet"), dir.path()).start();
    let client = hnsd.client();
    create_network(&client, &l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1")).await;
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("dir");
    // Its one backend is on another node: nothing here waits for a local pod.
    let remote = vec![ready("10.244.2.5", "win-2")];
    let slice = endpoint_slice("web-1", "web", "IPv4", http_port(8080), remote);
    let whole = yaml_stream(&[web(json!({})), slice]);
    std::fs::write(manifests.join("web.yaml"), &whole).expect("write");
    let (healthz, metrics) = (free_addr(), free_addr());
    let _proxy = spawn_proxy(&manifests, hnsd.socket(), healthz, metrics, dir.path());
    until_async(
        "web's load balancer and remote endpoint",
        WAIT,
        async || {
            let (lbs, remotes) = programmed(&client).await;
            lbs.len() == 1 && remotes.len() == 1
        },
    )
    .await;
    let programmed_first = programmed(&client).await;
    until_metric(metrics, "winnet_proxy_source_errors 0").await;

    // The folder is moved away (a deploy tool swapping it), then back.
    std::fs::rename(&manifests, dir.path().join("away")).expect("move the folder");
    until_async("the proxy to see it gone, or to delete", WAIT, async || {
        let noticed = get(metrics, "/metrics")
            .is_some_and(|(_, t)| t.lines().any(|l| l == "winnet_proxy_source_errors 1"));
        noticed || programmed(&client).await.0.is_empty()
    })
    .await;
    assert_eq!(
        programmed(&client).await,
        programmed_first,
        "deleted while the folder was away"
    );
    assert_eq!(get(healthz, "/healthz").map(|(s, _)| s), Some(200));
    std::fs::rename(dir.path().join("away"), &manifests).expect("move the folder back");
    until_metric(metrics, "winnet_proxy_source_errors 0").await;
    assert_eq!(programmed(&client).await, programmed_first);

    // web.yaml is truncated and rewritten in place by a slow writer: empty, then half.
    for partial in ["", &whole[..whole.len() / 2]] {
        std::fs::write(manifests.join("web.yaml"), partial).expect("write");
        until_metric(metrics, "winnet_proxy_source_errors 1").await;
        assert_eq!(
            programmed(&client).await,
            programmed_first,
            "deleted while web.yaml was {partial:?}"
        );
    }
    std::fs::write(manifests.join("web.yaml"), &whole).expect("write");
    until_metric(metrics, "winnet_proxy_source_errors 0").await;
    assert_eq!(programmed(&client).await, programmed_first);
}
