//! The rtnetlink wire format: requests built from typed values, and replies read into the
//! types of [`crate::link`]. Pure: no sockets. Reading never panics on malformed input; it
//! returns a [`WireError`] naming what did not fit. Only the attributes this crate uses are
//! read; every other attribute is skipped, so new kernel attributes never break a reply.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::link::{Address, Link, Neighbor, RouteEntry};

/// `struct nlmsghdr`: length, type, flags, sequence number, port id.
pub(crate) const NLMSG_HDRLEN: usize = 16;
/// `struct nlattr`: length and type.
pub(crate) const NLA_HDRLEN: usize = 4;
/// Attribute type bits (the top two are the nested and byte-order flags).
const NLA_TYPE_MASK: u16 = 0x3FFF;
/// Attribute type flag: the value is itself attributes.
const NLA_F_NESTED: u16 = 0x8000;

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;

pub(crate) const RTM_NEWLINK: u16 = 16;
pub(crate) const RTM_DELLINK: u16 = 17;
pub(crate) const RTM_GETLINK: u16 = 18;
pub(crate) const RTM_NEWADDR: u16 = 20;
pub(crate) const RTM_DELADDR: u16 = 21;
pub(crate) const RTM_GETADDR: u16 = 22;
pub(crate) const RTM_NEWROUTE: u16 = 24;
pub(crate) const RTM_DELROUTE: u16 = 25;
pub(crate) const RTM_GETROUTE: u16 = 26;
pub(crate) const RTM_NEWNEIGH: u16 = 28;
pub(crate) const RTM_DELNEIGH: u16 = 29;
pub(crate) const RTM_GETNEIGH: u16 = 30;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_REPLACE: u16 = 0x100;
pub(crate) const NLM_F_EXCL: u16 = 0x200;
pub(crate) const NLM_F_CREATE: u16 = 0x400;
/// On an error message: the echoed request is only its header.
const NLM_F_CAPPED: u16 = 0x100;
/// On an error message: extended-ack attributes follow the echoed request.
const NLM_F_ACK_TLVS: u16 = 0x200;
/// Extended-ack attribute: a human-readable message.
const NLMSGERR_ATTR_MSG: u16 = 1;

pub(crate) const AF_INET: u8 = libc::AF_INET as u8;
pub(crate) const AF_INET6: u8 = libc::AF_INET6 as u8;

const IFF_UP: u32 = libc::IFF_UP as u32;
pub(crate) const IFLA_ADDRESS: u16 = 1;
pub(crate) const IFLA_IFNAME: u16 = 3;
pub(crate) const IFLA_MTU: u16 = 4;
pub(crate) const IFLA_EXT_MASK: u16 = 29;
pub(crate) const IFLA_GSO_MAX_SIZE: u16 = 41;
/// `IFLA_EXT_MASK` value: leave the counters out of link dumps.
pub(crate) const RTEXT_FILTER_SKIP_STATS: u32 = 1 << 3;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_BROADCAST: u16 = 4;

pub(crate) const RTA_DST: u16 = 1;
pub(crate) const RTA_OIF: u16 = 4;
pub(crate) const RTA_GATEWAY: u16 = 5;
pub(crate) const RTA_PRIORITY: u16 = 6;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
const RT_TABLE_MAIN: u8 = 254;
const RTN_UNICAST: u8 = 1;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_LINK: u8 = 253;
const RT_SCOPE_NOWHERE: u8 = 255;
/// Route flag: a cached clone (PMTU exceptions and the like), not a configured route.
const RTM_F_CLONED: u32 = 0x200;
/// `struct rtnexthop`: length, flags, hops, ifindex.
const RTNH_LEN: usize = 8;

pub(crate) const NDA_DST: u16 = 1;
pub(crate) const NDA_LLADDR: u16 = 2;
pub(crate) const NUD_PERMANENT: u16 = 0x80;
/// States in which a neighbour's MAC can be used: REACHABLE, STALE, DELAY, PROBE, NOARP,
/// PERMANENT.
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x40 | 0x80;

