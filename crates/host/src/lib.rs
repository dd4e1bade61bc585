//! Linux glue: what the Windows host provides to HNS, made of Linux parts. A network
//! compartment is a network namespace ([`netns`]), a vNIC is a TAP device ([`tap`]), the
//! external adapter bound by a vSwitch is an AF_PACKET socket ([`packet_socket`]), and links,
//! addresses, routes and neighbours are read and changed over rtnetlink ([`link`]). Frames
//! cross TAPs and AF_PACKET sockets with a virtio-net header ([`offload`]) so that TCP moves
//! in large segments; checksums and segmentation are done in software where a frame must
//! leave as MTU-sized packets.
//!
//! Every call acts in the network namespace of the calling thread; [`netns::Netns::run`] runs
//! a closure on a thread inside another namespace.

pub mod error;
pub mod link;
pub mod netns;
pub mod offload;
pub mod packet_socket;
pub mod resolv;
pub mod tap;
pub mod vxlan;

mod frame_fd;
mod nlmsg;
mod rtnl;
mod sys;
mod sysctl;

pub use error::HostError;
