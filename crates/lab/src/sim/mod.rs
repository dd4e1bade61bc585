//! The in-memory cluster: Windows nodes on one fabric with an external host that is also the
//! physical network's router. Each node is a real hnsd [`Service`](hns::Service) in process
//! (an in-memory store), its switch compiled from the committed objects by hnsd's compiler,
//! and a host IP stack reduced to what routing needs; the node's agents are the real
//! components talking to that hnsd through `hns_client`: the CNI plugins make pods
//! ([`agents::cni`]), flanneld's Windows backend makes the network and routes
//! ([`agents::flannel`]), kube-proxy programs Services ([`agents::proxy`]). Real Ethernet
//! frames go in and come out; what arrived is reported with its headers.
//!
//! ```text
//! let mut c = Cluster::new(2, Profile::Ws2022);
//! c.flannel_host_gw()?;                            // or flannel_vxlan()
//! let a = c.add_pod(0, "a", PodOptions::default())?;
//! let b = c.add_pod(1, "b", PodOptions::default())?;
//! let ex = c.tcp_syn(a, c.ip_of(b).unwrap(), 8080); // ex.seen(), ex.reply, ex.drops
//! ```
//!
//! One file per piece: [`stack`] (an IP stack), [`fabric`] (the physical segment), [`node`]
//! (hnsd + switch + host), [`cluster`] (the event loop), [`traffic`] (exchanges), and
//! [`agents`] (the components that drive each node's hnsd).

pub mod agents;
pub mod cluster;
pub mod fabric;
pub mod node;
pub mod stack;
pub mod traffic;

pub use agents::cni::PodOptions;
pub use agents::proxy::Service;
pub use cluster::{Cluster, DropRecord, Who};
pub use stack::{UdpResponder, UdpResponders};
pub use traffic::Exchange;
