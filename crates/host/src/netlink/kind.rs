//! Links made of a kind (`ip link add NAME type KIND`): veth pairs, whose second end may be
//! born in another namespace, and bridges; and reading which kind a link is. A kind is named
//! in the link's `IFLA_LINKINFO`; VXLAN devices, which carry more settings, are in
//! [`super::vxlan`].

use std::os::fd::AsRawFd;

use super::link::{IFLA_NET_NS_FD, ifinfomsg, link_name_attr};
use super::wire::{self, Request, WireError, attrs, c_string};
use super::{Netlink, check_link_name};
use crate::HostError;
use crate::netns::Netns;

pub(crate) const IFLA_LINKINFO: u16 = 18;
pub(crate) const IFLA_INFO_KIND: u16 = 1;
pub(crate) const IFLA_INFO_DATA: u16 = 2;
/// In a veth's `IFLA_INFO_DATA`: the peer, as an `ifinfomsg` and its attributes.
const VETH_INFO_PEER: u16 = 1;

impl Netlink {
    /// Creates the bridge `name` (down; bring it up with [`Netlink::set_up`], add ports with
    /// [`Netlink::set_master`]), as `ip link add NAME type bridge`.
    pub fn add_bridge(&mut self, name: &str) -> Result<(), HostError> {
        check_link_name(name)?;
        self.change(bridge_request(name), |_| format!("create bridge {name}"))
    }

    /// Creates the veth pair `name` – `peer`, both down, as `ip link add NAME type veth peer
    /// name PEER [netns NS]`: `peer` is made in `peer_netns` when given (it never exists in
    /// this one, so its name may be taken here), else here.
    pub fn add_veth(
        &mut self,
        name: &str,
        peer: &str,
        peer_netns: Option<&Netns>,
    ) -> Result<(), HostError> {
        check_link_name(name)?;
        check_link_name(peer)?;
        let file = peer_netns.map(Netns::open).transpose()?;
        let fd = file.as_ref().map(|f| f.as_raw_fd() as u32);
        let where_ = peer_netns.map_or(String::new(), |ns| format!(" in {ns}"));
        self.change(veth_request(name, peer, fd), |_| {
            format!("create veth pair {name} - {peer}{where_}")
        })
    }
}

/// The `RTM_NEWLINK` request that creates a link `name` of `kind` (refused if it exists), with
/// the kind's settings appended by `data` into `IFLA_INFO_DATA` when given.
fn new_link_request(name: &str, kind: &str, data: Option<&dyn Fn(Request) -> Request>) -> Request {
    let req = Request::new(
        wire::RTM_NEWLINK,
        wire::NLM_F_ACK | wire::NLM_F_CREATE | wire::NLM_F_EXCL,
        &ifinfomsg(0, 0, 0),
    );
    link_name_attr(req, name).nested(IFLA_LINKINFO, |r| {
        let r = r.attr_str(IFLA_INFO_KIND, kind);
        match data {
            Some(data) => r.nested(IFLA_INFO_DATA, data),
            None => r,
        }
    })
}

/// The request that creates bridge `name`.
pub(super) fn bridge_request(name: &str) -> Request {
    new_link_request(name, "bridge", None)
}

/// The request that creates veth `name` with its `peer`, in the namespace open as `peer_fd`
/// when given.
pub(super) fn veth_request(name: &str, peer: &str, peer_fd: Option<u32>) -> Request {
    let peer_attrs = |d: Request| {
        d.nested(VETH_INFO_PEER, |p| {
            let p = link_name_attr(p.raw(&ifinfomsg(0, 0, 0)), peer);
            match peer_fd {
                Some(fd) => p.attr_u32(IFLA_NET_NS_FD, fd),
                None => p,
            }
        })
    };
    new_link_request(name, "veth", Some(&peer_attrs))
}

/// The kind named in an `IFLA_LINKINFO` value, if it names one.
pub(super) fn parse_kind(linkinfo: &[u8]) -> Result<Option<String>, WireError> {
    for a in attrs(linkinfo) {
        let (attr, value) = a?;
        if attr == IFLA_INFO_KIND {
            return Ok(Some(c_string(value)));
        }
    }
    Ok(None)
}

