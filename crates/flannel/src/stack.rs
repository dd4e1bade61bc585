//! The node's own IP stack as flanneld changes it: which interface holds an address, per
//! interface forwarding, and the routes to the other nodes' subnets. On a node it is the
//! kernel ([`Kernel`], through netlink); the in-memory cluster gives the Windows backend the
//! host stack of its simulated node instead, so the backend's code is the same on both.

use std::net::{IpAddr, Ipv4Addr};

use host::link::{Netlink, RouteEntry};
use ipnet::{IpNet, Ipv4Net};

use crate::Error;
use crate::config::NetConf;

/// An interface of the node: its index (a route's `oif`) and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub index: u32,
    pub name: String,
}

/// The node's IP stack.
pub trait NodeStack: Send {
    /// The interface that holds `ip`, if one does.
    fn holder_of(&mut self, ip: Ipv4Addr) -> Result<Option<Interface>, Error>;
    /// Turns IPv4 forwarding on for the interface `name`.
    fn enable_forwarding(&mut self, name: &str) -> Result<(), Error>;
    /// The main routing table.
    fn routes(&mut self) -> Result<Vec<RouteEntry>, Error>;
    /// Adds `route`; `onlink` when its gateway is reached on its device without a subnet
    /// route (VXLAN's remote VTEPs).
    fn add_route(&mut self, route: &RouteEntry, onlink: bool) -> Result<(), Error>;
    fn del_route(&mut self, route: &RouteEntry) -> Result<(), Error>;
}

/// This machine's kernel, through netlink.
#[derive(Clone, Copy, Debug, Default)]
pub struct Kernel;

impl NodeStack for Kernel {
    fn holder_of(&mut self, ip: Ipv4Addr) -> Result<Option<Interface>, Error> {
        let mut nl = Netlink::open()?;
        let index = nl
            .addresses(None)?
            .into_iter()
            .find(|a| a.net.addr() == IpAddr::V4(ip))
            .map(|a| a.index);
        let Some(index) = index else { return Ok(None) };
        Ok(nl.link_by_index(index)?.map(|l| Interface {
            index,
            name: l.name,
        }))
    }

    fn enable_forwarding(&mut self, name: &str) -> Result<(), Error> {
        host::link::set_sysctl(&format!("net/ipv4/conf/{name}/forwarding"), "1")?;
        Ok(())
    }

    fn routes(&mut self) -> Result<Vec<RouteEntry>, Error> {
        Ok(Netlink::open()?.routes()?)
    }

    fn add_route(&mut self, route: &RouteEntry, onlink: bool) -> Result<(), Error> {
        let mut nl = Netlink::open()?;
        if onlink {
            nl.add_onlink_route(route)?;
        } else {
            nl.add_route(route)?;
        }
        Ok(())
    }

    fn del_route(&mut self, route: &RouteEntry) -> Result<(), Error> {
        Ok(Netlink::open()?.del_route(route)?)
    }
}

/// Makes the stack's routes into the cluster network (other than `own` and the subnets
/// `keep`, whose routes stay as they are) exactly `want`: missing ones added (on-link when
/// `onlink_dev` is their device), others removed.
pub fn sync_routes(
    stack: &mut dyn NodeStack,
    conf: &NetConf,
    own: Option<Ipv4Net>,
    keep: &[Ipv4Net],
    want: &[RouteEntry],
    onlink_dev: Option<u32>,
) -> Result<(), Error> {
    let cluster = IpNet::V4(conf.network);
    let have: Vec<RouteEntry> = stack
        .routes()?
        .into_iter()
        .filter(|r| {
            r.gateway.is_some()
                && cluster.contains(&r.destination)
                && own.is_none_or(|o| r.destination != IpNet::V4(o))
                && !keep.iter().any(|k| r.destination == IpNet::V4(*k))
        })
        .collect();
    let same = |a: &RouteEntry, b: &RouteEntry| {
        a.destination == b.destination
            && a.gateway == b.gateway
            && a.oif.is_none_or(|o| Some(o) == b.oif)
    };
    for r in &have {
        if !want.iter().any(|w| same(w, r)) {
            stack.del_route(r)?;
        }
    }
    for w in want {
        if !have.iter().any(|r| same(w, r)) {
            stack.add_route(w, onlink_dev.is_some() && w.oif == onlink_dev)?;
        }
    }
    Ok(())
}
