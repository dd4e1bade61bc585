//! What winnet's tests and benches share across crates, in one place (as OPTE keeps its
//! fixtures in `opte-test-utils`): the root check, waiting for a condition with a deadline,
//! locks held across test processes, commands that must succeed, hnsd started in the test's
//! process or as `winnet hnsd`, the HNS and Kubernetes documents tests build, and frames
//! captured on a bridge port. Dev-only: used as a dev-dependency, never published.

pub mod cmd;
pub mod http;
pub mod kube;
pub mod lock;
pub mod root;
pub mod wait;

#[cfg(feature = "capture")]
pub mod capture;
#[cfg(feature = "hnsd")]
pub mod hnsd;
#[cfg(feature = "proxy")]
pub mod proxy;

pub use root::require_root;
