//! IPv6 headers (RFC 8200); extension headers are walked to find the upper-layer header.

use super::{WireError, be16, need, proto, put16};
use std::net::Ipv6Addr;

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;

/// At most this many extension headers are walked; a chain longer than that is refused so that
/// a crafted packet cannot make the parser loop for long.
const MAX_EXT_HEADERS: usize = 8;

/// Where the upper-layer header of an IPv6 packet starts, after any extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// The protocol of the upper-layer header.
    pub protocol: u8,
    /// Offset from the start of the IPv6 header.
    pub offset: usize,
    /// True when a fragment header says this is not the first fragment (no L4 header follows).
    pub later_fragment: bool,
    /// The fragment header's identification, if the packet is a fragment.
    pub fragment_id: Option<u32>,
}

/// A read/write view of an IPv6 packet. `new_checked` guarantees the fixed header and
/// `payload_len` bytes are in the buffer.
#[derive(Debug)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Validates version and payload length against the buffer.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        need(b, HEADER_LEN)?;
        if b[0] >> 4 != 6 {
            return Err(WireError::Malformed);
        }
        need(b, HEADER_LEN + usize::from(be16(b, 4)))?;
        Ok(Ipv6Packet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        let b = self.b();
        (b[0] << 4) | (b[1] >> 4)
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        let b = self.b();
        (u32::from(b[1] & 0x0f) << 16) | u32::from(be16(b, 2))
    }

    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> usize {
        usize::from(be16(self.b(), 4))
    }

    /// Next header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        addr_at(self.b(), 8)
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        addr_at(self.b(), 24)
    }

    /// The bytes after the fixed header, up to `payload_len`.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..HEADER_LEN + self.payload_len()]
    }

    /// Skips hop-by-hop, routing, fragment, destination-options and AH headers.
    pub fn upper_layer(&self) -> Result<UpperLayer, WireError> {
        let end = HEADER_LEN + self.payload_len();
        let b = &self.b()[..end];
        let mut next = self.next_header();
        let mut off = HEADER_LEN;
        let mut later_fragment = false;
        let mut fragment_id = None;
        for _ in 0..MAX_EXT_HEADERS {
            let len = match next {
                proto::HOP_BY_HOP | proto::ROUTING | proto::DEST_OPTS => {
                    need(b, off + 2)?;
                    (usize::from(b[off + 1]) + 1) * 8
                }
                proto::AUTH => {
                    need(b, off + 2)?;
                    (usize::from(b[off + 1]) + 2) * 4
                }
                proto::FRAGMENT => {
                    need(b, off + 8)?;
                    later_fragment = be16(b, off + 2) & 0xfff8 != 0;
                    fragment_id = Some(super::be32(b, off + 4));
                    8
                }
                protocol => {
                    return Ok(UpperLayer {
                        protocol,
                        offset: off,
                        later_fragment,
                        fragment_id,
                    });
                }
            };
            need(b, off + len)?;
            next = b[off];
            off += len;
        }
        Err(WireError::Unsupported)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// The bytes after the fixed header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + self.payload_len();
        &mut self.buf.as_mut()[HEADER_LEN..end]
    }
}

pub(crate) fn addr_at(b: &[u8], off: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[off..off + 16]);
    Ipv6Addr::from(a)
}

/// The fields of the fixed IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next header (first extension header or the upper-layer protocol).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label; only the low 20 bits are emitted.
    pub flow_label: u32,
    /// Bytes after the fixed header.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// A plain header (hop limit 64, no traffic class or flow label).
    pub fn simple(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload_len: usize) -> Self {
        Ipv6Repr {
            src,
            dst,
            next_header,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            payload_len,
        }
    }

    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Ipv6Repr {
        Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            payload_len: p.payload_len(),
        }
    }

    /// Writes the fixed header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        need(buf, HEADER_LEN)?;
        let len = u16::try_from(self.payload_len).map_err(|_| WireError::Malformed)?;
        let fl = self.flow_label & 0x000f_ffff;
        buf[0] = 0x60 | (self.traffic_class >> 4);
        buf[1] = (self.traffic_class << 4) | (fl >> 16) as u8;
        put16(buf, 2, fl as u16);
        put16(buf, 4, len);
        buf[6] = self.next_header;
        buf[7] = self.hop_limit;
        buf[8..24].copy_from_slice(&self.src.octets());
        buf[24..40].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet_with_ext_headers() -> Vec<u8> {
        let r = Ipv6Repr::simple(
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            0,
            24,
        );
        let mut buf = vec![0u8; HEADER_LEN + 24];
        r.emit(&mut buf).unwrap();
        // hop-by-hop (8 bytes) -> fragment (8 bytes, offset 0) -> UDP (8 bytes)
        buf[40] = proto::FRAGMENT;
        buf[41] = 0;
        buf[48] = proto::UDP;
        buf
    }

    #[test]
    fn extension_headers_are_skipped() {
        let buf = packet_with_ext_headers();
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        let ul = p.upper_layer().unwrap();
        assert_eq!(ul.protocol, proto::UDP);
        assert_eq!(ul.offset, 56);
        assert!(!ul.later_fragment);
        assert_eq!(Ipv6Repr::parse(&p).next_header, proto::HOP_BY_HOP);
    }

    #[test]
    fn later_fragment_and_truncated_chain() {
        let mut buf = packet_with_ext_headers();
        buf[50] = 0x05; // fragment offset 0x05xx >> 3 != 0
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert!(p.upper_layer().unwrap().later_fragment);
        buf[41] = 200; // hop-by-hop claims 1608 bytes
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.upper_layer().unwrap_err(), WireError::Truncated);
    }
}
