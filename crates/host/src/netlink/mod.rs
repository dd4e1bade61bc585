//! rtnetlink, the one way winnet talks to the kernel's network configuration: links, addresses,
//! routes and policy rules, neighbours, and the devices flannel and the cluster make (veth
//! pairs, bridges, VXLAN and its FDB), read and changed over a `NETLINK_ROUTE` socket.
//! Everything is synchronous: one request, then its answer.
//!
//! The wire format is written by hand (`wire.rs`) rather than taken from a netlink crate: the
//! reader never panics and skips attributes it does not know, so a newer kernel's replies never
//! break it, and a plain blocking socket belongs to the namespace of the thread that opened it,
//! which is how namespaces are entered here ([`crate::netns::Netns::run`]). One file per kind of
//! object, each with its messages and the [`Netlink`] methods that send them.
//!
//! A [`Netlink`] belongs to the namespace of the thread that opened it, whichever thread uses
//! it afterwards.

mod addr;
mod kind;
mod link;
mod neigh;
mod route;
mod rule;
mod socket;
mod vxlan;
mod wire;

use std::fmt;

use crate::HostError;
use wire::Request;

pub use addr::Address;
pub use link::{Link, check_link_name};
pub use neigh::Neighbor;
pub use route::{LOCAL_TABLE, MAIN_TABLE, RouteEntry};
pub use rule::{PortRange, Rule, RuleFamily};
pub use vxlan::{FdbEntry, VxlanInfo, VxlanSpec};

/// A `NETLINK_ROUTE` socket, bound to the network namespace of the thread that opened it.
#[derive(Debug)]
pub struct Netlink {
    sock: socket::Socket,
}

impl Netlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> Result<Netlink, HostError> {
        Ok(Netlink {
            sock: socket::Socket::open()?,
        })
    }

    /// Names interface `index` for a message: its name, or its number if it cannot be read.
    fn describe(&mut self, index: u32) -> String {
        match self.get_link(index, None) {
            Ok(Some(link)) => link.name,
            _ => format!("interface #{index}"),
        }
    }

    /// Sends a change and waits for its acknowledgement; `op` words the error.
    fn change(
        &mut self,
        req: Request,
        op: impl FnOnce(&mut Netlink) -> String,
    ) -> Result<(), HostError> {
        match self.sock.exchange(req, 0, |_| Ok(None::<()>)) {
            Ok(_) => Ok(()),
            Err(f) => Err(f.into_host(op(self))),
        }
    }

    /// As [`Netlink::change`], and the kernel answering `ok_errno` counts as success.
    fn change_unless(
        &mut self,
        req: Request,
        ok_errno: i32,
        op: impl FnOnce(&mut Netlink) -> String,
    ) -> Result<(), HostError> {
        match self.sock.exchange(req, 0, |_| Ok(None::<()>)) {
            Ok(_) => Ok(()),
            Err(f) if f.errno() == Some(ok_errno) => Ok(()),
            Err(f) => Err(f.into_host(op(self))),
        }
    }
}

/// A MAC address as `aa:bb:cc:dd:ee:ff`, as `ip link` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MacText(pub [u8; 6]);

impl fmt::Display for MacText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

#[cfg(test)]
mod tests;
