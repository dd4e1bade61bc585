//! A sync after the first is incremental: it asks hnsd what others changed and reads only
//! that, never the network's whole state again, and replans only the Services a change
//! reaches — yet a pod the CNI made or made again since is taken up at the next sync.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hns::Profile;
use hns_client::transport::Exchange;
use hns_client::{Client, Method, Transport, UnixSocket};
use proxy::{Config, Proxy, Snapshot, SourceConfig};
use serde_json::{Value, json};
use testkit::kube::{endpoint, endpoint_slice, http_port, service};

const NODE: &str = "win-1";

/// hnsd's socket, noting every request (`METHOD path`); while `unreachable` is set, hnsd
/// cannot be reached.
struct Counting {
    socket: UnixSocket,
    seen: Arc<Mutex<Vec<String>>>,
    unreachable: Arc<AtomicBool>,
}

impl Transport for Counting {
    fn exchange(&self, method: Method, path: &str, body: Vec<u8>) -> Exchange<'_> {
        let line = format!("{method} {path}");
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
        if self.unreachable.load(Ordering::SeqCst) {
            let socket = self.socket.endpoint().into();
            return Box::pin(async move {
                Err(hns_client::ClientError::Connect {
                    socket,
                    reason: "refused by the test".into(),
                })
            });
        }
        self.socket.exchange(method, path, body)
    }

    fn endpoint(&self) -> String {
        self.socket.endpoint()
    }
}

struct Node {
    hnsd: testkit::hnsd::Hnsd,
    client: Client,
    net: hcn::Network,
    proxy: Proxy,
    seen: Arc<Mutex<Vec<String>>>,
    unreachable: Arc<AtomicBool>,
}

