//! A Kubernetes API test server for Nodes (no cluster is reachable here), speaking what
//! kube-rs asks of it: GET one Node, list, watch from a resourceVersion (every event after it
//! is replayed, then live ones streamed), and PATCH with a JSON merge patch. It listens in the
//! lab's fabric namespace, so flanneld in a node namespace reaches it as it would reach a real
//! API server, and it records every patch it was sent.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::Lab;

#[derive(Default)]
struct Objects {
    nodes: BTreeMap<String, Value>,
    /// Every change: (resourceVersion, ADDED|MODIFIED|DELETED, the object after it).
    events: Vec<(u64, &'static str, Value)>,
    rv: u64,
    /// (content-type, body) of every PATCH.
    patches: Vec<(String, Value)>,
}

#[derive(Clone, Default)]
struct Shared {
    objects: Arc<Mutex<Objects>>,
    changed: Arc<Notify>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `node` (or deletes it) and records the event.
    fn put(&self, name: &str, node: Option<Value>) {
        let mut o = self.lock();
        o.rv += 1;
        let rv = o.rv;
        let event = match node {
            Some(mut n) => {
                n["metadata"]["resourceVersion"] = json!(rv.to_string());
                let kind = if o.nodes.contains_key(name) {
                    "MODIFIED"
                } else {
                    "ADDED"
                };
                o.nodes.insert(name.to_string(), n.clone());
                Some((rv, kind, n))
            }
            None => o.nodes.remove(name).map(|mut n| {
                n["metadata"]["resourceVersion"] = json!(rv.to_string());
                (rv, "DELETED", n)
            }),
        };
        if let Some(e) = event {
            o.events.push(e);
        }
        drop(o);
        self.changed.notify_waiters();
    }
}

/// The running server; it stops with the lab's runtime thread when dropped.
pub struct KubeApi {
    shared: Shared,
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

/// A Node with `pod_cidr` (if any) and `annotations`.
pub fn node(name: &str, pod_cidr: Option<&str>, annotations: Value) -> Value {
    let mut n = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "annotations": annotations},
        "spec": {}});
    if let Some(c) = pod_cidr {
        n["spec"] = json!({"podCIDR": c, "podCIDRs": [c]});
    }
    n
}

/// The annotations flanneld publishes for a host-gw node at `ip`.
pub fn host_gw_annotations(ip: Ipv4Addr) -> Value {
    json!({
        "flannel.alpha.coreos.com/backend-type": "host-gw",
        "flannel.alpha.coreos.com/backend-data": "null",
        "flannel.alpha.coreos.com/public-ip": ip.to_string(),
        "flannel.alpha.coreos.com/kube-subnet-manager": "true",
    })
}

impl KubeApi {
    /// Starts the server on the lab's fabric address.
    pub fn start(lab: &Lab) -> KubeApi {
        let ip = lab.fabric_ip();
        let listener = host::netns::Netns::named(&lab.fabric.0)
            .run(|| Ok(std::net::TcpListener::bind((ip, 0))))
            .expect("enter the fabric namespace")
            .expect("bind the API server");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let shared = Shared::default();
        let app = Router::new()
            .route("/api/v1/nodes", get(list_or_watch))
            .route("/api/v1/nodes/{name}", get(get_node).patch(patch_node))
            .with_state(shared.clone());
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let _ = axum::serve(listener, app).await;
        });
        KubeApi {
            shared,
            addr,
            _runtime: runtime,
        }
    }

    /// A kubeconfig for this server, written in the lab's dir.
    pub fn kubeconfig(&self, lab: &Lab) -> std::path::PathBuf {
        let path = lab.dir.path().join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster: {{server: \"http://{}\"}}\n\
             users:\n- name: flanneld\n  user: {{}}\ncontexts:\n- name: lab\n  context: {{cluster: lab, user: flanneld}}\n\
             current-context: lab\n",
            self.addr
        );
        std::fs::write(&path, text).expect("write the kubeconfig");
        path
    }

    /// Adds or replaces a Node, as the API server would on a create or update.
    pub fn put_node(&self, node: Value) {
        let name = node["metadata"]["name"]
            .as_str()
            .expect("a Node name")
            .to_string();
        self.shared.put(&name, Some(node));
    }

    pub fn delete_node(&self, name: &str) {
        self.shared.put(name, None);
    }

    pub fn get(&self, name: &str) -> Option<Value> {
        self.shared.lock().nodes.get(name).cloned()
    }

    /// (content-type, body) of every PATCH so far.
    pub fn patches(&self) -> Vec<(String, Value)> {
        self.shared.lock().patches.clone()
    }
}

/// Applies a JSON merge patch (RFC 7386) to `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

async fn get_node(State(s): State<Shared>, Path(name): Path<String>) -> Response {
    match s.lock().nodes.get(&name) {
        Some(n) => axum::Json(n.clone()).into_response(),
        None => not_found(&name),
    }
}

fn not_found(name: &str) -> Response {
    let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": format!("nodes \"{name}\" not found"), "reason": "NotFound", "code": 404});
    (StatusCode::NOT_FOUND, axum::Json(status)).into_response()
}

async fn patch_node(
    State(s): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let kind = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let current = s.lock().nodes.get(&name).cloned();
    let Some(mut node) = current else {
        return not_found(&name);
    };
    s.lock().patches.push((kind.clone(), patch.clone()));
    if kind != "application/merge-patch+json" {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, "merge patches only").into_response();
    }
    merge(&mut node, &patch);
    s.put(&name, Some(node));
    match s.lock().nodes.get(&name) {
        Some(n) => axum::Json(n.clone()).into_response(),
        None => not_found(&name),
    }
}

async fn list_or_watch(
    State(s): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !q.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let o = s.lock();
        let body = json!({"apiVersion": "v1", "kind": "NodeList",
            "metadata": {"resourceVersion": o.rv.to_string()},
            "items": o.nodes.values().cloned().collect::<Vec<_>>()});
        return axum::Json(body).into_response();
    }
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let stream = futures::stream::unfold((s, from), |(s, mut seen)| async move {
        loop {
            let changed = s.changed.clone();
            let notified = changed.notified();
            let next = s
                .lock()
                .events
                .iter()
                .find(|(rv, _, _)| *rv > seen)
                .cloned();
            if let Some((rv, kind, obj)) = next {
                seen = rv;
                let line = format!("{}\n", json!({"type": kind, "object": obj}));
                return Some((Ok::<_, std::io::Error>(line), (s, seen)));
            }
            notified.await;
        }
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
