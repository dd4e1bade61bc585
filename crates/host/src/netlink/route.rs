//! Routes: listing a routing table (the main one, or a policy table), adding (replacing) and
//! deleting unicast routes, with their gateway on-link when asked.

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
/// `rtm_table` of a route whose table is only in `RTA_TABLE` (above 255).
const RT_TABLE_UNSPEC: u8 = 0;
/// `rtm_flags`: the gateway is on the link even though no address says so.
const RTNH_F_ONLINK: u32 = 4;
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

/// The main routing table, where routes go unless a policy rule sends a lookup elsewhere.
pub const MAIN_TABLE: u32 = 254;
/// The local table: the host's own and broadcast addresses (`ip rule`'s `lookup local`).
pub const LOCAL_TABLE: u32 = 255;

/// A unicast route of a routing table (the main one unless a method says otherwise).
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

/// Where a route request puts its route: the table, and whether the gateway is taken as on
/// the link even though no address of the link covers it (`onlink`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    pub table: u32,
    pub onlink: bool,
}

impl Placement {
    /// The main table, the gateway reached through the link's addresses.
    pub(crate) const MAIN: Placement = Placement {
        table: MAIN_TABLE,
        onlink: false,
    };
}

impl Netlink {
    /// The unicast routes of the main table, IPv4 and IPv6.
    pub fn routes(&mut self) -> Result<Vec<RouteEntry>, HostError> {
        self.routes_in(MAIN_TABLE)
    }

    /// The unicast routes of routing table `table`, IPv4 and IPv6.
    pub fn routes_in(&mut self, table: u32) -> Result<Vec<RouteEntry>, HostError> {
        let fixed = rtmsg_dump();
        self.sock
            .dump(
                || Request::new(wire::RTM_GETROUTE, wire::NLM_F_DUMP, &fixed),
                wire::RTM_NEWROUTE,
                |p| parse_route_in(p, table),
            )
            .map_err(|f| f.into_host(format!("list routes{}", table_text(table))))
    }

    /// Adds `route` to the main table, replacing the route with the same destination and
    /// metric if there is one (`ip route replace`).
    pub fn add_route(&mut self, route: &RouteEntry) -> Result<(), HostError> {
        self.put_route(Placement::MAIN, route)
    }

    /// Adds `route` with its gateway on-link (`ip route replace ... onlink`), replacing the
    /// route with the same destination and metric.
    pub fn add_onlink_route(&mut self, route: &RouteEntry) -> Result<(), HostError> {
        self.put_route(
            Placement {
                table: MAIN_TABLE,
                onlink: true,
            },
            route,
        )
    }

    /// Adds `route` to routing table `table` (`ip route replace ... table TABLE [onlink]`),
    /// replacing the route there with the same destination and metric.
    pub fn add_route_in(
        &mut self,
        table: u32,
        route: &RouteEntry,
        onlink: bool,
    ) -> Result<(), HostError> {
        self.put_route(Placement { table, onlink }, route)
    }

    fn put_route(&mut self, at: Placement, route: &RouteEntry) -> Result<(), HostError> {
        check_route_families(route)?;
        check_table(at.table)?;
        let req = route_request_in(
            wire::NLM_F_ACK | wire::NLM_F_CREATE | wire::NLM_F_REPLACE,
            route,
            false,
            at,
        );
        self.change(req, |nl| {
            let onlink = if at.onlink { " onlink" } else { "" };
            format!(
                "add route {}{onlink}{}",
                nl.route_text(route),
                table_text(at.table)
            )
        })
    }

    /// Deletes `route` from the main table (the gateway, interface and metric, when given,
    /// narrow which route). Ok if there is no such route.
    pub fn del_route(&mut self, route: &RouteEntry) -> Result<(), HostError> {
        self.del_route_in(MAIN_TABLE, route)
    }

    /// Deletes `route` from routing table `table`, as [`Netlink::del_route`] does from the
    /// main one. Ok if there is no such route.
    pub fn del_route_in(&mut self, table: u32, route: &RouteEntry) -> Result<(), HostError> {
        check_route_families(route)?;
        check_table(table)?;
        let at = Placement {
            table,
            onlink: false,
        };
        let req = route_request_in(wire::NLM_F_ACK, route, true, at);
        self.change_unless(req, libc::ESRCH, |nl| {
            format!("delete route {}{}", nl.route_text(route), table_text(table))
        })
    }

