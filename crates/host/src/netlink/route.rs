//! Routes: listing the main table, adding (replacing) and deleting unicast routes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::Netlink;
use super::wire::{
    self, AF_INET, AF_INET6, Request, WireError, attrs, family_of, ip_of, malformed, u16_at,
    u32_at, u32_of,
};
use crate::HostError;

pub(crate) const RTA_DST: u16 = 1;
pub(crate) const RTA_OIF: u16 = 4;
pub(crate) const RTA_GATEWAY: u16 = 5;
pub(crate) const RTA_PRIORITY: u16 = 6;
pub(super) const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
pub(super) const RT_TABLE_MAIN: u8 = 254;
pub(super) const RTN_UNICAST: u8 = 1;
pub(super) const RTPROT_BOOT: u8 = 3;
pub(super) const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RT_SCOPE_NOWHERE: u8 = 255;
/// Route flag: a cached clone (PMTU exceptions and the like), not a configured route.
const RTM_F_CLONED: u32 = 0x200;
/// `struct rtnexthop`: length, flags, hops, ifindex.
pub(super) const RTNH_LEN: usize = 8;
/// Size of `struct rtmsg`, the fixed header of route messages.
pub(crate) const RTMSG_LEN: usize = 12;

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

impl Netlink {
    /// The unicast routes of the main table, IPv4 and IPv6.
    pub fn routes(&mut self) -> Result<Vec<RouteEntry>, HostError> {
        let fixed = rtmsg_dump();
        self.sock
            .dump(
                || Request::new(wire::RTM_GETROUTE, wire::NLM_F_DUMP, &fixed),
                wire::RTM_NEWROUTE,
                parse_route,
            )
            .map_err(|f| f.into_host("list routes".into()))
    }

    /// Adds `route` to the main table, replacing the route with the same destination and
    /// metric if there is one.
    pub fn add_route(&mut self, route: &RouteEntry) -> Result<(), HostError> {
        check_route_families(route)?;
        let req = route_request(
            wire::NLM_F_ACK | wire::NLM_F_CREATE | wire::NLM_F_REPLACE,
            route,
            false,
        );
        self.change(req, |nl| format!("add route {}", nl.route_text(route)))
    }