/// Sizes of the fixed headers that follow `nlmsghdr`.
pub(crate) const IFINFOMSG_LEN: usize = 16;
const IFADDRMSG_LEN: usize = 8;
pub(crate) const RTMSG_LEN: usize = 12;
pub(crate) const NDMSG_LEN: usize = 12;

/// A reply, or a part of one, that does not have the shape the kernel's ABI promises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) fn malformed(what: impl Into<String>) -> WireError {
    WireError(what.into())
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// A netlink request being built: header, fixed part, attributes.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    buf: Vec<u8>,
}

impl Request {
    /// A request of type `kind` with `flags` (NLM_F_REQUEST is added) and the fixed header
    /// `fixed` (ifinfomsg, rtmsg, ...).
    pub(crate) fn new(kind: u16, flags: u16, fixed: &[u8]) -> Request {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&0u32.to_ne_bytes());
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&(flags | NLM_F_REQUEST).to_ne_bytes());
        buf.extend_from_slice(&[0; 8]);
        buf.extend_from_slice(fixed);
        buf.resize(align4(buf.len()), 0);
        Request { buf }
    }

    /// Appends attribute `kind` with `value`.
    pub(crate) fn attr(mut self, kind: u16, value: &[u8]) -> Request {
        let len = (NLA_HDRLEN + value.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.buf.resize(align4(self.buf.len()), 0);
        self
    }

    pub(crate) fn attr_u32(self, kind: u16, value: u32) -> Request {
        self.attr(kind, &value.to_ne_bytes())
    }

    /// Appends a NUL-terminated string attribute.
    pub(crate) fn attr_str(self, kind: u16, value: &str) -> Request {
        let mut v = Vec::with_capacity(value.len() + 1);
        v.extend_from_slice(value.as_bytes());
        v.push(0);
        self.attr(kind, &v)
    }

    pub(crate) fn attr_ip(self, kind: u16, ip: IpAddr) -> Request {
        match ip {
            IpAddr::V4(a) => self.attr(kind, &a.octets()),
            IpAddr::V6(a) => self.attr(kind, &a.octets()),
        }
    }

    /// Appends a nested attribute `kind` whose value is the attributes `build` appends.
    pub(crate) fn nested(mut self, kind: u16, build: impl FnOnce(Request) -> Request) -> Request {
        let start = self.buf.len();
        self.buf.extend_from_slice(&[0; NLA_HDRLEN]);
        let mut inner = build(self);
        let len = (inner.buf.len() - start) as u16;
        inner.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        inner.buf[start + 2..start + 4].copy_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        inner
    }

    /// Sets the 32-bit word at `offset` of the fixed header (after `nlmsghdr`), e.g. the
    /// `rtm_flags` of an `rtmsg`.
    pub(crate) fn set_fixed_u32(mut self, offset: usize, value: u32) -> Request {
        let at = NLMSG_HDRLEN + offset;
        if let Some(word) = self.buf.get_mut(at..at + 4) {
            word.copy_from_slice(&value.to_ne_bytes());
        }
        self
    }

    /// The bytes to send, with the length and sequence number filled in.
    pub(crate) fn finish(mut self, seq: u32) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.buf
    }
}

/// One message of a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Message<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub port: u32,
    /// What follows the `nlmsghdr`.
    pub payload: &'a [u8],
}

/// The messages of one datagram, in order.
pub(crate) struct Messages<'a> {
    rest: &'a [u8],
}

/// Reads the messages of one datagram.
pub(crate) fn messages(buf: &[u8]) -> Messages<'_> {
    Messages { rest: buf }
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = self.rest;
        let (Some(len), Some(kind), Some(flags), Some(seq), Some(port)) = (
            u32_at(rest, 0),
            u16_at(rest, 4),
            u16_at(rest, 6),
            u32_at(rest, 8),
            u32_at(rest, 12),
        ) else {
            self.rest = &[];
            return Some(Err(malformed(format!(
                "{} bytes left over after the last netlink message",
                rest.len()
            ))));
        };
        let len = len as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            self.rest = &[];
            return Some(Err(malformed(format!(
                "netlink message length {len} outside 16..={}",
                rest.len()
            ))));
        }
        self.rest = rest.get(align4(len)..).unwrap_or(&[]);
        Some(Ok(Message {
            kind,
            flags,
            seq,
            port,
            payload: &rest[NLMSG_HDRLEN..len],
        }))
    }
}

