//! Links, addresses, routes and neighbours of a network namespace, read and changed over
//! rtnetlink. Everything here is synchronous: one request, then its answer.
//!
//! A [`Netlink`] belongs to the namespace of the thread that opened it, whichever thread uses
//! it afterwards.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::HostError;
use crate::nlmsg::{self, Request};
use crate::rtnl::{self, Failure};

pub use crate::sysctl::set_sysctl;

/// Longest interface name Linux allows (`IFNAMSIZ` - 1).
const MAX_LINK_NAME: usize = libc::IFNAMSIZ - 1;

/// A network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The interface index.
    pub index: u32,
    /// The interface name.
    pub name: String,
    /// The MAC address, for interfaces that have a 6-byte one.
    pub mac: Option<[u8; 6]>,
    /// The MTU in bytes.
    pub mtu: u32,
    /// True when the interface is administratively up.
    pub up: bool,
}

/// An IP address assigned to an interface, with the prefix of its subnet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Address {
    /// The interface index.
    pub index: u32,
    /// The address and prefix length (host bits kept: `10.0.0.2/24`).
    pub net: IpNet,
}

/// A unicast route of the main routing table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RouteEntry {
    /// The destination prefix (`0.0.0.0/0` or `::/0` for a default route).
    pub destination: IpNet,
    /// The next hop; `None` for an on-link route.
    pub gateway: Option<IpAddr>,
    /// The outgoing interface index.
    pub oif: Option<u32>,
    /// The route's metric (priority); `None` is the kernel's default (0 for IPv4, 1024 for
    /// IPv6).
    pub metric: Option<u32>,
}

/// An entry of the neighbour table (ARP for IPv4, NDP for IPv6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Neighbor {
    /// The neighbour's IP address.
    pub ip: IpAddr,
    /// Its MAC address, once known.
    pub mac: Option<[u8; 6]>,
    /// The interface it was seen on.
    pub index: u32,
    /// True when the MAC can be used: the entry is reachable, stale, being confirmed,
    /// permanent or needs no resolution, and has a MAC.
    pub usable: bool,
}

/// Checks that `name` is a name Linux accepts for an interface: 1 to 15 bytes, not `.` or
/// `..`, without `/`, `:`, NUL or whitespace.
pub fn check_link_name(name: &str) -> Result<(), HostError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_LINK_NAME
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace());
    if ok {
        return Ok(());
    }
    Err(HostError::Invalid(format!(
        "interface name {name:?} is not allowed: Linux needs 1 to {MAX_LINK_NAME} bytes, \
         not . or .., and no '/', ':' or whitespace"
    )))
}

/// A `NETLINK_ROUTE` socket, bound to the network namespace of the thread that opened it.
#[derive(Debug)]
pub struct Netlink {
    pub(crate) sock: rtnl::Socket,
}

