//! Links: listing them, looking one up by name or index, and changing what every link has
//! (up or down, MTU, MAC, GSO size, its master, its namespace); deleting one. Links of a kind
//! (veth, bridge, VXLAN) are made in [`super::kind`] and [`super::vxlan`].

use std::os::fd::AsRawFd;

use super::wire::{self, Request, WireError, attrs, c_string, malformed, u32_at, u32_of};
use super::{MacText, Netlink, kind, socket::Failure};
use crate::HostError;
use crate::netns::Netns;

/// Longest interface name Linux allows (`IFNAMSIZ` - 1).
const MAX_LINK_NAME: usize = libc::IFNAMSIZ - 1;

pub(super) const IFF_UP: u32 = libc::IFF_UP as u32;
pub(crate) const IFLA_ADDRESS: u16 = 1;
pub(crate) const IFLA_IFNAME: u16 = 3;
pub(crate) const IFLA_MTU: u16 = 4;
pub(crate) const IFLA_MASTER: u16 = 10;
pub(crate) const IFLA_NET_NS_FD: u16 = 28;
pub(crate) const IFLA_EXT_MASK: u16 = 29;
pub(crate) const IFLA_GSO_MAX_SIZE: u16 = 41;
/// `IFLA_EXT_MASK` value: leave the counters out of link dumps.
pub(crate) const RTEXT_FILTER_SKIP_STATS: u32 = 1 << 3;
/// Size of `struct ifinfomsg`, the fixed header of link messages.
pub(crate) const IFINFOMSG_LEN: usize = 16;

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
    /// The index of the link this one is enslaved to (the bridge of a bridge port).
    pub master: Option<u32>,
    /// The kind the link was made as (`veth`, `bridge`, `vxlan`, `tun`, ...); `None` for
    /// physical devices and `lo`.
    pub kind: Option<String>,
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

