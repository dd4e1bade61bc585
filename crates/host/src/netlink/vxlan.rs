//! VXLAN devices and their forwarding database: what a Linux node's flannel vxlan backend
//! programs. A VXLAN device with learning off forwards a frame to the VTEP its FDB names for the
//! destination MAC; the neighbour table maps each remote subnet's gateway to that MAC, and an
//! on-link route ([`Netlink::add_onlink_route`]) sends the subnet to the gateway through the
//! device.

use std::net::{IpAddr, Ipv4Addr};

use super::kind::{IFLA_INFO_DATA, IFLA_INFO_KIND, IFLA_LINKINFO};
use super::wire::{self, Request, WireError};
use super::{MacText, Netlink, check_link_name, link, neigh};
use crate::HostError;

const IFLA_VXLAN_ID: u16 = 1;
const IFLA_VXLAN_LINK: u16 = 3;
const IFLA_VXLAN_LOCAL: u16 = 4;
const IFLA_VXLAN_LEARNING: u16 = 7;
const IFLA_VXLAN_PORT: u16 = 15;
const AF_BRIDGE: u8 = libc::AF_BRIDGE as u8;
/// `ndm_flags`: the entry is the device's own FDB, not a bridge master's.
const NTF_SELF: u8 = 0x02;

/// A VXLAN device to create: the VNI, the UDP port, the local VTEP address and the underlay
/// interface it sends from; learning is off, as flannel sets it (the FDB is programmed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VxlanSpec {
    /// The device name (`flannel.4096`).
    pub name: String,
    /// The VXLAN network identifier.
    pub vni: u32,
    /// The UDP destination port (4789 is IANA's).
    pub port: u16,
    /// The local VTEP address (the node's public IP).
    pub local: Ipv4Addr,
    /// The underlay interface index.
    pub underlay: u32,
    /// The device's MAC (the VtepMAC others program); the kernel picks one when `None`.
    pub mac: Option<[u8; 6]>,
    /// The device MTU; the kernel derives one from the underlay when `None`.
    pub mtu: Option<u32>,
}

/// What an existing VXLAN device is: enough to tell whether it is the one wanted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VxlanInfo {
    /// The interface index.
    pub index: u32,
    pub vni: u32,
    pub port: u16,
    pub local: Option<Ipv4Addr>,
    pub underlay: Option<u32>,
    pub mac: Option<[u8; 6]>,
}

/// A forwarding entry of a VXLAN device: frames for `mac` go to the VTEP at `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FdbEntry {
    /// The device's interface index.
    pub index: u32,
    pub mac: [u8; 6],
    /// The remote VTEP; `None` for entries without one (the device's own address).
    pub dst: Option<IpAddr>,
}

impl Netlink {
    /// Creates the VXLAN device `spec` (down; bring it up with [`Netlink::set_up`]).
    pub fn add_vxlan(&mut self, spec: &VxlanSpec) -> Result<(), HostError> {
        check_link_name(&spec.name)?;
        let req = vxlan_request(spec);
        self.change(req, |_| {
            format!(
                "create VXLAN device {} (VNI {}, port {}, local {})",
                spec.name, spec.vni, spec.port, spec.local
            )
        })
    }

    /// The VXLAN device called `name`; `None` if there is no such interface, an error if the
    /// interface is of another kind.
    pub fn vxlan(&mut self, name: &str) -> Result<Option<VxlanInfo>, HostError> {
        let Some(link) = self.link(name)? else {
            return Ok(None);
        };
        let req = Request::new(
            wire::RTM_GETLINK,
            wire::NLM_F_ACK,
            &link::ifinfomsg(link.index, 0, 0),
        );
        let mut found = self
            .sock
            .exchange(req, wire::RTM_NEWLINK, |p| parse_vxlan(p).map(Some))
            .map_err(|f| f.into_host(format!("read VXLAN device {name}")))?;
        match found.pop() {
            Some(Some(info)) => Ok(Some(info)),
            _ => Err(HostError::AlreadyExists(format!(
                "interface {name} exists and is not a VXLAN device; remove it (ip link del {name})"
            ))),
        }
    }