impl Netlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> Result<Netlink, HostError> {
        Ok(Netlink {
            sock: rtnl::Socket::open()?,
        })
    }

    // ---- links ----

    /// Every interface.
    pub fn links(&mut self) -> Result<Vec<Link>, HostError> {
        let fixed = nlmsg::ifinfomsg(0, 0, 0);
        self.sock
            .dump(
                || {
                    Request::new(nlmsg::RTM_GETLINK, nlmsg::NLM_F_DUMP, &fixed)
                        .attr_u32(nlmsg::IFLA_EXT_MASK, nlmsg::RTEXT_FILTER_SKIP_STATS)
                },
                nlmsg::RTM_NEWLINK,
                |p| nlmsg::parse_link(p).map(Some),
            )
            .map_err(|f| f.into_host("list interfaces".into()))
    }

    /// The interface called `name`, if there is one.
    pub fn link(&mut self, name: &str) -> Result<Option<Link>, HostError> {
        if check_link_name(name).is_err() {
            return Ok(None);
        }
        self.get_link(0, Some(name))
            .map_err(|f| f.into_host(format!("look up interface {name}")))
    }

    /// The interface whose index is `index`, if there is one.
    pub fn link_by_index(&mut self, index: u32) -> Result<Option<Link>, HostError> {
        self.get_link(index, None)
            .map_err(|f| f.into_host(format!("look up interface #{index}")))
    }

    /// Asks for one link, by index or (when `name` is given) by name.
    fn get_link(&mut self, index: u32, name: Option<&str>) -> Result<Option<Link>, Failure> {
        let mut req = Request::new(
            nlmsg::RTM_GETLINK,
            nlmsg::NLM_F_ACK,
            &nlmsg::ifinfomsg(index, 0, 0),
        )
        .attr_u32(nlmsg::IFLA_EXT_MASK, nlmsg::RTEXT_FILTER_SKIP_STATS);
        if let Some(name) = name {
            req = nlmsg::link_name_attr(req, name);
        }
        match self
            .sock
            .exchange(req, nlmsg::RTM_NEWLINK, |p| nlmsg::parse_link(p).map(Some))
        {
            Ok(mut links) => Ok(links.pop()),
            Err(f) if f.errno() == Some(libc::ENODEV) => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// Brings interface `index` up or down.
    pub fn set_up(&mut self, index: u32, up: bool) -> Result<(), HostError> {
        let req = Request::new(
            nlmsg::RTM_NEWLINK,
            nlmsg::NLM_F_ACK,
            &nlmsg::ifinfomsg_up(index, up),
        );
        let state = if up { "up" } else { "down" };
        self.change(req, |nl| format!("set {} {state}", nl.describe(index)))
    }

    /// Sets the MTU of interface `index`.
    pub fn set_mtu(&mut self, index: u32, mtu: u32) -> Result<(), HostError> {
        let req = nlmsg::link_mtu_attr(self.link_change(index), mtu);
        self.change(req, |nl| {
            format!("set the MTU of {} to {mtu}", nl.describe(index))
        })
    }

    /// Sets the MAC address of interface `index`.
    pub fn set_mac(&mut self, index: u32, mac: [u8; 6]) -> Result<(), HostError> {
        let req = nlmsg::link_mac_attr(self.link_change(index), mac);
        self.change(req, |nl| {
            format!("set the MAC of {} to {}", nl.describe(index), MacText(mac))
        })
    }

    /// Sets the largest GSO segment the stack builds for interface `index`
    /// (`IFLA_GSO_MAX_SIZE`).
    pub fn set_gso_max_size(&mut self, index: u32, size: u32) -> Result<(), HostError> {
        let req = self
            .link_change(index)
            .attr_u32(nlmsg::IFLA_GSO_MAX_SIZE, size);
        self.change(req, |nl| {
            format!("set gso_max_size of {} to {size}", nl.describe(index))
        })
    }

    /// Deletes interface `index`. Ok if it is gone already.
    pub fn delete_link(&mut self, index: u32) -> Result<(), HostError> {
        let req = Request::new(
            nlmsg::RTM_DELLINK,
            nlmsg::NLM_F_ACK,
            &nlmsg::ifinfomsg(index, 0, 0),
        );
        match self.sock.exchange(req, 0, |_| Ok(None::<()>)) {
            Ok(_) => Ok(()),
            Err(f) if f.errno() == Some(libc::ENODEV) => Ok(()),
            Err(f) => Err(f.into_host(format!("delete {}", self.describe(index)))),
        }
    }

    fn link_change(&self, index: u32) -> Request {
        Request::new(
            nlmsg::RTM_NEWLINK,
            nlmsg::NLM_F_ACK,
            &nlmsg::ifinfomsg(index, 0, 0),
        )
    }

    // ---- addresses ----

    /// The IPv4 and IPv6 addresses of interface `index`, or of every interface.
    pub fn addresses(&mut self, index: Option<u32>) -> Result<Vec<Address>, HostError> {
        let fixed = nlmsg::ifaddrmsg_dump();
        let all = self
            .sock
            .dump(
                || Request::new(nlmsg::RTM_GETADDR, nlmsg::NLM_F_DUMP, &fixed),
                nlmsg::RTM_NEWADDR,
                nlmsg::parse_address,
            )
            .map_err(|f| f.into_host("list addresses".into()))?;
        Ok(all
            .into_iter()
            .filter(|a| index.is_none_or(|i| a.index == i))
            .collect())
    }

    /// Assigns `net` (address and prefix length) to interface `index`. Ok if it is there
    /// already. IPv4 addresses get their subnet's broadcast address.
    pub fn add_address(&mut self, index: u32, net: IpNet) -> Result<(), HostError> {
        let req = nlmsg::address_request(
            nlmsg::RTM_NEWADDR,
            nlmsg::NLM_F_ACK | nlmsg::NLM_F_CREATE | nlmsg::NLM_F_EXCL,
            index,
            net,
        );
        self.change_unless(req, libc::EEXIST, |nl| {
            format!("add address {net} on {}", nl.describe(index))
        })
    }

    /// Removes `net` from interface `index`. Ok if it is not there.
    pub fn del_address(&mut self, index: u32, net: IpNet) -> Result<(), HostError> {
        let req = nlmsg::address_request(nlmsg::RTM_DELADDR, nlmsg::NLM_F_ACK, index, net);
        self.change_unless(req, libc::EADDRNOTAVAIL, |nl| {
            format!("remove address {net} from {}", nl.describe(index))
        })
    }

    // ---- routes ----

    /// The unicast routes of the main table, IPv4 and IPv6.
    pub fn routes(&mut self) -> Result<Vec<RouteEntry>, HostError> {
        let fixed = nlmsg::rtmsg_dump();
        self.sock
            .dump(
                || Request::new(nlmsg::RTM_GETROUTE, nlmsg::NLM_F_DUMP, &fixed),
                nlmsg::RTM_NEWROUTE,
                nlmsg::parse_route,
            )
            .map_err(|f| f.into_host("list routes".into()))
    }

    /// Adds `route` to the main table, replacing the route with the same destination and
    /// metric if there is one.
    pub fn add_route(&mut self, route: &RouteEntry) -> Result<(), HostError> {
        check_route_families(route)?;
        let req = nlmsg::route_request(
            nlmsg::NLM_F_ACK | nlmsg::NLM_F_CREATE | nlmsg::NLM_F_REPLACE,
            route,
            false,
        );
        self.change(req, |nl| format!("add route {}", nl.route_text(route)))
    }

    /// Deletes `route` from the main table (the gateway, interface and metric, when given,
    /// narrow which route). Ok if there is no such route.
    pub fn del_route(&mut self, route: &RouteEntry) -> Result<(), HostError> {
        check_route_families(route)?;
        let req = nlmsg::route_request(nlmsg::NLM_F_ACK, route, true);
        self.change_unless(req, libc::ESRCH, |nl| {
            format!("delete route {}", nl.route_text(route))
        })
    }

    fn route_text(&mut self, r: &RouteEntry) -> String {
        let mut s = r.destination.to_string();
        if let Some(gw) = r.gateway {
            s += &format!(" via {gw}");
        }
        if let Some(oif) = r.oif {
            s += &format!(" dev {}", self.describe(oif));
        }
        if let Some(m) = r.metric {
            s += &format!(" metric {m}");
        }
        s
    }

    // ---- neighbours ----

    /// The IPv4 and IPv6 neighbour entries of every interface.
    pub fn neighbors(&mut self) -> Result<Vec<Neighbor>, HostError> {
        let fixed = nlmsg::ndmsg_dump();
        self.sock
            .dump(
                || Request::new(nlmsg::RTM_GETNEIGH, nlmsg::NLM_F_DUMP, &fixed),
                nlmsg::RTM_NEWNEIGH,
                nlmsg::parse_neighbor,
            )
            .map_err(|f| f.into_host("list neighbours".into()))
    }

    /// Sets a permanent neighbour entry `ip` -> `mac` on interface `index`, replacing any.
    pub fn add_neighbor(&mut self, index: u32, ip: IpAddr, mac: [u8; 6]) -> Result<(), HostError> {
        let req = nlmsg::neighbor_request(
            nlmsg::RTM_NEWNEIGH,
            nlmsg::NLM_F_ACK | nlmsg::NLM_F_CREATE | nlmsg::NLM_F_REPLACE,
            index,
            ip,
            Some(mac),
            nlmsg::NUD_PERMANENT,
        );
        self.change(req, |nl| {
            format!(
                "add neighbour {ip} lladdr {} on {}",
                MacText(mac),
                nl.describe(index)
            )
        })
    }

    /// Deletes the neighbour entry for `ip` on interface `index`. Ok if there is none.
    pub fn del_neighbor(&mut self, index: u32, ip: IpAddr) -> Result<(), HostError> {
        let req =
            nlmsg::neighbor_request(nlmsg::RTM_DELNEIGH, nlmsg::NLM_F_ACK, index, ip, None, 0);
        self.change_unless(req, libc::ENOENT, |nl| {
            format!("delete neighbour {ip} on {}", nl.describe(index))
        })
    }

    // ---- exchanges ----

    /// Names interface `index` for a message: its name, or its number if it cannot be read.
    pub(crate) fn describe(&mut self, index: u32) -> String {
        match self.get_link(index, None) {
            Ok(Some(link)) => link.name,
            _ => format!("interface #{index}"),
        }
    }

    /// Sends a change and waits for its acknowledgement; `op` words the error.
    pub(crate) fn change(
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
    pub(crate) fn change_unless(
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

/// A gateway must be of its destination's family (IPv4 over an IPv6 next hop needs RTA_VIA,
/// which this crate does not speak).
pub(crate) fn check_route_families(r: &RouteEntry) -> Result<(), HostError> {
    match r.gateway {
        Some(gw) if gw.is_ipv4() != r.destination.addr().is_ipv4() => {
            Err(HostError::Invalid(format!(
                "route to {} via {gw}: the gateway must be of the destination's address family",
                r.destination
            )))
        }
        _ => Ok(()),
    }
}

/// A MAC address as `aa:bb:cc:dd:ee:ff`.
pub(crate) struct MacText(pub(crate) [u8; 6]);

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
mod tests {
    use super::*;

    #[test]
    fn link_names_follow_the_kernel_rules() {
        for ok in ["eth0", "a", "vlan.100", "abcdefghijklmno", "hns-0badf00d"] {
            assert!(check_link_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "abcdefghijklmnop",
            "a/b",
            "a:b",
            "a b",
            "a\tb",
            "a\0b",
        ] {
            let e = check_link_name(bad).expect_err(bad);
            assert!(matches!(e, HostError::Invalid(_)), "{bad:?}");
            assert!(e.to_string().contains("15 bytes"), "{e}");
        }
    }

    #[test]
    fn a_gateway_of_the_other_family_is_refused() {
        let r = RouteEntry {
            destination: "10.0.0.0/8".parse().expect("net"),
            gateway: Some("fe80::1".parse().expect("ip")),
            oif: None,
            metric: None,
        };
        assert!(matches!(
            check_route_families(&r),
            Err(HostError::Invalid(_))
        ));
    }
}
