//! ICMP for IPv6 (RFC 4443) and the neighbour-discovery messages the switch answers (RFC 4861).

use super::ethernet::mac_at;
use super::ipv6::addr_at;
use super::{MacAddr, WireError, be16, checksum, need, proto, put16};
use std::net::{IpAddr, Ipv6Addr};

/// Length of the ICMPv6 header (type, code, checksum, 4 bytes).
pub const HEADER_LEN: usize = 8;
/// Offset of the checksum field.
pub const CHECKSUM_OFFSET: usize = 2;
/// Destination unreachable.
pub const DEST_UNREACHABLE: u8 = 1;
/// Packet too big.
pub const PACKET_TOO_BIG: u8 = 2;
/// Time exceeded.
pub const TIME_EXCEEDED: u8 = 3;
/// Parameter problem.
pub const PARAM_PROBLEM: u8 = 4;
/// Echo request.
pub const ECHO_REQUEST: u8 = 128;
/// Echo reply.
pub const ECHO_REPLY: u8 = 129;
/// Router solicitation.
pub const ROUTER_SOLICIT: u8 = 133;
/// Neighbour solicitation.
pub const NEIGHBOR_SOLICIT: u8 = 135;
/// Neighbour advertisement.
pub const NEIGHBOR_ADVERT: u8 = 136;
/// Redirect (the last neighbour-discovery type).
pub const REDIRECT: u8 = 137;

/// True for error messages, which embed the offending packet.
pub fn is_error(ty: u8) -> bool {
    ty < 128
}

/// True for the neighbour-discovery messages (router/neighbour solicitation and
/// advertisement, redirect), which the switch forwards at layer 2 without the layers.
pub fn is_neighbor_discovery(ty: u8) -> bool {
    (ROUTER_SOLICIT..=REDIRECT).contains(&ty)
}

/// A read/write view of an ICMPv6 message.
#[derive(Debug)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Checks that the 8-byte header is present.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        need(buf.as_ref(), HEADER_LEN)?;
        Ok(Icmpv6Packet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.b()[0]
    }

    /// Code.
    pub fn code(&self) -> u8 {
        self.b()[1]
    }

    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// Echo sequence number.
    pub fn echo_seq(&self) -> u16 {
        be16(self.b(), 6)
    }

    /// The data after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }

    /// The target address of a neighbour solicitation or advertisement.
    pub fn nd_target(&self) -> Result<Ipv6Addr, WireError> {
        need(self.b(), HEADER_LEN + 16)?;
        Ok(addr_at(self.b(), HEADER_LEN))
    }

    /// True when the checksum over pseudo-header and message is correct.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.b();
        let acc = checksum::pseudo_header(src.into(), dst.into(), proto::ICMPV6, b.len() as u32);
        checksum::fold(checksum::sum(acc, b)) == 0xffff
    }
}

/// The fields of an ICMPv6 message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Icmpv6Repr {
    /// Echo request or reply.
    Echo {
        /// True for a request.
        request: bool,
        /// Identifier, which NAT treats as a port.
        ident: u16,
        /// Sequence number.
        seq: u16,
        /// Echo data.
        data: Vec<u8>,
    },
    /// Neighbour solicitation with an optional source link-layer address option.
    NeighborSolicit {
        /// Address being resolved.
        target: Ipv6Addr,
        /// Sender's link-layer address.
        source_mac: Option<MacAddr>,
    },
    /// Neighbour advertisement with a target link-layer address option.
    NeighborAdvert {
        /// Router flag.
        router: bool,
        /// Solicited flag.
        solicited: bool,
        /// Override flag.
        override_: bool,
        /// Address being advertised.
        target: Ipv6Addr,
        /// Its link-layer address.
        target_mac: Option<MacAddr>,
    },
    /// Any other message; errors carry the embedded packet in `data`.
    Other {
        /// Type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// The four bytes after the checksum.
        rest: [u8; 4],
        /// Everything after the header.
        data: Vec<u8>,
    },
}

/// Reads a single link-layer address option (type `want`, length 1 unit) if it is the first one.
fn ll_option(opts: &[u8], want: u8) -> Option<MacAddr> {
    (opts.len() >= 8 && opts[0] == want && opts[1] == 1).then(|| mac_at(opts, 2))
}

