//! `--kubeconfig`: Services and EndpointSlices through kube-rs list + watch, against a small
//! fake API server that speaks the list and watch protocol (no cluster is reachable here).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hns::Profile;
use proxy::SourceConfig;
use serde_json::{Value, json};
use testkit::hnsd::{Hnsd, create_network, l2bridge};
use tokio::sync::broadcast;

/// The fake API server's objects per collection, and the watch events it streams.
#[derive(Clone)]
struct Api {
    lists: Arc<Mutex<HashMap<String, Vec<Value>>>>,
    events: broadcast::Sender<(String, Value)>,
}

async fn collection(
    State(api): State<Api>,
    Path(path): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let name = path.rsplit('/').next().unwrap_or_default().to_string();
    let watching = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    if !watching {
        let items = api
            .lists
            .lock()
            .unwrap()
            .get(&name)
            .cloned()
            .unwrap_or_default();
        let body = json!({"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"1"},"items":items});
        return axum::Json(body).into_response();
    }
    let rx = api.events.subscribe();
    let stream = futures::stream::unfold((rx, name), |(mut rx, name)| async move {
        loop {
            match rx.recv().await {
                Ok((coll, ev)) if coll == name => {
                    let line = format!("{ev}\n");
                    return Some((Ok::<_, std::io::Error>(line), (rx, name)));
                }
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn service() -> Value {
    let mut s = testkit::kube::cluster_ip("web", "10.96.0.10", 80, 8080);
    s["metadata"]["resourceVersion"] = json!("1");
    s
}

fn slice(ips: &[&str]) -> Value {
    let eps = ips
        .iter()
        .map(|ip| testkit::kube::ready(ip, "win-2"))
        .collect();
    let mut s =
        testkit::kube::endpoint_slice("web-1", "web", "IPv4", testkit::kube::http_port(8080), eps);
    s["metadata"]["resourceVersion"] = json!("2");
    s
}

async fn wait_for(what: &str, client: &hns::Client, check: impl Fn(&[hcn::LoadBalancer]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(lbs) = client.list_load_balancers().await
            && check(&lbs)
        {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_come_from_a_kube_api_watch() {
    let api = Api {
        lists: Arc::default(),
        events: broadcast::channel(64).0,
    };
    api.lists
        .lock()
        .unwrap()
        .insert("services".into(), vec![service()]);
    api.lists
        .lock()
        .unwrap()
        .insert("endpointslices".into(), vec![slice(&["10.244.2.5"])]);
    let app = Router::new()
        .route("/{*path}", get(collection))
        .with_state(api.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\nusers:\n- name: me\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: me}}\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    let hnsd = Hnsd::start(Profile::Ws2022).await;
    let client = hnsd.client();
    create_network(&client, &l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1")).await;
    let config = testkit::proxy::config(&hnsd.socket(), SourceConfig::Kubeconfig(kubeconfig));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let proxy = tokio::spawn(proxy::run(config, async {
        let _ = stopped.await;
    }));

    wait_for("the listed Service", &client, |lbs| {
        lbs.len() == 1 && lbs[0].host_compute_endpoints.len() == 1
    })
    .await;
    // A watch event scales the Service up.
    let modified = json!({"type":"MODIFIED","object":slice(&["10.244.2.5","10.244.2.6"])});
    // Retry until the watch is connected (the event is only seen by a live watch).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let _ = api.events.send(("endpointslices".into(), modified.clone()));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let lbs = client.list_load_balancers().await.unwrap();
        if lbs.len() == 1 && lbs[0].host_compute_endpoints.len() == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the watch event was not applied: {lbs:?}"
        );
    }
    let deleted = json!({"type":"DELETED","object":service()});
    let _ = api.events.send(("services".into(), deleted));
    wait_for(
        "the deleted Service's load balancer to go",
        &client,
        |lbs| lbs.is_empty(),
    )
    .await;
    let _ = stop.send(());
    proxy.await.unwrap().unwrap();
}