    /// Deletes `route` from the main table (the gateway, interface and metric, when given,
    /// narrow which route). Ok if there is no such route.
    pub fn del_route(&mut self, route: &RouteEntry) -> Result<(), HostError> {
        check_route_families(route)?;
        let req = route_request(wire::NLM_F_ACK, route, true);
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

pub(crate) fn rtmsg(family: u8, dst_len: u8, protocol: u8, scope: u8, kind: u8) -> [u8; RTMSG_LEN] {
    let mut b = [0u8; RTMSG_LEN];
    b[0] = family;
    b[1] = dst_len;
    b[4] = RT_TABLE_MAIN;
    b[5] = protocol;
    b[6] = scope;
    b[7] = kind;
    b
}

/// The fixed part of a route dump request (all families).
pub(crate) fn rtmsg_dump() -> [u8; RTMSG_LEN] {
    [0; RTMSG_LEN]
}

/// An `RTM_NEWROUTE` request (`delete` false) or an `RTM_DELROUTE` one for `r` in the main
/// table. The gateway, when there is one, must be of the destination's family.
pub(crate) fn route_request(flags: u16, r: &RouteEntry, delete: bool) -> Request {
    let family = family_of(r.destination.addr());
    let fixed = if delete {
        // As `ip route del`: any protocol and scope, matched on what the attributes name.
        rtmsg(family, r.destination.prefix_len(), 0, RT_SCOPE_NOWHERE, 0)
    } else {
        let scope = if r.gateway.is_some() {
            RT_SCOPE_UNIVERSE
        } else {
            RT_SCOPE_LINK
        };
        rtmsg(
            family,
            r.destination.prefix_len(),
            RTPROT_BOOT,
            scope,
            RTN_UNICAST,
        )
    };
    let kind = if delete {
        wire::RTM_DELROUTE
    } else {
        wire::RTM_NEWROUTE
    };
    let mut req = Request::new(kind, flags, &fixed);
    if r.destination.prefix_len() > 0 {
        req = req.attr_ip(RTA_DST, r.destination.addr());
    }
    if let Some(gw) = r.gateway {
        req = req.attr_ip(RTA_GATEWAY, gw);
    }
    if let Some(oif) = r.oif {
        req = req.attr_u32(RTA_OIF, oif);
    }
    if let Some(metric) = r.metric {
        req = req.attr_u32(RTA_PRIORITY, metric);
    }
    req
}

/// Reads an `RTM_NEWROUTE` payload; `None` unless it is an IPv4 or IPv6 unicast route of the
/// main table (not a cached clone). A multipath route reads as its first next hop.
pub(crate) fn parse_route(payload: &[u8]) -> Result<Option<RouteEntry>, WireError> {
    let fixed = payload
        .get(..RTMSG_LEN)
        .ok_or_else(|| malformed("route message shorter than struct rtmsg"))?;
    let (family, dst_len, mut table, kind) = (fixed[0], fixed[1], u32::from(fixed[4]), fixed[7]);
    let flags = u32_at(fixed, 8).unwrap_or(0);
    if (family != AF_INET && family != AF_INET6) || kind != RTN_UNICAST {
        return Ok(None);
    }
    let (mut dst, mut gateway, mut oif, mut metric) = (None, None, None, None);
    let mut first_hop = None;
    for a in attrs(&payload[RTMSG_LEN..]) {
        let (k, value) = a?;
        match k {
            RTA_DST => dst = Some(ip_of(family, value, "RTA_DST")?),
            RTA_GATEWAY => gateway = Some(ip_of(family, value, "RTA_GATEWAY")?),
            RTA_OIF => oif = Some(u32_of(value).ok_or_else(|| malformed("RTA_OIF not 4 bytes"))?),
            RTA_PRIORITY => {
                metric = Some(u32_of(value).ok_or_else(|| malformed("RTA_PRIORITY not 4 bytes"))?)
            }
            RTA_TABLE => table = u32_of(value).ok_or_else(|| malformed("RTA_TABLE not 4 bytes"))?,
            RTA_MULTIPATH => first_hop = parse_first_hop(family, value)?,
            _ => {}
        }
    }
    if table != u32::from(RT_TABLE_MAIN) || flags & RTM_F_CLONED != 0 {
        return Ok(None);
    }
    if let Some((hop_oif, hop_gw)) = first_hop {
        oif = oif.or(Some(hop_oif));
        gateway = gateway.or(hop_gw);
    }
    let unspecified = if family == AF_INET {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    let addr = dst.unwrap_or(unspecified);
    let destination = IpNet::new(addr, dst_len)
        .map_err(|_| malformed(format!("route to {addr} with prefix length {dst_len}")))?;
    Ok(Some(RouteEntry {
        destination,
        gateway,
        oif,
        metric,
    }))
}

/// The interface and gateway of the first `struct rtnexthop` in an `RTA_MULTIPATH` value.
fn parse_first_hop(family: u8, value: &[u8]) -> Result<Option<(u32, Option<IpAddr>)>, WireError> {
    let (Some(len), Some(index)) = (u16_at(value, 0), u32_at(value, 4)) else {
        return Ok(None);
    };
    let len = usize::from(len);
    let hop_attrs = value
        .get(RTNH_LEN..len)
        .ok_or_else(|| malformed(format!("next hop length {len} outside 8..={}", value.len())))?;
    let mut gateway = None;
    for a in attrs(hop_attrs) {
        let (kind, v) = a?;
        if kind == RTA_GATEWAY {
            gateway = Some(ip_of(family, v, "next hop RTA_GATEWAY")?);
        }
    }
    Ok(Some((index, gateway)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
