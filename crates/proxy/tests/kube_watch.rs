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
use hns::server::Config as HnsConfig;
use proxy::{Config, FeatureGates, SourceConfig};
use serde_json::{Value, json};
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
    json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default","resourceVersion":"1"},
        "spec":{"clusterIP":"10.96.0.10","ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP"}]}})
}

fn slice(ips: &[&str]) -> Value {
    let eps: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"addresses":[ip],"nodeName":"win-2","conditions":{"ready":true}}))
        .collect();
    json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":"web-1","namespace":"default","resourceVersion":"2","labels":{"kubernetes.io/service-name":"web"}},
        "addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],"endpoints":eps})
}

async fn wait_for(
    what: &str,
    client: &hns_client::Client,
    check: impl Fn(&[hcn::LoadBalancer]) -> bool,
) {
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
    let hnsd = hns::server::spawn(&HnsConfig {
        state_dir: dir.path().join("state"),
        socket: dir.path().join("hns.sock"),
        profile: Profile::Ws2022,
        dataplane: None,
    })
    .unwrap();
    let client = hnsd.client();
    let net = json!({"Name":"cbr0","Type":"L2Bridge","Ipams":[{"Subnets":[{"IpAddressPrefix":"10.244.1.0/24",
        "Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]}]}]});
    client
        .call(
            hns_client::Method::POST,
            "/networks",
            Some(net.to_string().into_bytes()),
        )
        .await
        .unwrap();

    let config = Config {
        hostname: "win-1".into(),
        network_name: "cbr0".into(),
        source_vip: None,
        enable_dsr: false,
        feature_gates: FeatureGates::default(),
        cluster_cidr: None,
        node_ips: vec!["192.168.0.11".parse().unwrap()],
        healthz_bind: None,
        metrics_bind: None,
        hns_socket: hnsd.socket.clone(),
        root_hnsendpoint_name: "cbr0".into(),
        forward_healthcheck_vip: false,
        source: SourceConfig::Kubeconfig(kubeconfig),
        retry_after: Duration::from_millis(100),
        host_mac: None,
    };
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
