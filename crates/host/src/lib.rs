//! Linux glue: what the Windows host provides to HNS, made of Linux parts. A network
//! compartment is a network namespace ([`netns`]), a vNIC is a TAP device ([`tap`]), the
//! external adapter bound by a vSwitch is an AF_PACKET socket ([`packet_socket`]), and links,
//! addresses, routes, neighbours and the devices made of them are read and changed over
//! rtnetlink ([`netlink`]). Frames cross TAPs and AF_PACKET sockets with a virtio-net header
//! ([`offload`]) so that TCP moves in large segments; checksums and segmentation are done in
//! software where a frame must leave as MTU-sized packets; a device's own offloads are switched
//! as `ethtool -K` does ([`ethtool`]).
//!
//! Every call acts in the network namespace of the calling thread; [`netns::Netns::run`] runs
//! a closure on a thread inside another namespace.

pub mod error;
pub mod ethtool;
pub mod netlink;
pub mod netns;
pub mod nft;
pub mod offload;
pub mod packet_socket;
pub mod resolv;
pub mod sysctl;
pub mod tap;

mod frame_fd;
mod sys;

/// The paths [`netlink`]'s items had before it gathered them, kept so that code written against
/// them still builds; new code names [`netlink`] and [`sysctl`].
pub mod link {
    pub use crate::netlink::{
        Address, Link, MacText, Neighbor, Netlink, RouteEntry, check_link_name,
    };
    pub use crate::sysctl::set_sysctl;
}

/// The path of [`netlink`]'s VXLAN items before it gathered them; new code names [`netlink`].
pub mod vxlan {
    pub use crate::netlink::{FdbEntry, VxlanInfo, VxlanSpec};
}

pub use error::HostError;
