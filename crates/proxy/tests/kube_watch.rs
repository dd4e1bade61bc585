//! `--kubeconfig`: Services and EndpointSlices through kube-rs list + watch, against a small
//! fake API server that speaks the list and watch protocol (no cluster is reachable here).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hns::Profile;
use proxy::SourceConfig;
use serde_json::{Value, json};
use testkit::hnsd::{Hnsd, create_network, l2bridge};
use testkit::proxy::Running;
use testkit::wait::until_async;
use tokio::sync::broadcast;

/// How long the proxy may take to act on what the API server says.
const WAIT: Duration = Duration::from_secs(20);

/// The fake API server's objects per collection, and per collection a channel that streams
/// watch events to every live watch of it.
#[derive(Clone)]
struct Api {
    lists: Arc<Mutex<HashMap<String, Vec<Value>>>>,
    watches: Arc<HashMap<&'static str, broadcast::Sender<Value>>>,
    /// While set, every request gets 500 (an API server that is down behind its proxy).
    failing: Arc<AtomicBool>,
}

impl Api {
    fn new(collections: &[&'static str]) -> Api {
        let watches = collections
            .iter()
            .map(|c| (*c, broadcast::channel(64).0))
            .collect();
        Api {
            lists: Arc::default(),
            watches: Arc::new(watches),
            failing: Arc::default(),
        }
    }

    /// Sends `event` to the watches of `collection` once the proxy watches it: as from a real
    /// API server, an event before the watch would not reach the proxy (its list is older).
    async fn send_when_watched(&self, collection: &str, event: Value) {
        let watch = &self.watches[collection];
        let what = format!("the proxy to watch {collection}");
        until_async(&what, WAIT, async || watch.receiver_count() > 0).await;
        watch
            .send(event)
            .unwrap_or_else(|_| panic!("the proxy's watch of {collection} went away"));
    }
}

async fn collection(
    State(api): State<Api>,
    Path(path): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if api.failing.load(Ordering::Relaxed) {
        return axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
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
    let Some(watch) = api.watches.get(name.as_str()) else {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    };
    let stream = futures::stream::unfold(watch.subscribe(), |mut rx| async move {
        let event = rx.recv().await.ok()?;
        Some((Ok::<_, std::io::Error>(format!("{event}\n")), rx))
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Serves `api` on a loopback port; a kubeconfig for it (in the returned directory).
async fn serve(api: Api) -> (tempfile::TempDir, std::path::PathBuf) {
    let app = Router::new()
        .route("/{*path}", get(collection))
        .with_state(api);
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
    (dir, kubeconfig)
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

async fn wait_for(
    what: &str,
    client: &hns_client::Client,
    check: impl Fn(&[hcn::LoadBalancer]) -> bool,
) {
    until_async(what, WAIT, async || {
        let lbs = client
            .list_load_balancers()
            .await
            .map_err(|e| e.to_string())?;
        if check(&lbs) {
            Ok(())
        } else {
            Err(format!("load balancers {lbs:?}"))
        }
    })
    .await
}

/// An API server listing Service web with one remote backend, an hnsd with network cbr0,
/// and the proxy's configuration to read the one and program the other.
async fn web_behind_an_api() -> (Api, tempfile::TempDir, Hnsd, proxy::Config) {
    let api = Api::new(&["services", "endpointslices"]);
    api.lists
        .lock()
        .unwrap()
        .insert("services".into(), vec![service()]);
    api.lists
        .lock()
        .unwrap()
        .insert("endpointslices".into(), vec![slice(&["10.244.2.5"])]);
    let (dir, kubeconfig) = serve(api.clone()).await;
    let hnsd = Hnsd::start(Profile::Ws2022).await;
    create_network(
        &hnsd.client(),
        &l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1"),
    )
    .await;
    let config = testkit::proxy::config(&hnsd.socket(), SourceConfig::Kubeconfig(kubeconfig));
    (api, dir, hnsd, config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_come_from_a_kube_api_watch() {
    let (api, _dir, hnsd, config) = web_behind_an_api().await;
    let client = hnsd.client();
    let proxy = Running::start(config);

    wait_for("the listed Service", &client, |lbs| {
        lbs.len() == 1 && lbs[0].host_compute_endpoints.len() == 1
    })
    .await;
    // A watch event scales the Service up.
    let modified = json!({"type":"MODIFIED","object":slice(&["10.244.2.5","10.244.2.6"])});
    api.send_when_watched("endpointslices", modified).await;
    wait_for("the watch event to be applied", &client, |lbs| {
        lbs.len() == 1 && lbs[0].host_compute_endpoints.len() == 2
    })
    .await;
    let deleted = json!({"type":"DELETED","object":service()});
    api.send_when_watched("services", deleted).await;
    wait_for(
        "the deleted Service's load balancer to go",
        &client,
        |lbs| lbs.is_empty(),
    )
    .await;
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_whose_api_server_fails_removes_nothing_until_it_lists() {
    let (api, _dir, hnsd, config) = web_behind_an_api().await;
    let client = hnsd.client();
    // An earlier proxy programmed web.
    let first = Running::start(config.clone());
    wait_for("the listed Service", &client, |lbs| lbs.len() == 1).await;
    first.stop().await;
    let before = client.list_load_balancers().await.unwrap()[0].id;

    // The next proxy starts while the API server answers 500.
    api.failing.store(true, Ordering::Relaxed);
    let metrics = testkit::http::free_addr();
    let config = proxy::Config {
        metrics_bind: Some(metrics),
        ..config
    };
    let second = Running::start(config);
    until_async("the failing list to be counted", WAIT, async || {
        testkit::http::get(metrics, "/metrics")
            .filter(|(_, text)| !text.contains("winnet_proxy_source_errors 0"))
    })
    .await;
    let lbs = client.list_load_balancers().await.unwrap();
    assert_eq!(lbs.len(), 1, "nothing removed while the API server fails");
    // It answers again: the first sync adopts web's load balancer.
    api.failing.store(false, Ordering::Relaxed);
    until_async("a first sync", WAIT, async || {
        testkit::http::get(metrics, "/metrics")
            .filter(|(_, text)| text.contains("winnet_proxy_syncs_total 1"))
    })
    .await;
    let after = client.list_load_balancers().await.unwrap();
    assert_eq!(
        after.iter().map(|l| l.id).collect::<Vec<_>>(),
        [before],
        "web's load balancer was deleted and made again"
    );
    second.stop().await;
}
