//! hnsd, the Host Networking Service: HNS objects in a durable store behind an HCN-compatible
//! HTTP/JSON API, served on a Unix socket or in process ([`InProcess`]). This is the control
//! plane only: the compiler from these objects to the node's VFP switch (and the trace's
//! logic) is `hns-compiler`, the device data plane that subscribes to the committed objects
//! ([`Service::observe`]) and answers traces ([`Service::set_tracer`]) is `hns-dataplane`.

pub mod api;
pub mod changes;
pub mod in_process;
pub mod metrics;
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
pub use trace::{TraceAnswer, TraceProtocol, TraceRequest};

pub use hns_client::{DEFAULT_SOCKET, socket_path};