    /// Deletes every unicast route of routing table `table` (`ip route flush table TABLE`).
    pub fn flush_routes_in(&mut self, table: u32) -> Result<(), HostError> {
        for r in self.routes_in(table)? {
            self.del_route_in(table, &r)?;
        }
        Ok(())
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

/// " table N" for a table other than the main one, for messages.
fn table_text(table: u32) -> String {
    match table {
        MAIN_TABLE => String::new(),
        LOCAL_TABLE => " table local".into(),
        t => format!(" table {t}"),
    }
}

/// Table 0 means "unspecified" to the kernel: a route put there lands in the main table.
fn check_table(table: u32) -> Result<(), HostError> {
    if table == 0 {
        return Err(HostError::Invalid(
            "routing table 0 is not a table (the kernel reads it as \"unspecified\"); \
             name the main table (254) or a policy table"
                .into(),
        ));
    }
    Ok(())
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

/// `struct rtmsg` for a route of the main table.
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
#[cfg(test)]
pub(crate) fn route_request(flags: u16, r: &RouteEntry, delete: bool) -> Request {
    route_request_in(flags, r, delete, Placement::MAIN)
}

/// As [`route_request`], for the table and on-link flag of `at`. Tables above 255 do not fit
/// `rtm_table` and go in `RTA_TABLE` only, as iproute2 sends them; other tables than the
/// main one are named in both.
pub(crate) fn route_request_in(flags: u16, r: &RouteEntry, delete: bool, at: Placement) -> Request {
    let family = family_of(r.destination.addr());
    let mut fixed = if delete {
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
    fixed[4] = u8::try_from(at.table).unwrap_or(RT_TABLE_UNSPEC);
    if at.onlink {
        fixed[8..12].copy_from_slice(&RTNH_F_ONLINK.to_ne_bytes());
    }
    let kind = if delete {
        wire::RTM_DELROUTE
    } else {
        wire::RTM_NEWROUTE
    };
    let mut req = Request::new(kind, flags, &fixed);
    if at.table != MAIN_TABLE {
        req = req.attr_u32(RTA_TABLE, at.table);
    }
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
#[cfg(test)]
pub(crate) fn parse_route(payload: &[u8]) -> Result<Option<RouteEntry>, WireError> {
    parse_route_in(payload, MAIN_TABLE)
}

/// As [`parse_route`], for routes of table `want`.
pub(crate) fn parse_route_in(payload: &[u8], want: u32) -> Result<Option<RouteEntry>, WireError> {
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
    if table != want || flags & RTM_F_CLONED != 0 {
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

    fn default_via(gw: &str, oif: u32) -> RouteEntry {
        RouteEntry {
            destination: "0.0.0.0/0".parse().expect("net"),
            gateway: Some(gw.parse().expect("ip")),
            oif: Some(oif),
            metric: None,
        }
    }

    #[test]
    fn a_policy_table_above_255_goes_in_rta_table_and_reads_back_only_from_that_table() {
        let r = default_via("192.168.77.1", 3);
        let at = Placement {
            table: 4242,
            onlink: false,
        };
        let bytes = route_request_in(0, &r, false, at).finish(1);
        let payload = &bytes[wire::NLMSG_HDRLEN..];
        assert_eq!(payload[4], RT_TABLE_UNSPEC, "4242 does not fit rtm_table");
        let table = attrs(&payload[RTMSG_LEN..])
            .map(|a| a.expect("attribute"))
            .find(|(k, _)| *k == RTA_TABLE)
            .and_then(|(_, v)| u32_of(v));
        assert_eq!(table, Some(4242));
        assert_eq!(parse_route_in(payload, 4242), Ok(Some(r)));
        assert_eq!(parse_route(payload), Ok(None), "not a main-table route");
    }

    #[test]
    fn a_small_table_is_in_rtm_table_and_rta_table_and_main_in_rtm_table_only() {
        let r = default_via("10.0.0.1", 2);
        let bytes = route_request_in(
            0,
            &r,
            false,
            Placement {
                table: 100,
                onlink: false,
            },
        )
        .finish(1);
        let payload = &bytes[wire::NLMSG_HDRLEN..];
        assert_eq!(payload[4], 100);
        assert_eq!(parse_route_in(payload, 100), Ok(Some(r)));
        let main = route_request(0, &r, false).finish(1);
        let payload = &main[wire::NLMSG_HDRLEN..];
        assert_eq!(payload[4], RT_TABLE_MAIN);
        assert!(
            attrs(&payload[RTMSG_LEN..]).all(|a| a.expect("attribute").0 != RTA_TABLE),
            "the main table needs no RTA_TABLE"
        );
    }

    #[test]
    fn onlink_sets_rtnh_f_onlink_in_rtm_flags() {
        let r = default_via("10.9.9.9", 4);
        let at = Placement {
            table: MAIN_TABLE,
            onlink: true,
        };
        for delete in [false, true] {
            let bytes = route_request_in(0, &r, delete, at).finish(1);
            let flags = u32_at(&bytes[wire::NLMSG_HDRLEN..], 8);
            assert_eq!(flags, Some(RTNH_F_ONLINK));
        }
        let plain = route_request(0, &r, false).finish(1);
        assert_eq!(u32_at(&plain[wire::NLMSG_HDRLEN..], 8), Some(0));
    }

    #[test]
    fn table_zero_is_refused_and_named_tables_read_well() {
        assert!(matches!(check_table(0), Err(HostError::Invalid(_))));
        assert!(check_table(MAIN_TABLE).is_ok());
        assert_eq!(table_text(MAIN_TABLE), "");
        assert_eq!(table_text(LOCAL_TABLE), " table local");
        assert_eq!(table_text(4242), " table 4242");
    }
}