impl Icmpv6Repr {
    /// Reads a message; `Malformed` if the checksum is wrong.
    pub fn parse<T: AsRef<[u8]>>(
        p: &Icmpv6Packet<T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) -> Result<Icmpv6Repr, WireError> {
        if !p.verify_checksum(src, dst) {
            return Err(WireError::Malformed);
        }
        let b = p.b();
        Ok(match (p.msg_type(), p.code()) {
            (t @ (ECHO_REQUEST | ECHO_REPLY), 0) => Icmpv6Repr::Echo {
                request: t == ECHO_REQUEST,
                ident: p.echo_ident(),
                seq: p.echo_seq(),
                data: p.data().to_vec(),
            },
            (NEIGHBOR_SOLICIT, 0) if b.len() == 24 || b.len() == 32 => {
                Icmpv6Repr::NeighborSolicit {
                    target: p.nd_target()?,
                    source_mac: ll_option(&b[24..], 1),
                }
                .check_canonical(b.len())?
            }
            (NEIGHBOR_ADVERT, 0) if b.len() == 24 || b.len() == 32 => Icmpv6Repr::NeighborAdvert {
                router: b[4] & 0x80 != 0,
                solicited: b[4] & 0x40 != 0,
                override_: b[4] & 0x20 != 0,
                target: p.nd_target()?,
                target_mac: ll_option(&b[24..], 2),
            }
            .check_canonical(b.len())?,
            (msg_type, code) => Icmpv6Repr::Other {
                msg_type,
                code,
                rest: [b[4], b[5], b[6], b[7]],
                data: p.data().to_vec(),
            },
        })
    }

    /// Neighbour messages whose options are not the one link-layer option this parser models
    /// are reported `Unsupported` rather than silently losing bytes.
    fn check_canonical(self, len: usize) -> Result<Self, WireError> {
        if len != self.len() {
            return Err(WireError::Unsupported);
        }
        Ok(self)
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        match self {
            Icmpv6Repr::Echo { data, .. } | Icmpv6Repr::Other { data, .. } => {
                HEADER_LEN + data.len()
            }
            Icmpv6Repr::NeighborSolicit { source_mac: m, .. }
            | Icmpv6Repr::NeighborAdvert { target_mac: m, .. } => {
                24 + if m.is_some() { 8 } else { 0 }
            }
        }
    }

    /// Never true: a message always has its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the message with a correct checksum for the given addresses.
    pub fn emit(&self, buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) -> Result<(), WireError> {
        let len = self.len();
        need(buf, len)?;
        buf[..HEADER_LEN].fill(0);
        match self {
            Icmpv6Repr::Echo {
                request,
                ident,
                seq,
                data,
            } => {
                buf[0] = if *request { ECHO_REQUEST } else { ECHO_REPLY };
                put16(buf, 4, *ident);
                put16(buf, 6, *seq);
                buf[HEADER_LEN..len].copy_from_slice(data);
            }
            Icmpv6Repr::NeighborSolicit { target, source_mac } => {
                buf[0] = NEIGHBOR_SOLICIT;
                emit_nd(buf, *target, 1, *source_mac);
            }
            Icmpv6Repr::NeighborAdvert {
                router,
                solicited,
                override_,
                target,
                target_mac,
            } => {
                buf[0] = NEIGHBOR_ADVERT;
                buf[4] = (u8::from(*router) << 7)
                    | (u8::from(*solicited) << 6)
                    | (u8::from(*override_) << 5);
                emit_nd(buf, *target, 2, *target_mac);
            }
            Icmpv6Repr::Other {
                msg_type,
                code,
                rest,
                data,
            } => {
                buf[0] = *msg_type;
                buf[1] = *code;
                buf[4..8].copy_from_slice(rest);
                buf[HEADER_LEN..len].copy_from_slice(data);
            }
        }
        let c = checksum::l4(IpAddr::V6(src), IpAddr::V6(dst), proto::ICMPV6, &buf[..len]);
        put16(buf, CHECKSUM_OFFSET, c);
        Ok(())
    }
}

fn emit_nd(buf: &mut [u8], target: Ipv6Addr, opt: u8, mac: Option<MacAddr>) {
    buf[8..24].copy_from_slice(&target.octets());
    if let Some(m) = mac {
        buf[24] = opt;
        buf[25] = 1;
        buf[26..32].copy_from_slice(&m.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbor_solicit_round_trips() {
        let (s, d): (Ipv6Addr, Ipv6Addr) = (
            "fd00::5".parse().unwrap(),
            "ff02::1:ff00:1".parse().unwrap(),
        );
        let r = Icmpv6Repr::NeighborSolicit {
            target: "fd00::1".parse().unwrap(),
            source_mac: Some(MacAddr([2, 0, 0, 0, 0, 5])),
        };
        let mut buf = vec![0u8; r.len()];
        r.emit(&mut buf, s, d).unwrap();
        assert_eq!(&buf[24..26], &[1, 1]);
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, s, d).unwrap(), r);
    }

    #[test]
    fn echo_checksum_covers_pseudo_header() {
        let (s, d): (Ipv6Addr, Ipv6Addr) = ("fd00::5".parse().unwrap(), "fd00::6".parse().unwrap());
        let r = Icmpv6Repr::Echo {
            request: true,
            ident: 7,
            seq: 9,
            data: vec![1, 2, 3],
        };
        let mut buf = vec![0u8; r.len()];
        r.emit(&mut buf, s, d).unwrap();
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(s, d));
        assert!(!p.verify_checksum(s, "fd00::7".parse().unwrap()));
    }
}
