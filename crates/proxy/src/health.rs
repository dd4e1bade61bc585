//! The health servers kube-proxy runs: `/healthz` on the healthz address, and one listener per
//! `healthCheckNodePort` answering with the Service's local endpoint count.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::model::ServiceKey;

/// Shared between the proxier and the servers.
#[derive(Default)]
pub struct Health {
    /// Unix seconds of the last sync that finished (0 = none yet).
    last_sync: AtomicU64,
    pub metrics: Metrics,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Health {
    pub fn synced(&self) {
        self.last_sync.store(now(), Ordering::Relaxed);
    }
}

/// Serves `/healthz` (and `/metrics`) on `addr`.
pub fn serve(addr: SocketAddr, health: Arc<Health>, metrics_only: bool) -> JoinHandle<()> {
    let h = Arc::clone(&health);
    let mut app = Router::new().route("/metrics", get(move || async move { h.metrics.render() }));
    if !metrics_only {
        app = app.route("/healthz", get(move || async move { healthz(&health) }));
    }
    tokio::spawn(async move {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                if let Err(e) = axum::serve(l, app).await {
                    tracing::error!(%addr, error = %e, "health server failed");
                }
            }
            Err(e) => tracing::error!(%addr, error = %e, "cannot bind the health server"),
        }
    })
}

fn healthz(h: &Health) -> axum::response::Response {
    let last = h.last_sync.load(Ordering::Relaxed);
    let body = serde_json::json!({ "lastUpdated": last, "currentTime": now() });
    let status = if last == 0 {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, axum::Json(body)).into_response()
}

/// What a Service's health check node port answers: 200 while this node has a local endpoint
/// of it, else 503, with kube-proxy's JSON body (`service`, `localEndpoints`,
/// `serviceProxyHealthy`), so that a cloud load balancer sends traffic only to nodes that
/// keep the client's address and have a backend.
pub fn service_answer(key: &ServiceKey, local_endpoints: usize) -> (StatusCode, serde_json::Value) {
    let body = serde_json::json!({
        "service": { "namespace": key.namespace, "name": key.name },
        "localEndpoints": local_endpoints,
        "serviceProxyHealthy": true,
    });
    let status = if local_endpoints > 0 {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body)
}

/// The per-Service health checks (ExternalTrafficPolicy Local): what each health check node
/// port answers, and, once [`ServiceHealth::listen`] is called (the daemon), one TCP listener
/// per port serving it. A proxy in the same process as its client (the in-memory cluster)
/// does not listen; its answers are read with [`ServiceHealth::answer`].
#[derive(Default)]
pub struct ServiceHealth {
    wanted: HashMap<u16, (ServiceKey, usize)>,
    listening: bool,
    listeners: HashMap<u16, (ServiceKey, watch::Sender<usize>, JoinHandle<()>)>,
}

impl ServiceHealth {
    /// From now on, serves every health check node port on a TCP listener.
    pub fn listen(&mut self) {
        self.listening = true;
        let wanted = self.wanted.clone();
        self.update(&wanted);
    }

    /// Makes the health checks match `wanted`: port -> (Service, local endpoints).
    pub fn update(&mut self, wanted: &HashMap<u16, (ServiceKey, usize)>) {
        self.wanted = wanted.clone();
        if !self.listening {
            return;
        }
        self.listeners.retain(|port, (key, _, task)| {
            let keep = wanted.get(port).is_some_and(|(k, _)| k == key);
            if !keep {
                task.abort();
            }
            keep
        });
        for (port, (key, count)) in wanted {
            if let Some((_, tx, _)) = self.listeners.get(port) {
                tx.send_replace(*count);
                continue;
            }
            let (tx, rx) = watch::channel(*count);
            let task = spawn_listener(*port, key.clone(), rx);
            self.listeners.insert(*port, (key.clone(), tx, task));
        }
    }

    /// The health check node ports there are, in order.
    pub fn ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self.wanted.keys().copied().collect();
        ports.sort_unstable();
        ports
    }

    /// What health check node port `port` answers (status, JSON body); `None` when no
    /// Service has it.
    pub fn answer(&self, port: u16) -> Option<(u16, String)> {
        let (key, count) = self.wanted.get(&port)?;
        let (status, body) = service_answer(key, *count);
        Some((status.as_u16(), body.to_string()))
    }
}

fn spawn_listener(port: u16, key: ServiceKey, count: watch::Receiver<usize>) -> JoinHandle<()> {
    let app = Router::new().fallback(move || {
        let n = *count.borrow();
        let (status, body) = service_answer(&key, n);
        async move { (status, axum::Json(body)) }
    });
    tokio::spawn(async move {
        let addr = SocketAddr::from(([0, 0, 0, 0], port));
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                let _ = axum::serve(l, app).await;
            }
            Err(e) => tracing::warn!(port, error = %e, "cannot bind the health check node port"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_health_check_node_port_says_200_with_a_local_endpoint_and_503_without() {
        let key = ServiceKey {
            namespace: "default".into(),
            name: "local".into(),
        };
        // Not listening (a proxy in its client's process): the answers are still there.
        let mut checks = ServiceHealth::default();
        checks.update(&HashMap::from([
            (32081, (key.clone(), 1)),
            (32082, (key, 0)),
        ]));
        assert_eq!(checks.ports(), [32081, 32082]);
        let (status, body) = checks.answer(32081).expect("a Service has the port");
        assert_eq!(status, 200);
        let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(body["localEndpoints"], 1);
        assert_eq!(body["service"]["name"], "local");
        assert_eq!(checks.answer(32082).map(|a| a.0), Some(503));
        assert_eq!(checks.answer(32083), None);
        checks.update(&HashMap::new());
        assert!(checks.ports().is_empty());
    }
}
