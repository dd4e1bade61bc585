//! hnsd, the Host Networking Service: HNS objects in a durable store behind an HCN-compatible
//! HTTP/JSON API on a Unix socket or in process ([`InProcess`], for `hns_client::Client`); the compiler from those objects to the node's VFP switch
//! ([`compiler`]); and an in-memory cluster of such nodes for tests and the demo ([`sim`]).

pub mod api;
pub mod compiler;
pub mod dataplane;
pub mod in_process;
pub mod profile;
pub mod resolve;
pub mod server;
pub mod service;
pub mod sim;
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
