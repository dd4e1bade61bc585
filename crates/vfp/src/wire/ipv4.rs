//! IPv4 headers (RFC 791) with options and fragmentation fields.

use super::{WireError, be16, checksum, need, put16};
use std::net::Ipv4Addr;

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;

/// A read/write view of an IPv4 packet. `new_checked` guarantees that the header, its options
/// and `total_len` bytes are inside the buffer (trailing Ethernet padding is allowed).
#[derive(Debug)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Validates version, header length and total length against the buffer.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        need(b, MIN_HEADER_LEN)?;
        if b[0] >> 4 != 4 {
            return Err(WireError::Malformed);
        }
        let hl = usize::from(b[0] & 0x0f) * 4;
        let total = usize::from(be16(b, 2));
        if hl < MIN_HEADER_LEN || total < hl {
            return Err(WireError::Malformed);
        }
        need(b, total)?;
        Ok(Ipv4Packet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Header length in bytes, options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }

    /// The DSCP/ECN byte (formerly type of service).
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }

    /// Total length of header and payload.
    pub fn total_len(&self) -> usize {
        usize::from(be16(self.b(), 2))
    }

    /// Identification (ties fragments of one datagram together).
    pub fn ident(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }

    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.b(), 6) & 0x1fff) * 8
    }

    /// True for fragments after the first, which carry no L4 header.
    pub fn is_later_fragment(&self) -> bool {
        self.frag_offset() != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }

    /// Payload protocol number.
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 10)
    }

    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }

    /// The option bytes between the fixed header and the payload.
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }

    /// The payload, up to `total_len` (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }

    /// True when the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(0, &self.b()[..self.header_len()])) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Recomputes the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buf.as_mut();
        put16(b, 10, 0);
        let c = checksum::compute(&b[..hl]);
        put16(b, 10, c);
    }

    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len());
        &mut self.buf.as_mut()[hl..tl]
    }
}

/// The fields of an IPv4 header.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol.
    pub protocol: u8,
    /// Time to live.
    pub ttl: u8,
    /// DSCP/ECN byte.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Fragment offset in bytes; a multiple of 8.
    pub frag_offset: u16,
    /// Raw options, padded by the caller to a multiple of 4 bytes, at most 40.
    pub options: Vec<u8>,
    /// Bytes of payload after the header.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// A plain header (no options, not fragmented, TTL 64).
    pub fn simple(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, payload_len: usize) -> Ipv4Repr {
        Ipv4Repr {
            src,
            dst,
            protocol,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options: Vec::new(),
            payload_len,
        }
    }

    /// Reads a checked packet; `Malformed` if the checksum is wrong.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Ipv4Repr, WireError> {
        if !p.verify_checksum() {
            return Err(WireError::Malformed);
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
            options: p.options().to_vec(),
            payload_len: p.total_len() - p.header_len(),
        })
    }

    /// Header length on the wire.
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len()
    }

    /// Writes the header (with a correct checksum) at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let hl = self.header_len();
        if !self.options.len().is_multiple_of(4)
            || self.options.len() > 40
            || !self.frag_offset.is_multiple_of(8)
        {
            return Err(WireError::Malformed);
        }
        let total = u16::try_from(hl + self.payload_len).map_err(|_| WireError::Malformed)?;
        need(buf, hl)?;
        buf[0] = 0x40 | (hl / 4) as u8;
        buf[1] = self.tos;
        put16(buf, 2, total);
        put16(buf, 4, self.ident);
        let flags = (u16::from(self.dont_frag) << 14) | (u16::from(self.more_frags) << 13);
        put16(buf, 6, flags | (self.frag_offset / 8));
        buf[8] = self.ttl;
        buf[9] = self.protocol;
        put16(buf, 10, 0);
        buf[12..16].copy_from_slice(&self.src.octets());
        buf[16..20].copy_from_slice(&self.dst.octets());
        buf[20..hl].copy_from_slice(&self.options);
        let c = checksum::compute(&buf[..hl]);
        put16(buf, 10, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_with_options_round_trips() {
        let mut r = Ipv4Repr::simple(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), 6, 4);
        r.options = vec![0x94, 0x04, 0, 0]; // router alert
        r.more_frags = true;
        r.ident = 77;
        let mut buf = vec![0u8; r.header_len() + 4];
        r.emit(&mut buf).unwrap();
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn bad_lengths_are_rejected() {
        let mut b = [0u8; 20];
        b[0] = 0x45;
        b[3] = 60; // total length beyond the buffer
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::Truncated
        );
        b[0] = 0x44; // header length 16 < 20
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::Malformed
        );
        b[0] = 0x65; // version 6
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            WireError::Malformed
        );
    }

    #[test]
    fn later_fragment_is_recognised() {
        let mut r = Ipv4Repr::simple(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 17, 8);
        r.frag_offset = 1480;
        r.dont_frag = false;
        let mut buf = vec![0u8; 28];
        r.emit(&mut buf).unwrap();
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert!(p.is_later_fragment());
        assert_eq!(p.frag_offset(), 1480);
    }
}
