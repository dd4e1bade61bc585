//! hnsd, the Host Networking Service: HNS objects in a durable store behind an HCN-compatible
//! HTTP/JSON API, served on a Unix socket or in process ([`InProcess`]); the compiler from
//! those objects to the node's VFP switch ([`compiler`]). The device data plane, which
//! subscribes to the committed objects, is `hns-dataplane`.

pub mod api;
pub mod compiler;
pub mod in_process;
pub mod profile;
pub mod resolve;
pub mod server;
pub mod service;
pub mod state;
pub mod store;
pub mod trace;

pub use in_process::InProcess;
pub use profile::{Limitation, Profile};
pub use resolve::ResolveRequest;
pub use service::Service;
pub use state::{Kind, State};
pub use trace::{TraceProtocol, TraceRequest};

pub use hns_client::{DEFAULT_SOCKET, socket_path};
