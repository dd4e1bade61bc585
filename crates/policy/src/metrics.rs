//! The agent's Prometheus metrics and its health server: `/metrics`, and `/healthz`
//! answering 503 until the first sync, as the proxy's does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use crate::problem::Problem;

/// The agent's metrics, registered once.
pub struct Metrics {
    registry: Registry,
    /// ACL rules the plan holds over the node's endpoints.
    pub acl_rules: Gauge,
    /// `winnet_policy_skipped_constructs{reason}`: constructs the style could not express now.
    pub skipped: Family<Vec<(String, String)>, Gauge>,
    pub sync_duration: Histogram,
    pub source_errors: Gauge,
    pub endpoint_updates: Counter,
    pub hns_calls: Counter,
    pub sync_errors: Counter,
    pub syncs: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            acl_rules: Gauge::default(),
            skipped: Family::default(),
            sync_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            source_errors: Gauge::default(),
            endpoint_updates: Counter::default(),
            hns_calls: Counter::default(),
            sync_errors: Counter::default(),
            syncs: Counter::default(),
        };
        let r = &mut registry;
        r.register(
            "winnet_policy_acl_rules",
            "ACL rules programmed over the node's endpoints",
            m.acl_rules.clone(),
        );
        r.register(
            "winnet_policy_skipped_constructs",
            "NetworkPolicy constructs the style cannot express on Windows, by reason (skipped as the peer skips them)",
            m.skipped.clone(),
        );
        r.register(
            "winnet_policy_sync_duration_seconds",
            "Time a sync took to program HNS",
            m.sync_duration.clone(),
        );
        r.register(
            "winnet_policy_source_errors",
            "Reads of the Kubernetes objects failing now; the last good objects stay programmed",
            m.source_errors.clone(),
        );
        r.register(
            "winnet_policy_endpoint_updates",
            "Endpoint ACL lists sent to HNS",
            m.endpoint_updates.clone(),
        );
        r.register(
            "winnet_policy_hns_calls",
            "HNS modify calls sent",
            m.hns_calls.clone(),
        );
        r.register(
            "winnet_policy_sync_errors",
            "HNS calls refused or failed, and pods waiting for their endpoint",
            m.sync_errors.clone(),
        );
        r.register("winnet_policy_syncs", "Syncs run", m.syncs.clone());
        Metrics { registry, ..m }
    }
}

/// The metric's reasons, so each is exported (zero included) from the first sync.
const REASONS: [&str; 5] = ["named_port", "negative_selector", "except", "sctp", "ipv6"];

impl Metrics {
    /// Sets the skipped-construct gauges from a plan's problems.
    pub fn set_skipped(&self, problems: &[Problem]) {
        for reason in REASONS {
            let n = problems
                .iter()
                .filter(|p| p.construct.reason() == reason)
                .count();
            self.skipped
                .get_or_create(&vec![("reason".to_string(), reason.to_string())])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Shared between the agent and its servers.
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

    /// `/healthz`: 503 until a first sync, then 200, with kube-proxy's JSON body.
    pub fn healthz(&self) -> (u16, serde_json::Value) {
        let last = self.last_sync.load(Ordering::Relaxed);
        let body = serde_json::json!({ "lastUpdated": last, "currentTime": now() });
        (if last == 0 { 503 } else { 200 }, body)
    }
}

/// Serves `/healthz` and `/metrics` on `addr`.
pub fn serve(addr: SocketAddr, health: Arc<Health>) -> JoinHandle<()> {
    let h = Arc::clone(&health);
    let app = Router::new()
        .route("/metrics", get(move || async move { h.metrics.render() }))
        .route(
            "/healthz",
            get(move || async move {
                let (status, body) = health.healthz();
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                (status, axum::Json(body)).into_response()
            }),
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Construct, Effect, Style};

    #[test]
    fn healthz_is_unavailable_until_a_first_sync_and_every_reason_is_exported() {
        let h = Health::default();
        assert_eq!(h.healthz().0, 503);
        h.synced();
        assert_eq!(h.healthz().0, 200);
        let named = Problem {
            policy: "x/p".into(),
            direction: None,
            rule: None,
            peer: None,
            construct: Construct::NamedPort("http".into()),
            effect: Effect::RuleSkipped,
            style: Style::Calico,
        };
        h.metrics.set_skipped(&[named.clone(), named]);
        let text = h.metrics.render();
        assert!(
            text.contains("winnet_policy_skipped_constructs{reason=\"named_port\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("winnet_policy_skipped_constructs{reason=\"except\"} 0"),
            "{text}"
        );
    }
}
