//! The netlink wire format, whatever the message: requests built from bytes and attributes,
//! replies split into messages and attributes, and the kernel's acknowledgements read. Pure: no
//! sockets. Reading never panics on malformed input; it returns a [`WireError`] naming what did
//! not fit. What the fixed headers and attributes of each message family mean is in the module
//! of that family ([`super::link`], [`super::route`], ...); each reads only the attributes it
//! uses and skips every other, so new kernel attributes never break a reply.

use std::net::IpAddr;

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
pub(crate) const RTM_NEWRULE: u16 = 32;
pub(crate) const RTM_DELRULE: u16 = 33;
pub(crate) const RTM_GETRULE: u16 = 34;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_REPLACE: u16 = 0x100;
pub(crate) const NLM_F_EXCL: u16 = 0x200;
pub(crate) const NLM_F_CREATE: u16 = 0x400;
/// On an error message: the echoed request is only its header.
pub(super) const NLM_F_CAPPED: u16 = 0x100;
/// On an error message: extended-ack attributes follow the echoed request.
pub(super) const NLM_F_ACK_TLVS: u16 = 0x200;
/// Extended-ack attribute: a human-readable message.
pub(super) const NLMSGERR_ATTR_MSG: u16 = 1;

pub(crate) const AF_INET: u8 = libc::AF_INET as u8;
pub(crate) const AF_INET6: u8 = libc::AF_INET6 as u8;

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

pub(super) const fn align4(n: usize) -> usize {
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

    /// Appends `bytes` as they are, padded to 4 bytes: a fixed header inside an attribute
    /// (the `ifinfomsg` that opens a veth's `VETH_INFO_PEER`).
    pub(crate) fn raw(mut self, bytes: &[u8]) -> Request {
        self.buf.extend_from_slice(bytes);
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

// ---- scalars ----

/// The address family (`AF_INET`, `AF_INET6`) of `ip`.
pub(crate) fn family_of(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { AF_INET } else { AF_INET6 }
}

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
