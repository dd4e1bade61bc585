//! `winnet proxy --manifests DIR` as users run it: a real process against hnsd, programming
//! Services from a folder that changes under it, serving /healthz, /metrics and the health
//! check node port of an ExternalTrafficPolicy=Local Service.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hcn::{Endpoint, IpConfig};
use hns::Profile;
use serde_json::json;
use testkit::hnsd::{Hnsd, create_network, l2bridge};
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A plain HTTP GET: (status, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
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
    let (healthz, metrics, health_node_port) = (free_port(), free_port(), free_port());
    let log = std::fs::File::create(dir.path().join("proxy.log")).expect("log");
    let _proxy = Proc(
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
            .arg(&manifests)
            .arg("--hns-socket")
            .arg(hnsd.socket())
            .args(["--healthz-bind-address", &format!("127.0.0.1:{healthz}")])
            .args(["--metrics-bind-address", &format!("127.0.0.1:{metrics}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("winnet proxy"),
    );
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
                json!({"type":"NodePort","externalTrafficPolicy":"Local","healthCheckNodePort":health_node_port,
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