impl Netlink {
    /// Every interface.
    pub fn links(&mut self) -> Result<Vec<Link>, HostError> {
        let fixed = ifinfomsg(0, 0, 0);
        self.sock
            .dump(
                || {
                    Request::new(wire::RTM_GETLINK, wire::NLM_F_DUMP, &fixed)
                        .attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS)
                },
                wire::RTM_NEWLINK,
                |p| parse_link(p).map(Some),
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
    pub(super) fn get_link(
        &mut self,
        index: u32,
        name: Option<&str>,
    ) -> Result<Option<Link>, Failure> {
        let mut req = Request::new(wire::RTM_GETLINK, wire::NLM_F_ACK, &ifinfomsg(index, 0, 0))
            .attr_u32(IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
        if let Some(name) = name {
            req = link_name_attr(req, name);
        }
        match self
            .sock
            .exchange(req, wire::RTM_NEWLINK, |p| parse_link(p).map(Some))
        {
            Ok(mut links) => Ok(links.pop()),
            Err(f) if f.errno() == Some(libc::ENODEV) => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// Brings interface `index` up or down.
    pub fn set_up(&mut self, index: u32, up: bool) -> Result<(), HostError> {
        let req = Request::new(wire::RTM_NEWLINK, wire::NLM_F_ACK, &ifinfomsg_up(index, up));
        let state = if up { "up" } else { "down" };
        self.change(req, |nl| format!("set {} {state}", nl.describe(index)))
    }

    /// Sets the MTU of interface `index`.
    pub fn set_mtu(&mut self, index: u32, mtu: u32) -> Result<(), HostError> {
        let req = link_mtu_attr(self.link_change(index), mtu);
        self.change(req, |nl| {
            format!("set the MTU of {} to {mtu}", nl.describe(index))
        })
    }

    /// Sets the MAC address of interface `index`.
    pub fn set_mac(&mut self, index: u32, mac: [u8; 6]) -> Result<(), HostError> {
        let req = link_mac_attr(self.link_change(index), mac);
        self.change(req, |nl| {
            format!("set the MAC of {} to {}", nl.describe(index), MacText(mac))
        })
    }

    /// Sets the largest GSO segment the stack builds for interface `index`
    /// (`IFLA_GSO_MAX_SIZE`).
    pub fn set_gso_max_size(&mut self, index: u32, size: u32) -> Result<(), HostError> {
        let req = self.link_change(index).attr_u32(IFLA_GSO_MAX_SIZE, size);
        self.change(req, |nl| {
            format!("set gso_max_size of {} to {size}", nl.describe(index))
        })
    }

    /// Deletes interface `index`. Ok if it is gone already.
    pub fn delete_link(&mut self, index: u32) -> Result<(), HostError> {
        let req = Request::new(wire::RTM_DELLINK, wire::NLM_F_ACK, &ifinfomsg(index, 0, 0));
        match self.sock.exchange(req, 0, |_| Ok(None::<()>)) {
            Ok(_) => Ok(()),
            Err(f) if f.errno() == Some(libc::ENODEV) => Ok(()),
            Err(f) => Err(f.into_host(format!("delete {}", self.describe(index)))),
        }
    }

    /// The interface called `name`; an error naming it when there is none.
    pub fn existing_link(&mut self, name: &str) -> Result<Link, HostError> {
        self.link(name)?.ok_or_else(|| {
            HostError::NotFound(format!(
                "there is no interface {name} in this network namespace"
            ))
        })
    }

    /// Enslaves interface `index` to `master` (a bridge: the link becomes one of its ports),
    /// or frees it from its master when `master` is `None`, as `ip link set ... master` and
    /// `nomaster` do.
    pub fn set_master(&mut self, index: u32, master: Option<u32>) -> Result<(), HostError> {
        let req = master_request(index, master);
        self.change(req, |nl| match master {
            Some(m) => format!("make {} a port of {}", nl.describe(index), nl.describe(m)),
            None => format!("free {} from its master", nl.describe(index)),
        })
    }

    /// Moves interface `index` into the network namespace `to` (`ip link set ... netns`). It
    /// keeps its name and leaves this namespace; its addresses and routes are lost, and it
    /// arrives down.
    pub fn set_netns(&mut self, index: u32, to: &Netns) -> Result<(), HostError> {
        let file = to.open()?;
        let req = self
            .link_change(index)
            .attr_u32(IFLA_NET_NS_FD, file.as_raw_fd() as u32);
        self.change(req, |nl| {
            format!("move {} to network namespace {to}", nl.describe(index))
        })
    }

    fn link_change(&self, index: u32) -> Request {
        Request::new(wire::RTM_NEWLINK, wire::NLM_F_ACK, &ifinfomsg(index, 0, 0))
    }
}

/// `struct ifinfomsg` for a request about link `index`.
pub(crate) fn ifinfomsg(index: u32, flags: u32, change: u32) -> [u8; IFINFOMSG_LEN] {
    let mut b = [0u8; IFINFOMSG_LEN];
    b[4..8].copy_from_slice(&index.to_ne_bytes());
    b[8..12].copy_from_slice(&flags.to_ne_bytes());
    b[12..16].copy_from_slice(&change.to_ne_bytes());
    b
}

/// The fixed part of a request to bring a link up or down.
pub(crate) fn ifinfomsg_up(index: u32, up: bool) -> [u8; IFINFOMSG_LEN] {
    ifinfomsg(index, if up { IFF_UP } else { 0 }, IFF_UP)
}

pub(crate) fn link_name_attr(req: Request, name: &str) -> Request {
    req.attr_str(IFLA_IFNAME, name)
}

pub(crate) fn link_mtu_attr(req: Request, mtu: u32) -> Request {
    req.attr_u32(IFLA_MTU, mtu)
}

pub(crate) fn link_mac_attr(req: Request, mac: [u8; 6]) -> Request {
    req.attr(IFLA_ADDRESS, &mac)
}

/// The `RTM_NEWLINK` request that enslaves link `index` to `master` (0: to none).
pub(super) fn master_request(index: u32, master: Option<u32>) -> Request {
    Request::new(wire::RTM_NEWLINK, wire::NLM_F_ACK, &ifinfomsg(index, 0, 0))
        .attr_u32(IFLA_MASTER, master.unwrap_or(0))
}

/// Reads an `RTM_NEWLINK` payload.
pub(crate) fn parse_link(payload: &[u8]) -> Result<Link, WireError> {
    let fixed = payload
        .get(..IFINFOMSG_LEN)
        .ok_or_else(|| malformed("link message shorter than struct ifinfomsg"))?;
    let index = u32_at(fixed, 4).unwrap_or(0);
    let flags = u32_at(fixed, 8).unwrap_or(0);
    let (mut name, mut mac, mut mtu, mut master, mut link_kind) = (None, None, 0, None, None);
    for a in attrs(&payload[IFINFOMSG_LEN..]) {
        let (attr, value) = a?;
        match attr {
            IFLA_IFNAME => name = Some(c_string(value)),
            IFLA_ADDRESS => mac = <[u8; 6]>::try_from(value).ok(),
            IFLA_MTU => mtu = u32_of(value).ok_or_else(|| malformed("IFLA_MTU not 4 bytes"))?,
            IFLA_MASTER => master = u32_of(value).filter(|&m| m != 0),
            kind::IFLA_LINKINFO => link_kind = kind::parse_kind(value)?,
            _ => {}
        }
    }
    let name = name.ok_or_else(|| malformed(format!("link {index} without a name")))?;
    Ok(Link {
        index,
        name,
        mac,
        mtu,
        up: flags & IFF_UP != 0,
        master,
        kind: link_kind,
    })
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
}
