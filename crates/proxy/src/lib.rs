//! kube-proxy for Windows nodes: Services and EndpointSlices to HNS load balancers and remote
//! endpoints, with the `winkernel` proxier's mapping (reference §5.4), reconciled so that a
//! restart changes nothing and 2,000 Services take seconds; and, for the Linux nodes of a mixed
//! cluster, kube-proxy's `nftables` mode over the same objects ([`nftables`]).

pub mod doctor;
#[cfg(test)]
mod fixtures;
pub mod health;
mod inputs;
pub mod metrics;
pub mod model;
pub mod nftables;
pub mod planner;
pub mod proxier;
pub mod reconciler;
pub mod source;

pub use proxier::{Config, FeatureGates, Proxy, ProxyError, SourceConfig, run};
pub use reconciler::SyncReport;
pub use source::Snapshot;
