//! An in-memory cluster of Windows nodes for tests and the non-root `winnet demo`: each node
//! an hnsd state changed exactly as hnsd changes it, its switch compiled from it, a host IP
//! stack reduced to what routing needs, and pods; a fabric (one L2 segment with MAC learning)
//! between the nodes and an external host that is also the router. Real Ethernet frames go in
//! and come out; what arrived is reported with its headers.
//!
//! ```text
//! let mut c = Cluster::new(2, Profile::Ws2022);
//! c.flannel_host_gw()?;                            // or flannel_vxlan()
//! let a = c.add_pod(0, "a", PodOptions::default())?;
//! let b = c.add_pod(1, "b", PodOptions::default())?;
//! let ex = c.tcp_syn(a, c.ip_of(b).unwrap(), 8080); // ex.seen(), ex.reply, ex.drops
//! ```
//!
//! One file per piece: [`packet`] (frames), [`stack`] (an IP stack), [`fabric`] (the
//! physical segment), [`node`] (hnsd + switch + host), [`cluster`] (the event loop),
//! [`traffic`] (exchanges), and what the cluster's agents would make through hnsd:
//! [`flannel`] (networks), [`cni`] (pods), [`proxy`] (Services).

pub mod cluster;
pub mod cni;
pub mod fabric;
pub mod flannel;
pub mod node;
pub mod packet;
pub mod proxy;
pub mod stack;
pub mod traffic;

pub use cluster::{Cluster, DropRecord, Who};
pub use cni::PodOptions;
pub use packet::{L4, Packet};
pub use proxy::{Service, ServiceLbs};
pub use stack::{UdpResponder, UdpResponders};
pub use traffic::Exchange;
