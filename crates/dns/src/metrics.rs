//! What the DNS reports on `/metrics` (Prometheus text): queries by type and rcode, answer
//! latency, forward-cache hits and misses, failing reads of the Kubernetes objects; and
//! `/healthz`, `/ready` (200 once the objects have been read whole).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of one query counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueryLabels {
    pub qtype: String,
    pub rcode: String,
}

/// The query types counted on their own; the last stands for all others.
const QTYPES: [RecordType; 11] = [
    RecordType::A,
    RecordType::AAAA,
    RecordType::SRV,
    RecordType::PTR,
    RecordType::TXT,
    RecordType::CNAME,
    RecordType::SOA,
    RecordType::NS,
    RecordType::MX,
    RecordType::ANY,
    RecordType::NULL,
];
/// The rcodes counted on their own; all others count as "other".
const RCODES: [ResponseCode; 6] = [
    ResponseCode::NoError,
    ResponseCode::NXDomain,
    ResponseCode::ServFail,
    ResponseCode::FormErr,
    ResponseCode::NotImp,
    ResponseCode::Refused,
];

fn qtype_label(i: usize) -> String {
    match QTYPES.get(i) {
        Some(RecordType::NULL) => "other".into(),
        Some(t) => t.to_string(),
        None => "none".into(),
    }
}

fn rcode_label(i: usize) -> String {
    RCODES
        .get(i)
        .map_or("other".into(), |r| format!("{r:?}").to_uppercase())
}

/// The DNS's counters. Query counters are made up front, one per (qtype, rcode), so counting
/// a query is an index and an atomic add.
pub struct Metrics {
    registry: Registry,
    by_type_and_rcode: Vec<Counter>,
    latency: Histogram,
    cache_hits: Counter,
    cache_misses: Counter,
    /// Reads of the Kubernetes objects failing now (answers come from the last good ones).
    pub source_errors: Gauge,
    /// Set once the Kubernetes objects have been read whole.
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("winnet_dns");
        let queries = Family::<QueryLabels, Counter>::default();
        // 50 µs .. ~1.6 s, doubling: local answers sit in the first buckets, forwarded ones later.
        let latency = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            0.000_05, 2.0, 16,
        ));
        let cache_hits = Counter::default();
        let cache_misses = Counter::default();
        let source_errors = Gauge::default();
        registry.register(
            "queries",
            "DNS queries answered, by qtype and rcode",
            queries.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "time from a query's arrival to its answer",
            latency.clone(),
        );
        registry.register(
            "cache_hits",
            "forwarded questions answered from the cache",
            cache_hits.clone(),
        );
        registry.register(
            "cache_misses",
            "forwarded questions sent upstream",
            cache_misses.clone(),
        );
        registry.register(
            "source_errors",
            "reads of the Kubernetes objects failing now (the folder, a file, a watch); answers come from the last good objects",
            source_errors.clone(),
        );
        let mut by_type_and_rcode = Vec::new();
        for t in 0..=QTYPES.len() {
            for r in 0..=RCODES.len() {
                let labels = QueryLabels {
                    qtype: qtype_label(t),
                    rcode: rcode_label(r),
                };
                by_type_and_rcode.push(queries.get_or_create(&labels).clone());
            }
        }
        Metrics {
            registry,
            by_type_and_rcode,
            latency,
            cache_hits,
            cache_misses,
            source_errors,
            ready: AtomicBool::new(false),
        }
    }
}

impl Metrics {
    /// Counts one answered query.
    pub fn answered(&self, qtype: Option<RecordType>, rcode: ResponseCode, took: Duration) {
        let t = qtype.map_or(QTYPES.len(), |q| {
            QTYPES
                .iter()
                .position(|t| *t == q)
                .unwrap_or(QTYPES.len() - 1)
        });
        let r = RCODES
            .iter()
            .position(|c| *c == rcode)
            .unwrap_or(RCODES.len());
        if let Some(counter) = self.by_type_and_rcode.get(t * (RCODES.len() + 1) + r) {
            counter.inc();
        }
        self.latency.observe(took.as_secs_f64());
    }

    /// Takes what `objects` says of the source: its failing reads, and ready once synced
    /// (readiness is never withdrawn: the last good objects keep being served).
    pub fn source(&self, objects: &kubesrc::Objects) {
        self.source_errors
            .set(i64::try_from(objects.errors.len()).unwrap_or(i64::MAX));
        self.ready.fetch_or(objects.synced, Ordering::Relaxed);
    }

    /// Counts a cache lookup.
    pub fn cache(&self, hit: bool) {
        if hit {
            self.cache_hits.inc();
        } else {
            self.cache_misses.inc();
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Serves `/metrics`, `/healthz` and `/ready` on `listener` until the runtime ends.
pub fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    let m = Arc::clone(&metrics);
    let r = Arc::clone(&metrics);
    let app = Router::new()
        .route("/metrics", get(move || async move { m.render_text() }))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/ready",
            get(move || async move {
                if r.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not synced yet")
                }
            }),
        );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "metrics server stopped");
        }
    });
}

/// Binds the metrics address; the error names the flag.
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--metrics-addr {addr}: {e}"))
}
