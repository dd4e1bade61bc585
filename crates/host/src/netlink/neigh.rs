//! Neighbours (ARP and NDP entries): listing them, setting a permanent one, deleting one.

use std::net::IpAddr;

use super::wire::{
    self, AF_INET, AF_INET6, Request, WireError, attrs, family_of, ip_of, malformed, u16_at, u32_at,
};
use super::{MacText, Netlink};
use crate::HostError;

pub(crate) const NDA_DST: u16 = 1;
pub(crate) const NDA_LLADDR: u16 = 2;
pub(crate) const NUD_PERMANENT: u16 = 0x80;
/// States in which a neighbour's MAC can be used: REACHABLE, STALE, DELAY, PROBE, NOARP,
/// PERMANENT.
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;
/// Size of `struct ndmsg`, the fixed header of neighbour messages.
pub(crate) const NDMSG_LEN: usize = 12;

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

impl Netlink {
    /// The IPv4 and IPv6 neighbour entries of every interface.
    pub fn neighbors(&mut self) -> Result<Vec<Neighbor>, HostError> {
        let fixed = ndmsg_dump();
        self.sock
            .dump(
                || Request::new(wire::RTM_GETNEIGH, wire::NLM_F_DUMP, &fixed),
                wire::RTM_NEWNEIGH,
                parse_neighbor,
            )
            .map_err(|f| f.into_host("list neighbours".into()))
    }

    /// Sets a permanent neighbour entry `ip` -> `mac` on interface `index`, replacing any.
    pub fn add_neighbor(&mut self, index: u32, ip: IpAddr, mac: [u8; 6]) -> Result<(), HostError> {
        let req = neighbor_request(
            wire::RTM_NEWNEIGH,
            wire::NLM_F_ACK | wire::NLM_F_CREATE | wire::NLM_F_REPLACE,
            index,
            ip,
            Some(mac),
            NUD_PERMANENT,
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
        let req = neighbor_request(wire::RTM_DELNEIGH, wire::NLM_F_ACK, index, ip, None, 0);
        self.change_unless(req, libc::ENOENT, |nl| {
            format!("delete neighbour {ip} on {}", nl.describe(index))
        })
    }
}

/// The fixed part of a neighbour dump request (all families).
pub(crate) fn ndmsg_dump() -> [u8; NDMSG_LEN] {
    [0; NDMSG_LEN]
}

/// An `RTM_NEWNEIGH` (with `state`, and `mac` when given) or `RTM_DELNEIGH` request for `ip`
/// on link `index`.
pub(crate) fn neighbor_request(
    kind: u16,
    flags: u16,
    index: u32,
    ip: IpAddr,
    mac: Option<[u8; 6]>,
    state: u16,
) -> Request {
    let mut fixed = [0u8; NDMSG_LEN];
    fixed[0] = family_of(ip);
    fixed[4..8].copy_from_slice(&index.to_ne_bytes());
    fixed[8..10].copy_from_slice(&state.to_ne_bytes());
    let req = Request::new(kind, flags, &fixed).attr_ip(NDA_DST, ip);
    match mac {
        Some(mac) => req.attr(NDA_LLADDR, &mac),
        None => req,
    }
}

/// Reads an `RTM_NEWNEIGH` payload; `None` for other families (bridge FDB entries) and
/// entries without an IP address.
pub(crate) fn parse_neighbor(payload: &[u8]) -> Result<Option<Neighbor>, WireError> {
    let fixed = payload
        .get(..NDMSG_LEN)
        .ok_or_else(|| malformed("neighbour message shorter than struct ndmsg"))?;
    let family = fixed[0];
    let index = u32_at(fixed, 4).unwrap_or(0);
    let state = u16_at(fixed, 8).unwrap_or(0);
    if family != AF_INET && family != AF_INET6 {
        return Ok(None);
    }
    let (mut ip, mut mac) = (None, None);
    for a in attrs(&payload[NDMSG_LEN..]) {
        let (kind, value) = a?;
        match kind {
            NDA_DST => ip = Some(ip_of(family, value, "NDA_DST")?),
            NDA_LLADDR => mac = <[u8; 6]>::try_from(value).ok(),
            _ => {}
        }
    }
    let Some(ip) = ip else {
        return Ok(None);
    };
    Ok(Some(Neighbor {
        ip,
        mac,
        index,
        usable: state & NUD_USABLE != 0 && mac.is_some(),
    }))
}
