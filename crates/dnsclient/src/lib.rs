//! The DNS client of a pod's network compartment.
//!
//! - [`rules`]: the Windows DNS Client's and glibc's name-walk rules, a pure state machine;
//! - [`walk`]: the typed walk (each name tried, why, the answer, the rule that ended it);
//! - [`name`], [`resolv_conf`]: the asked name and the pod's resolver file, parsed;
//! - [`upstream`]: one query to the endpoint's servers with a retry schedule;
//! - [`sockets`]: sockets made inside a pod's network namespace;
//! - [`stub`]: the per-pod stub resolver on 127.0.0.53 that applies the Windows rules;
//! - [`resolve`]: a walk driven over real queries, for serving and for explaining.
//!
//! The last four do I/O and are the `io` feature (on by default); hnsd's API and its clients,
//! which only name walks, use the pure core without it.
//!
//! The design is in this crate's README.

pub mod name;
pub mod resolv_conf;
#[cfg(feature = "io")]
pub mod resolve;
pub mod rules;
#[cfg(feature = "io")]
pub mod sockets;
#[cfg(feature = "io")]
pub mod stub;
#[cfg(feature = "io")]
pub mod upstream;
pub mod walk;

pub use name::{AskedName, NameError};
pub use rules::{Rules, Walker};
pub use walk::{End, Outcome, Reason, Step, Walk};