/// The attributes in `buf`, as (type without flag bits, value).
pub(crate) struct Attrs<'a> {
    rest: &'a [u8],
}

pub(crate) fn attrs(buf: &[u8]) -> Attrs<'_> {
    Attrs { rest: buf }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<(u16, &'a [u8]), WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = self.rest;
        let (Some(len), Some(kind)) = (u16_at(rest, 0), u16_at(rest, 2)) else {
            self.rest = &[];
            return Some(Err(malformed(format!(
                "{} bytes left over after the last attribute",
                rest.len()
            ))));
        };
        let len = usize::from(len);
        if len < NLA_HDRLEN || len > rest.len() {
            self.rest = &[];
            return Some(Err(malformed(format!(
                "attribute {kind} length {len} outside 4..={}",
                rest.len()
            ))));
        }
        self.rest = rest.get(align4(len)..).unwrap_or(&[]);
        Some(Ok((kind & NLA_TYPE_MASK, &rest[NLA_HDRLEN..len])))
    }
}

/// What an `NLMSG_ERROR` message says: an acknowledgement (errno 0) or a refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ack {
    /// The errno, positive; 0 for success.
    pub errno: i32,
    /// The kernel's extended message, when it gave one.
    pub message: Option<String>,
}

/// Reads the payload of an `NLMSG_ERROR` message whose header flags are `flags`.
pub(crate) fn parse_ack(flags: u16, payload: &[u8]) -> Result<Ack, WireError> {
    let code = i32_at(payload, 0).ok_or_else(|| malformed("netlink error message too short"))?;
    let errno = code.checked_neg().unwrap_or(i32::MAX);
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        // After the code comes the request: its header only when capped, else all of it.
        let echoed = if flags & NLM_F_CAPPED != 0 {
            NLMSG_HDRLEN
        } else {
            u32_at(payload, 4)
                .map(|l| l as usize)
                .ok_or_else(|| malformed("netlink error message without the request"))?
        };
        let tlvs = payload
            .get(align4(4 + echoed)..)
            .ok_or_else(|| malformed("netlink error message shorter than the request it echoes"))?;
        for a in attrs(tlvs) {
            let (kind, value) = a?;
            if kind == NLMSGERR_ATTR_MSG {
                let text = c_string(value);
                if !text.is_empty() {
                    message = Some(text);
                }
            }
        }
    }
    Ok(Ack { errno, message })
}

/// Reads the payload of an `NLMSG_DONE` message: a dump that failed part-way says why.
pub(crate) fn parse_done(flags: u16, payload: &[u8]) -> Result<Ack, WireError> {
    if payload.len() < 4 {
        return Ok(Ack {
            errno: 0,
            message: None,
        });
    }
    let code = i32_at(payload, 0).unwrap_or(0);
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 {
        for a in attrs(payload.get(4..).unwrap_or(&[])) {
            let (kind, value) = a?;
            if kind == NLMSGERR_ATTR_MSG {
                message = Some(c_string(value));
            }
        }
    }
    Ok(Ack {
        errno: code.checked_neg().unwrap_or(i32::MAX),
        message,
    })
}

// ---- links ----

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

/// Reads an `RTM_NEWLINK` payload.
pub(crate) fn parse_link(payload: &[u8]) -> Result<Link, WireError> {
    let fixed = payload
        .get(..IFINFOMSG_LEN)
        .ok_or_else(|| malformed("link message shorter than struct ifinfomsg"))?;
    let index = u32_at(fixed, 4).unwrap_or(0);
    let flags = u32_at(fixed, 8).unwrap_or(0);
    let (mut name, mut mac, mut mtu) = (None, None, 0);
    for a in attrs(&payload[IFINFOMSG_LEN..]) {
        let (kind, value) = a?;
        match kind {
            IFLA_IFNAME => name = Some(c_string(value)),
            IFLA_ADDRESS => mac = <[u8; 6]>::try_from(value).ok(),
            IFLA_MTU => mtu = u32_of(value).ok_or_else(|| malformed("IFLA_MTU not 4 bytes"))?,
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
    })
}

