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

/// The per-Service health-check listeners (ExternalTrafficPolicy Local).
#[derive(Default)]
pub struct ServiceHealth {
    listeners: HashMap<u16, (ServiceKey, watch::Sender<usize>, JoinHandle<()>)>,
}

impl ServiceHealth {
    /// Makes the listeners match `wanted`: port -> (Service, local endpoints).
    pub fn update(&mut self, wanted: &HashMap<u16, (ServiceKey, usize)>) {
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
}

fn spawn_listener(port: u16, key: ServiceKey, count: watch::Receiver<usize>) -> JoinHandle<()> {
    let app = Router::new().fallback(move || {
        let n = *count.borrow();
        let key = key.clone();
        async move {
            let body = serde_json::json!({
                "service": { "namespace": key.namespace, "name": key.name },
                "localEndpoints": n,
                "serviceProxyHealthy": true,
            });
            let status = if n > 0 {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (status, axum::Json(body))
        }
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
