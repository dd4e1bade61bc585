//! Prometheus metrics of the proxy.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The proxy's metrics, registered once.
pub struct Metrics {
    registry: Registry,
    pub sync_duration: Histogram,
    pub load_balancers: Gauge,
    pub remote_endpoints: Gauge,
    pub errors: Counter,
    /// HNS calls refused or failed (HNS's own error is in the log).
    pub hns_failures: Counter,
    /// Services not (wholly) programmed after the last sync, waiting for a retry.
    pub services_pending: Gauge,
    pub syncs: Counter,
    /// Reads of the Kubernetes objects failing now (the last good objects are programmed).
    pub source_errors: Gauge,
    /// `winnet_doctor_problems{kind}`: what the doctor finds, per problem kind.
    pub problems: Family<Vec<(String, String)>, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let sync_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let load_balancers = Gauge::default();
        let remote_endpoints = Gauge::default();
        let errors = Counter::default();
        let hns_failures = Counter::default();
        let services_pending = Gauge::default();
        let syncs = Counter::default();
        let source_errors = Gauge::default();
        registry.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "Time a sync took to program HNS",
            sync_duration.clone(),
        );
        registry.register(
            "winnet_proxy_load_balancers",
            "HNS load balancers programmed",
            load_balancers.clone(),
        );
        registry.register(
            "winnet_proxy_remote_endpoints",
            "Remote HNS endpoints programmed",
            remote_endpoints.clone(),
        );
        registry.register(
            "winnet_proxy_sync_errors",
            "Problems reported by syncs (failed HNS calls, unusable objects)",
            errors.clone(),
        );
        registry.register(
            "winnet_proxy_hns_call_failures",
            "HNS calls that HNS refused or that failed (the proxy's log has HNS's error)",
            hns_failures.clone(),
        );
        registry.register(
            "winnet_proxy_services_pending",
            "Services not wholly programmed after the last sync (retried)",
            services_pending.clone(),
        );
        registry.register("winnet_proxy_syncs", "Syncs run", syncs.clone());
        registry.register(
            "winnet_proxy_source_errors",
            "Reads of the Kubernetes objects failing now (the folder, a file, a watch); the last good objects stay programmed",
            source_errors.clone(),
        );
        let problems = Family::<Vec<(String, String)>, Gauge>::default();
        registry.register(
            "winnet_doctor_problems",
            "Problems winnet doctor finds comparing the Services with HNS and the switch, by kind",
            problems.clone(),
        );
        Metrics {
            registry,
            sync_duration,
            load_balancers,
            remote_endpoints,
            errors,
            hns_failures,
            services_pending,
            syncs,
            source_errors,
            problems,
        }
    }
}

impl Metrics {
    /// Sets the doctor's gauges: one per problem kind, zero included (so an alert can tell
    /// "none" from "not measured").
    pub fn set_problems(&self, counts: &[(doctor::ProblemKind, usize)]) {
        for (kind, n) in counts {
            self.problems
                .get_or_create(&vec![("kind".to_string(), kind.as_str().to_string())])
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }

    /// Sets the source's gauge from what `snapshot` says of its reads.
    pub fn set_source(&self, snapshot: &crate::Snapshot) {
        self.source_errors
            .set(i64::try_from(snapshot.source_errors.len()).unwrap_or(i64::MAX));
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}
