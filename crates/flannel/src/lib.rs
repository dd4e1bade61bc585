//! flanneld: leases this node a pod subnet (from its Kubernetes Node, or from etcd with
//! flannel's schema), builds the node's pod network with the host-gw or vxlan backend (on a
//! Windows node through hnsd's API, as flannel's Windows code does; on a Linux node through
//! netlink), writes `subnet.env` for the flannel CNI plugin, and keeps the routes to every other
//! node's subnet in line with their leases.

pub mod config;
pub mod daemon;
pub mod etcd;
pub mod kube;
pub mod lease;
pub mod linux;
pub mod masq;
pub mod stack;
pub mod subnet_env;
pub mod windows;

use std::net::Ipv4Addr;

pub use config::{BackendType, NetConf};
pub use daemon::{Daemon, Options, Os, SubnetSource};
pub use lease::{Lease, LeaseAttrs};

/// This node as flanneld sees it: the interface it talks to other nodes through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// `--iface`: the external interface (the NIC hnsd binds on Windows).
    pub iface: String,
    /// `--public-ip`, else the interface's address.
    pub public_ip: Ipv4Addr,
    /// The interface's MTU.
    pub mtu: u32,
}

/// Why flanneld cannot go on; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("kube: {0}")]
    Kube(String),
    /// The Node has no podCIDR yet (flanneld waits for one).
    #[error("kube: {0}")]
    NoPodCidr(String),
    #[error("hns: {0}")]
    Hns(String),
    /// etcd no longer holds this node's lease: flanneld stops, as flannel does.
    #[error("etcd: {0}")]
    LeaseLost(String),
    #[error("{0}")]
    Node(String),
    #[error(transparent)]
    Host(#[from] host::HostError),
}

impl From<hns_client::ClientError> for Error {
    fn from(e: hns_client::ClientError) -> Error {
        Error::Hns(e.to_string())
    }
}
