//! VXLAN headers (RFC 7348): 8 bytes carried over UDP, naming a 24-bit network identifier.

use super::{WireError, be32, need, put32};

/// The IANA-assigned VXLAN UDP port.
pub const VXLAN_PORT: u16 = 4789;
/// Length of the VXLAN header.
pub const HEADER_LEN: usize = 8;
/// The "I" flag: the VNI field is valid.
const FLAG_I: u8 = 0x08;

/// A read view of a VXLAN header and the Ethernet frame it carries.
#[derive(Debug)]
pub struct VxlanPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> VxlanPacket<T> {
    /// Checks the length and the I flag (RFC 7348 §5: it MUST be set for a valid VNI).
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        need(b, HEADER_LEN)?;
        if b[0] & FLAG_I == 0 {
            return Err(WireError::Malformed);
        }
        Ok(VxlanPacket { buf })
    }

    /// The 24-bit VXLAN network identifier.
    pub fn vni(&self) -> u32 {
        be32(self.buf.as_ref(), 4) >> 8
    }

    /// The inner Ethernet frame.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }
}

/// The fields of a VXLAN header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VxlanRepr {
    /// The network identifier (24 bits; higher bits are refused by `emit`).
    pub vni: u32,
}

impl VxlanRepr {
    /// Reads a checked header.
    pub fn parse<T: AsRef<[u8]>>(p: &VxlanPacket<T>) -> VxlanRepr {
        VxlanRepr { vni: p.vni() }
    }

    /// Writes the header with the I flag set and reserved fields zero.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        need(buf, HEADER_LEN)?;
        if self.vni > 0x00ff_ffff {
            return Err(WireError::Malformed);
        }
        put32(buf, 0, u32::from(FLAG_I) << 24);
        put32(buf, 4, self.vni << 8);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vni_4096_is_byte_exact() {
        let mut buf = [0u8; 8];
        VxlanRepr { vni: 4096 }.emit(&mut buf).unwrap();
        assert_eq!(buf, [0x08, 0, 0, 0, 0, 0x10, 0x00, 0]);
        let p = VxlanPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.vni(), 4096);
        assert!(VxlanRepr { vni: 1 << 24 }.emit(&mut buf).is_err());
        assert!(VxlanPacket::new_checked(&[0u8; 8][..]).is_err());
    }
}