// ---- addresses ----

pub(crate) fn family_of(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { AF_INET } else { AF_INET6 }
}

/// An `RTM_NEWADDR` or `RTM_DELADDR` request for `net` on link `index`. IPv4 addresses get
/// the subnet's broadcast address, as `ip addr add ... brd +` and network managers set it.
pub(crate) fn address_request(kind: u16, flags: u16, index: u32, net: IpNet) -> Request {
    let mut fixed = [0u8; IFADDRMSG_LEN];
    fixed[0] = family_of(net.addr());
    fixed[1] = net.prefix_len();
    fixed[4..8].copy_from_slice(&index.to_ne_bytes());
    let mut req = Request::new(kind, flags, &fixed)
        .attr_ip(IFA_LOCAL, net.addr())
        .attr_ip(IFA_ADDRESS, net.addr());
    if let IpNet::V4(v4) = net
        && kind == RTM_NEWADDR
        && v4.prefix_len() <= 30
    {
        req = req.attr_ip(IFA_BROADCAST, IpAddr::V4(v4.broadcast()));
    }
    req
}

/// The fixed part of an address dump request (all families).
pub(crate) fn ifaddrmsg_dump() -> [u8; IFADDRMSG_LEN] {
    [0; IFADDRMSG_LEN]
}

/// Reads an `RTM_NEWADDR` payload; `None` for families other than IPv4 and IPv6.
pub(crate) fn parse_address(payload: &[u8]) -> Result<Option<Address>, WireError> {
    let fixed = payload
        .get(..IFADDRMSG_LEN)
        .ok_or_else(|| malformed("address message shorter than struct ifaddrmsg"))?;
    let (family, prefix_len) = (fixed[0], fixed[1]);
    let index = u32_at(fixed, 4).unwrap_or(0);
    if family != AF_INET && family != AF_INET6 {
        return Ok(None);
    }
    let (mut local, mut address) = (None, None);
    for a in attrs(&payload[IFADDRMSG_LEN..]) {
        let (kind, value) = a?;
        match kind {
            IFA_LOCAL => local = Some(ip_of(family, value, "IFA_LOCAL")?),
            IFA_ADDRESS => address = Some(ip_of(family, value, "IFA_ADDRESS")?),
            _ => {}
        }
    }
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer's on point-to-point
    // links, and the only one IPv6 usually sends.
    let Some(ip) = local.or(address) else {
        return Ok(None);
    };
    let net = IpNet::new(ip, prefix_len)
        .map_err(|_| malformed(format!("address {ip} with prefix length {prefix_len}")))?;
    Ok(Some(Address { index, net }))
}

// ---- routes ----

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
    let kind = if delete { RTM_DELROUTE } else { RTM_NEWROUTE };
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

// ---- neighbours ----

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

// ---- scalars ----

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

pub(crate) fn u32_of(value: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(value.try_into().ok()?))
}

/// The text of a string attribute, up to its NUL.
pub(crate) fn c_string(value: &[u8]) -> String {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

/// An address of `family` from an attribute value, which must have the family's length.
pub(crate) fn ip_of(family: u8, value: &[u8], what: &str) -> Result<IpAddr, WireError> {
    let ip = if family == AF_INET {
        <[u8; 4]>::try_from(value).ok().map(IpAddr::from)
    } else {
        <[u8; 16]>::try_from(value).ok().map(IpAddr::from)
    };
    ip.ok_or_else(|| {
        malformed(format!(
            "{what} of {} bytes in an {} message",
            value.len(),
            if family == AF_INET { "IPv4" } else { "IPv6" }
        ))
    })
}

#[cfg(test)]
#[path = "nlmsg_tests.rs"]
mod tests;