    /// The FDB entries of VXLAN device `index` that name a remote VTEP.
    pub fn fdb(&mut self, index: u32) -> Result<Vec<FdbEntry>, HostError> {
        let mut fixed = neigh::ndmsg_dump();
        fixed[0] = AF_BRIDGE;
        let all = self
            .sock
            .dump(
                || Request::new(wire::RTM_GETNEIGH, wire::NLM_F_DUMP, &fixed),
                wire::RTM_NEWNEIGH,
                parse_fdb,
            )
            .map_err(|f| f.into_host("list FDB entries".into()))?;
        Ok(all.into_iter().filter(|e| e.index == index).collect())
    }

    /// Sets the FDB entry `mac` -> VTEP `dst` on device `index`, replacing one for `mac`.
    pub fn add_fdb(&mut self, index: u32, mac: [u8; 6], dst: IpAddr) -> Result<(), HostError> {
        let req = fdb_request(
            wire::RTM_NEWNEIGH,
            wire::NLM_F_ACK | wire::NLM_F_CREATE | wire::NLM_F_REPLACE,
            index,
            mac,
            Some(dst),
        );
        self.change(req, |nl| {
            format!(
                "add FDB entry {} dst {dst} on {}",
                MacText(mac),
                nl.describe(index)
            )
        })
    }

    /// Deletes the FDB entry for `mac` on device `index`. Ok if there is none.
    pub fn del_fdb(&mut self, index: u32, mac: [u8; 6], dst: IpAddr) -> Result<(), HostError> {
        let req = fdb_request(wire::RTM_DELNEIGH, wire::NLM_F_ACK, index, mac, Some(dst));
        self.change_unless(req, libc::ENOENT, |nl| {
            format!(
                "delete FDB entry {} on {}",
                MacText(mac),
                nl.describe(index)
            )
        })
    }
}

/// The `RTM_NEWLINK` request that creates `spec`.
fn vxlan_request(spec: &VxlanSpec) -> Request {
    let mut req = Request::new(
        wire::RTM_NEWLINK,
        wire::NLM_F_ACK | wire::NLM_F_CREATE | wire::NLM_F_EXCL,
        &link::ifinfomsg(0, 0, 0),
    );
    req = link::link_name_attr(req, &spec.name);
    if let Some(mac) = spec.mac {
        req = link::link_mac_attr(req, mac);
    }
    if let Some(mtu) = spec.mtu {
        req = link::link_mtu_attr(req, mtu);
    }
    req.nested(IFLA_LINKINFO, |r| {
        r.attr_str(IFLA_INFO_KIND, "vxlan")
            .nested(IFLA_INFO_DATA, |d| {
                d.attr_u32(IFLA_VXLAN_ID, spec.vni)
                    .attr_u32(IFLA_VXLAN_LINK, spec.underlay)
                    .attr(IFLA_VXLAN_LOCAL, &spec.local.octets())
                    .attr(IFLA_VXLAN_LEARNING, &[0])
                    .attr(IFLA_VXLAN_PORT, &spec.port.to_be_bytes())
            })
    })
}

/// An FDB request on device `index` for `mac` (and VTEP `dst`).
fn fdb_request(kind: u16, flags: u16, index: u32, mac: [u8; 6], dst: Option<IpAddr>) -> Request {
    let mut fixed = neigh::ndmsg_dump();
    fixed[0] = AF_BRIDGE;
    fixed[4..8].copy_from_slice(&index.to_ne_bytes());
    fixed[8..10].copy_from_slice(&neigh::NUD_PERMANENT.to_ne_bytes());
    fixed[10] = NTF_SELF;
    let req = Request::new(kind, flags, &fixed).attr(neigh::NDA_LLADDR, &mac);
    match dst {
        Some(ip) => req.attr_ip(neigh::NDA_DST, ip),
        None => req,
    }
}

/// Reads an `RTM_NEWLINK` payload as a VXLAN device; `None` for links of another kind.
fn parse_vxlan(payload: &[u8]) -> Result<Option<VxlanInfo>, WireError> {
    let link = link::parse_link(payload)?;
    let attrs = payload
        .get(link::IFINFOMSG_LEN..)
        .ok_or_else(|| wire::malformed("link message shorter than struct ifinfomsg"))?;
    let mut info = None;
    for a in wire::attrs(attrs) {
        let (kind, value) = a?;
        if kind == IFLA_LINKINFO {
            info = parse_linkinfo(value)?;
        }
    }
    Ok(info.map(|mut i: VxlanInfo| {
        i.index = link.index;
        i.mac = link.mac;
        i
    }))
}

