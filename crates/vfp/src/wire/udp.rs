//! UDP datagram headers (RFC 768).

use super::{WireError, be16, checksum, need, proto, put16};
use std::net::IpAddr;

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;
/// Offset of the checksum field.
pub const CHECKSUM_OFFSET: usize = 6;

/// A read/write view of a UDP datagram; `new_checked` guarantees that the length field is
/// consistent with the buffer.
#[derive(Debug)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Validates the length field against the buffer.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        need(b, HEADER_LEN)?;
        let len = usize::from(be16(b, 4));
        if len < HEADER_LEN {
            return Err(WireError::Malformed);
        }
        need(b, len)?;
        Ok(UdpPacket { buf })
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

    /// Length of header and payload.
    pub fn len(&self) -> usize {
        usize::from(be16(self.b(), 4))
    }

    /// True if the datagram has no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }

    /// Checksum field; 0 means "not computed" (IPv4 only).
    pub fn checksum(&self) -> u16 {
        be16(self.b(), CHECKSUM_OFFSET)
    }

    /// Payload up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.len()]
    }

    /// True when the checksum is absent (0) or correct.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        if self.checksum() == 0 {
            return src.is_ipv4();
        }
        let seg = &self.b()[..self.len()];
        let acc = checksum::pseudo_header(src, dst, proto::UDP, seg.len() as u32);
        checksum::fold(checksum::sum(acc, seg)) == 0xffff
    }
}

/// The fields of a UDP datagram, payload included.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

impl UdpRepr {
    /// Reads a checked datagram; `Malformed` if the checksum is wrong.
    pub fn parse<T: AsRef<[u8]>>(
        p: &UdpPacket<T>,
        src: IpAddr,
        dst: IpAddr,
    ) -> Result<UdpRepr, WireError> {
        if !p.verify_checksum(src, dst) {
            return Err(WireError::Malformed);
        }
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload: p.payload().to_vec(),
        })
    }

    /// Bytes of header and payload.
    pub fn len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// True if there is no payload; a header is still emitted.
    pub fn is_empty(&self) -> bool {
        self.payload.is_empty()
    }

    /// Writes the datagram with a correct checksum for the given addresses.
    pub fn emit(&self, buf: &mut [u8], src: IpAddr, dst: IpAddr) -> Result<(), WireError> {
        let len = self.len();
        need(buf, len)?;
        let len16 = u16::try_from(len).map_err(|_| WireError::Malformed)?;
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put16(buf, 4, len16);
        put16(buf, CHECKSUM_OFFSET, 0);
        buf[HEADER_LEN..len].copy_from_slice(&self.payload);
        let c = checksum::l4(src, dst, proto::UDP, &buf[..len]);
        // A computed zero is sent as all ones: zero means "no checksum" (RFC 768).
        put16(buf, CHECKSUM_OFFSET, if c == 0 { 0xffff } else { c });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_over_ipv6_with_checksum() {
        let (s, d): (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        let r = UdpRepr {
            src_port: 53,
            dst_port: 5353,
            payload: b"hello".to_vec(),
        };
        let mut buf = vec![0u8; r.len() + 3]; // trailing bytes beyond the length field
        r.emit(&mut buf, s, d).unwrap();
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p, s, d).unwrap(), r);
    }

    #[test]
    fn zero_checksum_is_only_accepted_over_ipv4() {
        let b = [0, 1, 0, 2, 0, 8, 0, 0];
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum("1.1.1.1".parse().unwrap(), "2.2.2.2".parse().unwrap()));
        assert!(!p.verify_checksum("::1".parse().unwrap(), "::2".parse().unwrap()));
    }
}
