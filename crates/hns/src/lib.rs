//! hnsd, the Host Networking Service: HNS objects in a durable store behind an HCN-compatible
//! HTTP/JSON API on a Unix socket, and the client that the CNI plugins, kube-proxy and the
//! `winnet hns` command use; the compiler from those objects to the node's VFP switch
//! ([`compiler`]); and an in-memory cluster of such nodes for tests and the demo ([`sim`]).

pub mod api;
pub mod client;
pub mod compiler;
pub mod dataplane;
pub mod profile;
pub mod request;
pub mod resolve;
pub mod server;
pub mod service;
pub mod sim;
pub mod state;
pub mod store;
pub mod trace;

pub use client::{Client, ClientError};
pub use hyper::Method;
pub use profile::{Limitation, Profile};
pub use resolve::ResolveRequest;
pub use service::Service;
pub use state::{Kind, State};
pub use trace::{TraceProtocol, TraceRequest};

/// Where clients look for hnsd when neither a flag nor `HNS_SOCKET` names a socket.
pub const DEFAULT_SOCKET: &str = "/run/winnet/hns.sock";

/// The socket a client should use: the flag, else `HNS_SOCKET`, else [`DEFAULT_SOCKET`].
pub fn socket_path(flag: Option<&std::path::Path>) -> std::path::PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    match std::env::var_os("HNS_SOCKET") {
        Some(p) if !p.is_empty() => p.into(),
        _ => DEFAULT_SOCKET.into(),
    }
}
