//! ICMP for IPv4 (RFC 792): echo with its identifier, and error messages that embed the
//! offending datagram's IP header and first 8 payload bytes (so that NAT can rewrite them).

use super::{WireError, be16, checksum, need, put16};

/// Length of the ICMP header (type, code, checksum, rest-of-header).
pub const HEADER_LEN: usize = 8;
/// Offset of the checksum field.
pub const CHECKSUM_OFFSET: usize = 2;
/// Echo reply type.
pub const ECHO_REPLY: u8 = 0;
/// Destination unreachable type.
pub const DEST_UNREACHABLE: u8 = 3;
/// Redirect type.
pub const REDIRECT: u8 = 5;
/// Echo request type.
pub const ECHO_REQUEST: u8 = 8;
/// Time exceeded type.
pub const TIME_EXCEEDED: u8 = 11;
/// Parameter problem type.
pub const PARAM_PROBLEM: u8 = 12;

/// True for the message types that carry an embedded datagram.
pub fn is_error(ty: u8) -> bool {
    matches!(
        ty,
        DEST_UNREACHABLE | 4 | REDIRECT | TIME_EXCEEDED | PARAM_PROBLEM
    )
}

/// A read/write view of an ICMPv4 message.
#[derive(Debug)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Checks that the 8-byte header is present.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        need(buf.as_ref(), HEADER_LEN)?;
        Ok(Icmpv4Packet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.b()[0]
    }

    /// Message code.
    pub fn code(&self) -> u8 {
        self.b()[1]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), CHECKSUM_OFFSET)
    }

    /// Echo identifier (bytes 4-5); meaningful for echo messages only.
    pub fn echo_ident(&self) -> u16 {
        be16(self.b(), 4)
    }

    /// Echo sequence number (bytes 6-7).
    pub fn echo_seq(&self) -> u16 {
        be16(self.b(), 6)
    }

    /// The four bytes after the checksum (identifier/sequence, MTU, pointer, gateway).
    pub fn rest(&self) -> [u8; 4] {
        let b = self.b();
        [b[4], b[5], b[6], b[7]]
    }

    /// The data after the header: echo data, or the embedded datagram of an error.
    pub fn data(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }

    /// True when the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::sum(0, self.b())) == 0xffff
    }
}

/// The fields of an ICMPv4 message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr {
    /// Echo request or reply (type 8 or 0).
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
    /// Any other message, errors included: `data` holds the embedded datagram of an error.
    Other {
        /// Message type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// The four bytes after the checksum.
        rest: [u8; 4],
        /// Everything after the header.
        data: Vec<u8>,
    },
}

impl Icmpv4Repr {
    /// Reads a message; `Malformed` if the checksum is wrong.
    pub fn parse<T: AsRef<[u8]>>(p: &Icmpv4Packet<T>) -> Result<Icmpv4Repr, WireError> {
        if !p.verify_checksum() {
            return Err(WireError::Malformed);
        }
        Ok(match (p.msg_type(), p.code()) {
            (t @ (ECHO_REQUEST | ECHO_REPLY), 0) => Icmpv4Repr::Echo {
                request: t == ECHO_REQUEST,
                ident: p.echo_ident(),
                seq: p.echo_seq(),
                data: p.data().to_vec(),
            },
            (msg_type, code) => Icmpv4Repr::Other {
                msg_type,
                code,
                rest: p.rest(),
                data: p.data().to_vec(),
            },
        })
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        HEADER_LEN
            + match self {
                Icmpv4Repr::Echo { data, .. } | Icmpv4Repr::Other { data, .. } => data.len(),
            }
    }

    /// Never true: a message always has its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the message with a correct checksum.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let len = self.len();
        need(buf, len)?;
        match self {
            Icmpv4Repr::Echo {
                request,
                ident,
                seq,
                data,
            } => {
                buf[0] = if *request { ECHO_REQUEST } else { ECHO_REPLY };
                buf[1] = 0;
                put16(buf, 4, *ident);
                put16(buf, 6, *seq);
                buf[HEADER_LEN..len].copy_from_slice(data);
            }
            Icmpv4Repr::Other {
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
        put16(buf, CHECKSUM_OFFSET, 0);
        let c = checksum::compute(&buf[..len]);
        put16(buf, CHECKSUM_OFFSET, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_request_is_byte_exact() {
        let r = Icmpv4Repr::Echo {
            request: true,
            ident: 0x1234,
            seq: 1,
            data: vec![0xab; 4],
        };
        let mut buf = vec![0u8; r.len()];
        r.emit(&mut buf).unwrap();
        // type 8, code 0, checksum, ident 0x1234, seq 1, data
        let sum = !checksum::fold(0x0800 + 0x1234 + 1 + 0xabab + 0xabab);
        let cs = sum.to_be_bytes();
        assert_eq!(
            buf,
            [8, 0, cs[0], cs[1], 0x12, 0x34, 0, 1, 0xab, 0xab, 0xab, 0xab]
        );
        let p = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn errors_are_classified() {
        assert!(is_error(DEST_UNREACHABLE));
        assert!(is_error(TIME_EXCEEDED));
        assert!(!is_error(ECHO_REQUEST));
    }
}
