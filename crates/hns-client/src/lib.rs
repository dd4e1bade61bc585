//! The HCN API of hnsd as the CNI plugins, kube-proxy, flanneld and `winnet` call it: a
//! [`Client`] with hcsshim's function names (`create_network`, `list_endpoints_of_network`,
//! `add_namespace_endpoint`, ...) over a [`Transport`] — hnsd's Unix socket ([`UnixSocket`]),
//! or an hnsd in the same process (the in-memory cluster). The bodies are HNS v2 JSON either
//! way, so a component cannot tell the two apart.
//!
//! Also here: the bodies of hnsd's own requests (`POST /trace`, `POST /resolve`), the trace's
//! answer ([`TraceAnswer`]), and where clients look for hnsd ([`socket_path`]).

pub mod acl;
pub mod changes;
pub mod client;
pub mod request;
pub mod resolve;
pub mod rule_spec;
pub mod switch;
pub mod trace;
pub mod transport;

pub use client::{Client, ClientError};
pub use hcn::Kind;
pub use hyper::Method;
pub use resolve::ResolveRequest;
pub use trace::{TraceAnswer, TraceProtocol, TraceRequest};
pub use transport::{Reply, Transport, UnixSocket};

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

/// The Linux name of the management vNIC hnsd makes for the NIC `nic` when an external network
/// takes it over (Windows' `vEthernet (<nic>)`), cut to Linux's 15 bytes. Agents that wait for
/// the vNIC (flanneld) look for this name.
pub fn management_name(nic: &str) -> String {
    let mut name = String::from("vEthernet-");
    name.extend(nic.chars().take(15 - name.len()));
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn management_names_fit_linux() {
        assert_eq!(management_name("eth0"), "vEthernet-eth0");
        assert_eq!(management_name("enp0s31f6"), "vEthernet-enp0s");
        assert!(management_name("a-very-long-nic-name").len() <= 15);
    }
}