/// The VXLAN settings in an `IFLA_LINKINFO` value; `None` unless its kind is `vxlan`.
fn parse_linkinfo(value: &[u8]) -> Result<Option<VxlanInfo>, WireError> {
    let (mut is_vxlan, mut data) = (false, None);
    for a in wire::attrs(value) {
        let (kind, v) = a?;
        match kind {
            IFLA_INFO_KIND => is_vxlan = wire::c_string(v) == "vxlan",
            IFLA_INFO_DATA => data = Some(v),
            _ => {}
        }
    }
    if !is_vxlan {
        return Ok(None);
    }
    let mut info = VxlanInfo {
        index: 0,
        vni: 0,
        port: 0,
        local: None,
        underlay: None,
        mac: None,
    };
    for a in wire::attrs(data.unwrap_or(&[])) {
        let (kind, v) = a?;
        match kind {
            IFLA_VXLAN_ID => info.vni = wire::u32_of(v).unwrap_or(0),
            IFLA_VXLAN_LINK => info.underlay = wire::u32_of(v),
            IFLA_VXLAN_LOCAL => info.local = <[u8; 4]>::try_from(v).ok().map(Ipv4Addr::from),
            IFLA_VXLAN_PORT => {
                info.port = <[u8; 2]>::try_from(v).map(u16::from_be_bytes).unwrap_or(0)
            }
            _ => {}
        }
    }
    Ok(Some(info))
}

/// Reads an `RTM_NEWNEIGH` payload as an FDB entry; `None` unless it is a bridge-family entry
/// with a MAC.
fn parse_fdb(payload: &[u8]) -> Result<Option<FdbEntry>, WireError> {
    let fixed = payload
        .get(..neigh::NDMSG_LEN)
        .ok_or_else(|| wire::malformed("neighbour message shorter than struct ndmsg"))?;
    if fixed[0] != AF_BRIDGE {
        return Ok(None);
    }
    let index = wire::u32_at(fixed, 4).unwrap_or(0);
    let (mut mac, mut dst) = (None, None);
    for a in wire::attrs(&payload[neigh::NDMSG_LEN..]) {
        let (kind, value) = a?;
        match kind {
            neigh::NDA_LLADDR => mac = <[u8; 6]>::try_from(value).ok(),
            neigh::NDA_DST => {
                let family = if value.len() == 4 {
                    wire::AF_INET
                } else {
                    wire::AF_INET6
                };
                dst = Some(wire::ip_of(family, value, "NDA_DST")?);
            }
            _ => {}
        }
    }
    Ok(mac.map(|mac| FdbEntry { index, mac, dst }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec() -> VxlanSpec {
        VxlanSpec {
            name: "flannel.4096".into(),
            vni: 4096,
            port: 4789,
            local: Ipv4Addr::new(192, 168, 77, 11),
            underlay: 2,
            mac: Some([0x0e, 0x2a, 0, 0, 0, 1]),
            mtu: Some(1450),
        }
    }

    #[test]
    fn a_vxlan_request_reads_back_as_the_device_it_creates() {
        let bytes = vxlan_request(&spec()).finish(1);
        let payload = &bytes[wire::NLMSG_HDRLEN..];
        let info = parse_vxlan(payload).expect("parse").expect("vxlan");
        assert_eq!(info.vni, 4096);
        assert_eq!(info.port, 4789);
        assert_eq!(info.local, Some(Ipv4Addr::new(192, 168, 77, 11)));
        assert_eq!(info.underlay, Some(2));
        assert_eq!(info.mac, Some([0x0e, 0x2a, 0, 0, 0, 1]));
    }

    #[test]
    fn an_fdb_request_reads_back_as_its_entry() {
        let dst: IpAddr = "192.168.77.12".parse().expect("ip");
        let bytes = fdb_request(wire::RTM_NEWNEIGH, 0, 7, [2, 0, 0, 0, 0, 9], Some(dst)).finish(1);
        let entry = parse_fdb(&bytes[wire::NLMSG_HDRLEN..])
            .expect("parse")
            .expect("entry");
        assert_eq!(
            entry,
            FdbEntry {
                index: 7,
                mac: [2, 0, 0, 0, 0, 9],
                dst: Some(dst)
            }
        );
    }

    proptest! {
        #[test]
        fn no_link_or_fdb_payload_makes_the_readers_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_vxlan(&bytes);
            let _ = parse_fdb(&bytes);
            let _ = parse_linkinfo(&bytes);
        }
    }
}