impl Node {
    /// The requests since the last call.
    fn requests(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// An hnsd with `cbr0`, its root endpoint and pods a and b (made as the CNI makes them), and
/// a proxy connected through a counting transport.
async fn node() -> Node {
    let (hnsd, net) = common::hnsd_with_cbr0(Profile::Ws2022, false).await;
    let client = hnsd.client();
    common::endpoint(&client, &net, "cbr0", &[("10.244.1.2", 24)]).await;
    for (name, ip) in [("pod-a", "10.244.1.10"), ("pod-b", "10.244.1.11")] {
        common::endpoint(&client, &net, name, &[(ip, 24)]).await;
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let unreachable = Arc::new(AtomicBool::new(false));
    let transport = Counting {
        socket: UnixSocket::new(hnsd.socket()),
        seen: Arc::clone(&seen),
        unreachable: Arc::clone(&unreachable),
    };
    let config = Config {
        retry_after: Duration::from_millis(50),
        ..testkit::proxy::config(
            &hnsd.socket(),
            SourceConfig::Manifests("/nonexistent".into()),
        )
    };
    let proxy = Proxy::connect_with(config, Client::over(Arc::new(transport)))
        .await
        .unwrap();
    Node {
        hnsd,
        client,
        net,
        proxy,
        seen,
        unreachable,
    }
}

/// Service `name` at `vip` over the endpoints (ip, node).
fn web(name: &str, vip: &str, eps: &[(&str, &str)]) -> [Value; 2] {
    let spec = json!({"clusterIP": vip, "ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP"}]});
    let endpoints = eps
        .iter()
        .map(|(ip, node)| endpoint(ip, node, true, true, false))
        .collect();
    [
        service(name, spec),
        endpoint_slice(
            &format!("{name}-a"),
            name,
            "IPv4",
            http_port(8080),
            endpoints,
        ),
    ]
}

fn snapshot(objects: &[Value]) -> Snapshot {
    let mut snap = Snapshot::default();
    let text: Vec<String> = objects.iter().map(|o| format!("---\n{o}\n")).collect();
    proxy::source::manifests::load_text(&text.concat(), "test", &mut snap);
    snap
}

/// The backends of the load balancer at `vip`.
async fn backends(n: &Node, vip: &str) -> Vec<hcn::Guid> {
    let vip: std::net::IpAddr = vip.parse().unwrap();
    let lbs = n.client.list_load_balancers().await.unwrap();
    let lb = lbs
        .iter()
        .find(|lb| lb.frontend_vips.first() == Some(&vip))
        .unwrap_or_else(|| panic!("no load balancer at {vip}: {lbs:#?}"));
    let mut ids = lb.host_compute_endpoints.clone();
    ids.sort();
    ids
}

#[tokio::test]
async fn an_endpoint_change_lists_nothing_and_writes_only_its_service() {
    let mut n = node().await;
    let mut objects: Vec<Value> = Vec::new();
    objects.extend(web(
        "web",
        "10.96.0.10",
        &[("10.244.1.10", NODE), ("10.244.2.5", "win-2")],
    ));
    objects.extend(web("api", "10.96.0.11", &[("10.244.1.11", NODE)]));
    let report = n.proxy.sync(&snapshot(&objects)).await;
    assert_eq!(report.created, 2, "{report:?}");
    n.requests();
    // One endpoint more for web, on another node.
    objects.splice(
        0..2,
        web(
            "web",
            "10.96.0.10",
            &[
                ("10.244.1.10", NODE),
                ("10.244.2.5", "win-2"),
                ("10.244.2.6", "win-2"),
            ],
        ),
    );
    let report = n.proxy.sync(&snapshot(&objects)).await;
    assert!(report.retry.is_empty(), "{report:?}");
    let requests = n.requests();
    let lists: Vec<&String> = requests
        .iter()
        .filter(|r| {
            r.starts_with("GET /endpoints")
                || r.starts_with("GET /networks")
                || r.starts_with("GET /loadbalancers")
        })
        .collect();
    assert!(
        lists.is_empty(),
        "an incremental sync read HNS's state again: {lists:?} (all: {requests:?})"
    );
    // web's load balancer replaced (ws2022) and its new remote endpoint made; api untouched.
    let writes: Vec<&String> = requests.iter().filter(|r| !r.starts_with("GET ")).collect();
    assert_eq!(writes.len(), 3, "{writes:?}");
    assert_eq!(backends(&n, "10.96.0.10").await.len(), 3);
}

#[tokio::test]
async fn a_pod_made_again_by_the_cni_is_taken_up_at_the_next_sync() {
    let mut n = node().await;
    let mut objects: Vec<Value> = Vec::new();
    objects.extend(web("web", "10.96.0.10", &[("10.244.1.10", NODE)]));
    objects.extend(web("api", "10.96.0.11", &[("10.244.1.11", NODE)]));
    n.proxy.sync(&snapshot(&objects)).await;
    let before = backends(&n, "10.96.0.10").await;
    // The CNI removes pod-a's endpoint and makes it again with the same address (the pod
    // restarted); the Services did not change.
    let old = n
        .client
        .list_endpoints()
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.name == "pod-a")
        .unwrap();
    n.client.delete_endpoint(old.id).await.unwrap();
    let new = common::endpoint(&n.client, &n.net, "pod-a", &[("10.244.1.10", 24)]).await;
    // Any change triggers the next sync: here api's slice.
    objects.splice(
        2..4,
        web(
            "api",
            "10.96.0.11",
            &[("10.244.1.11", NODE), ("10.244.2.9", "win-2")],
        ),
    );
    let report = n.proxy.sync(&snapshot(&objects)).await;
    assert!(report.retry.is_empty(), "{report:?}");
    assert_eq!(before, vec![old.id]);
    assert_eq!(
        backends(&n, "10.96.0.10").await,
        vec![new],
        "web's load balancer still names the deleted endpoint"
    );
    let _ = &n.hnsd;
}

#[tokio::test]
async fn a_service_removed_while_hnsd_cannot_be_reached_is_removed_once_it_can() {
    let mut n = node().await;
    let mut objects: Vec<Value> = Vec::new();
    objects.extend(web("web", "10.96.0.10", &[("10.244.1.10", NODE)]));
    objects.extend(web("api", "10.96.0.11", &[("10.244.1.11", NODE)]));
    let report = n.proxy.sync(&snapshot(&objects)).await;
    assert_eq!(report.created, 2, "{report:?}");
    // api removed while hnsd cannot be reached: the sync fails and deletes nothing.
    objects.truncate(2);
    let without_api = snapshot(&objects);
    n.unreachable.store(true, Ordering::SeqCst);
    let failed = n.proxy.sync(&without_api).await;
    assert_eq!(failed.deleted, 0, "{failed:?}");
    assert!(!failed.problems.is_empty(), "{failed:?}");
    // The same objects once hnsd answers again: api's load balancer is deleted, web's kept.
    n.unreachable.store(false, Ordering::SeqCst);
    let report = n.proxy.sync(&without_api).await;
    assert_eq!(report.deleted, 1, "{report:?}");
    let vips: Vec<_> = n
        .client
        .list_load_balancers()
        .await
        .unwrap()
        .iter()
        .flat_map(|lb| lb.frontend_vips.clone())
        .collect();
    assert_eq!(
        vips,
        vec!["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
}