/// The peer's name and namespace descriptor in a veth request's `IFLA_INFO_DATA`.
#[cfg(test)]
fn parse_veth_peer(data: &[u8]) -> Result<Option<(String, Option<u32>)>, WireError> {
    for a in attrs(data) {
        let (attr, value) = a?;
        if attr != VETH_INFO_PEER {
            continue;
        }
        let peer_attrs = value
            .get(super::link::IFINFOMSG_LEN..)
            .ok_or_else(|| wire::malformed("veth peer shorter than struct ifinfomsg"))?;
        let (mut name, mut fd) = (None, None);
        for a in attrs(peer_attrs) {
            let (attr, value) = a?;
            match attr {
                super::link::IFLA_IFNAME => name = Some(c_string(value)),
                IFLA_NET_NS_FD => fd = wire::u32_of(value),
                _ => {}
            }
        }
        return Ok(name.map(|n| (n, fd)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::link;
    use crate::netlink::wire::NLMSG_HDRLEN;

    /// The attributes of a request's `IFLA_LINKINFO`, and the request read as a link.
    fn linkinfo(bytes: &[u8]) -> (Vec<(u16, Vec<u8>)>, super::super::Link) {
        let payload = &bytes[NLMSG_HDRLEN..];
        let link = link::parse_link(payload).expect("reads as a link");
        let info = attrs(&payload[link::IFINFOMSG_LEN..])
            .map(|a| a.expect("attribute"))
            .find(|(attr, _)| *attr == IFLA_LINKINFO)
            .map(|(_, v)| v)
            .expect("IFLA_LINKINFO");
        let inner = attrs(info)
            .map(|a| a.expect("attribute"))
            .map(|(k, v)| (k, v.to_vec()))
            .collect();
        (inner, link)
    }

    #[test]
    fn a_bridge_request_names_the_link_and_its_kind_and_refuses_an_existing_one() {
        let bytes = bridge_request("br0").finish(1);
        let flags = wire::u16_at(&bytes, 6).expect("flags");
        assert_eq!(
            flags & (wire::NLM_F_CREATE | wire::NLM_F_EXCL),
            wire::NLM_F_CREATE | wire::NLM_F_EXCL
        );
        let (info, link) = linkinfo(&bytes);
        assert_eq!(link.name, "br0");
        assert_eq!(link.kind.as_deref(), Some("bridge"));
        assert_eq!(info, [(IFLA_INFO_KIND, b"bridge\0".to_vec())]);
        // LINKINFO is nested: the kernel's strict parser wants the flag.
        let raw_type = wire::u16_at(&bytes, NLMSG_HDRLEN + link::IFINFOMSG_LEN + 8 + 2);
        assert_eq!(raw_type, Some(IFLA_LINKINFO | 0x8000));
    }

    #[test]
    fn a_veth_request_carries_its_peer_as_an_ifinfomsg_with_name_and_namespace() {
        let bytes = veth_request("fab-n1", "eth0", Some(7)).finish(1);
        let (info, link) = linkinfo(&bytes);
        assert_eq!(link.name, "fab-n1");
        assert_eq!(link.kind.as_deref(), Some("veth"));
        let data = info
            .iter()
            .find(|(k, _)| *k == IFLA_INFO_DATA)
            .map(|(_, v)| v.clone())
            .expect("IFLA_INFO_DATA");
        // The peer's ifinfomsg is all zeros: index, flags and change are the kernel's to pick.
        let peer_value = attrs(&data)
            .map(|a| a.expect("attribute"))
            .find(|(k, _)| *k == VETH_INFO_PEER)
            .map(|(_, v)| v.to_vec())
            .expect("VETH_INFO_PEER");
        assert_eq!(
            &peer_value[..link::IFINFOMSG_LEN],
            &[0; link::IFINFOMSG_LEN]
        );
        assert_eq!(
            parse_veth_peer(&data),
            Ok(Some(("eth0".to_string(), Some(7))))
        );
        let here = veth_request("a", "b", None).finish(1);
        let (info, _) = linkinfo(&here);
        let data = &info
            .iter()
            .find(|(k, _)| *k == IFLA_INFO_DATA)
            .expect("data")
            .1;
        assert_eq!(parse_veth_peer(data), Ok(Some(("b".to_string(), None))));
    }

    #[test]
    fn a_link_without_linkinfo_or_kind_has_none() {
        assert_eq!(parse_kind(&[]), Ok(None));
        let only_data = Request::new(0, 0, &[])
            .nested(IFLA_INFO_DATA, |d| d.attr_u32(1, 1))
            .finish(1);
        assert_eq!(parse_kind(&only_data[NLMSG_HDRLEN..]), Ok(None));
    }
}
