//! The local cluster's laboratory: its plan ([`topology`]: the topology file and the address
//! plan every cluster of `winnet cluster up` and `winnet demo` follows), and the in-memory
//! cluster ([`sim`]) that runs the real node components — an hnsd per node (in process), the
//! Windows CNI plugins, kube-proxy's winkernel proxier, flanneld's Windows backend — over
//! simulated wires instead of devices.

pub mod dual_stack;
pub mod objects;
pub mod sim;
pub mod topology;
pub mod workloads;

pub use sim::{
    Cluster, DropRecord, Exchange, PodOptions, Service, UdpResponder, UdpResponders, Who,
};
pub use vfp::packet::{L4, Packet};
