//! TCP segment headers (RFC 9293).

use super::{WireError, be16, be32, checksum, need, proto, put16, put32};
use std::net::IpAddr;

/// Length of a TCP header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// Offset of the checksum field.
pub const CHECKSUM_OFFSET: usize = 16;

/// TCP control flags as they appear in byte 13 of the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronise sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;

    /// True if every bit of `bits` is set.
    pub fn has(self, bits: u8) -> bool {
        self.0 & bits == bits
    }
}

/// A read/write view of a TCP segment; `new_checked` guarantees the header and options fit.
#[derive(Debug)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Validates the data offset against the buffer.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        need(b, MIN_HEADER_LEN)?;
        let hl = usize::from(b[12] >> 4) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(WireError::Malformed);
        }
        need(b, hl)?;
        Ok(TcpPacket { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.b(), 4)
    }

    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        be32(self.b(), 8)
    }

    /// Header length in bytes (data offset).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[12] >> 4) * 4
    }

    /// Control flags.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.b()[13])
    }

    /// Receive window.
    pub fn window(&self) -> u16 {
        be16(self.b(), 14)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), CHECKSUM_OFFSET)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.b(), 18)
    }

    /// Option bytes.
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }

    /// The timestamp option (RFC 7323): (TSval, TSecr), if the segment carries one. Malformed
    /// option lists end the search rather than fail.
    pub fn timestamp(&self) -> Option<(u32, u32)> {
        let mut o = self.options();
        while let [kind, rest @ ..] = o {
            match kind {
                0 => return None,
                1 => o = rest,
                _ => {
                    let len = usize::from(*rest.first()?);
                    if len < 2 || len > o.len() {
                        return None;
                    }
                    if *kind == 8 && len == 10 {
                        return Some((be32(o, 2), be32(o, 6)));
                    }
                    o = &o[len..];
                }
            }
        }
        None
    }

    /// Segment payload.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }

    /// True when the checksum over the pseudo-header and the whole segment is correct.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        let b = self.b();
        let acc = checksum::pseudo_header(src, dst, proto::TCP, b.len() as u32);
        checksum::fold(checksum::sum(acc, b)) == 0xffff
    }
}

/// The fields of a TCP segment, payload included.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Control flags.
    pub flags: TcpFlags,
    /// Receive window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options, padded by the caller to a multiple of 4 bytes, at most 40.
    pub options: Vec<u8>,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

impl TcpRepr {
    /// A segment with the given ports and flags and no options or payload.
    pub fn new(src_port: u16, dst_port: u16, flags: u8) -> TcpRepr {
        TcpRepr {
            src_port,
            dst_port,
            seq: 0,
            ack: 0,
            flags: TcpFlags(flags),
            window: 65535,
            urgent: 0,
            options: Vec::new(),
            payload: Vec::new(),
        }
    }

    /// Reads a checked segment; `Malformed` if the checksum is wrong.
    pub fn parse<T: AsRef<[u8]>>(
        p: &TcpPacket<T>,
        src: IpAddr,
        dst: IpAddr,
    ) -> Result<TcpRepr, WireError> {
        if !p.verify_checksum(src, dst) {
            return Err(WireError::Malformed);
        }
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
            options: p.options().to_vec(),
            payload: p.payload().to_vec(),
        })
    }

    /// Bytes of header and payload.
    pub fn len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len() + self.payload.len()
    }

    /// True if the segment has neither options nor payload; a header is still emitted.
    pub fn is_empty(&self) -> bool {
        self.options.is_empty() && self.payload.is_empty()
    }

    /// Writes the segment with a correct checksum for the given addresses.
    pub fn emit(&self, buf: &mut [u8], src: IpAddr, dst: IpAddr) -> Result<(), WireError> {
        if !self.options.len().is_multiple_of(4) || self.options.len() > 40 {
            return Err(WireError::Malformed);
        }
        let len = self.len();
        need(buf, len)?;
        let hl = MIN_HEADER_LEN + self.options.len();
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put32(buf, 4, self.seq);
        put32(buf, 8, self.ack);
        buf[12] = ((hl / 4) as u8) << 4;
        buf[13] = self.flags.0;
        put16(buf, 14, self.window);
        put16(buf, CHECKSUM_OFFSET, 0);
        put16(buf, 18, self.urgent);
        buf[MIN_HEADER_LEN..hl].copy_from_slice(&self.options);
        buf[hl..len].copy_from_slice(&self.payload);
        let c = checksum::l4(src, dst, proto::TCP, &buf[..len]);
        put16(buf, CHECKSUM_OFFSET, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syn_with_mss_round_trips_and_checksums() {
        let (s, d): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut r = TcpRepr::new(40000, 80, TcpFlags::SYN);
        r.seq = 1000;
        r.options = vec![2, 4, 0x05, 0xb4];
        let mut buf = vec![0u8; r.len()];
        r.emit(&mut buf, s, d).unwrap();
        let p = TcpPacket::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(s, d));
        assert_eq!(TcpRepr::parse(&p, s, d).unwrap(), r);
        buf[0] ^= 1;
        let p = TcpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(TcpRepr::parse(&p, s, d).unwrap_err(), WireError::Malformed);
    }

    #[test]
    fn the_timestamp_option_is_found_among_others_and_bad_lists_end_the_search() {
        let (s, d): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let ts = |options: Vec<u8>| {
            let mut r = TcpRepr::new(40000, 80, TcpFlags::SYN);
            r.options = options;
            let mut buf = vec![0u8; r.len()];
            r.emit(&mut buf, s, d).unwrap();
            TcpPacket::new_checked(&buf[..]).unwrap().timestamp()
        };
        // Linux's SYN: MSS, SACK permitted, timestamps, NOP, window scale.
        let linux = vec![
            2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 1, 2, 0, 0, 0, 3, 1, 3, 3, 10,
        ];
        assert_eq!(ts(linux), Some((258, 3)));
        assert_eq!(ts(vec![1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 0]), Some((9, 0)));
        assert_eq!(ts(vec![2, 4, 5, 0xb4]), None);
        assert_eq!(ts(vec![0, 0, 8, 10, 0, 0, 0, 9, 0, 0, 0, 0]), None);
        assert_eq!(ts(vec![2, 40, 8, 10]), None);
        assert_eq!(ts(vec![2, 0, 8, 10]), None);
    }

    #[test]
    fn data_offset_beyond_buffer_is_truncated() {
        let mut b = [0u8; 20];
        b[12] = 0xf0;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            WireError::Truncated
        );
        b[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            WireError::Malformed
        );
    }
}
