//! ARP for IPv4 over Ethernet (RFC 826); other hardware/protocol pairs are `Unsupported`.

use super::ethernet::mac_at;
use super::{MacAddr, WireError, be16, need, put16};
use std::net::Ipv4Addr;

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// The ARP operation code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    /// Who has the target address?
    Request,
    /// The sender has the address asked for.
    Reply,
    /// Any other code, kept so that parse and emit agree.
    Other(u16),
}

impl From<u16> for ArpOperation {
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            o => ArpOperation::Other(o),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(op: ArpOperation) -> u16 {
        match op {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Other(o) => o,
        }
    }
}

/// A read view of an Ethernet/IPv4 ARP packet.
#[derive(Debug)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Checks the length and that the packet is Ethernet (1) / IPv4 (0x0800) with 6/4 lengths.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        need(b, PACKET_LEN)?;
        if be16(b, 0) != 1 || be16(b, 2) != 0x0800 || b[4] != 6 || b[5] != 4 {
            return Err(WireError::Unsupported);
        }
        Ok(ArpPacket { buf })
    }

    /// The operation.
    pub fn operation(&self) -> ArpOperation {
        be16(self.buf.as_ref(), 6).into()
    }

    /// Sender hardware address.
    pub fn sender_mac(&self) -> MacAddr {
        mac_at(self.buf.as_ref(), 8)
    }

    /// Sender protocol address.
    pub fn sender_ip(&self) -> Ipv4Addr {
        ip4_at(self.buf.as_ref(), 14)
    }

    /// Target hardware address.
    pub fn target_mac(&self) -> MacAddr {
        mac_at(self.buf.as_ref(), 18)
    }

    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Addr {
        ip4_at(self.buf.as_ref(), 24)
    }
}

fn ip4_at(b: &[u8], off: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[off], b[off + 1], b[off + 2], b[off + 3])
}

/// The fields of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request or reply.
    pub operation: ArpOperation,
    /// Sender hardware address.
    pub sender_mac: MacAddr,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in requests).
    pub target_mac: MacAddr,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> ArpRepr {
        ArpRepr {
            operation: p.operation(),
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        }
    }

    /// Writes the packet at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        need(buf, PACKET_LEN)?;
        put16(buf, 0, 1);
        put16(buf, 2, 0x0800);
        buf[4] = 6;
        buf[5] = 4;
        put16(buf, 6, self.operation.into());
        buf[8..14].copy_from_slice(&self.sender_mac.0);
        buf[14..18].copy_from_slice(&self.sender_ip.octets());
        buf[18..24].copy_from_slice(&self.target_mac.0);
        buf[24..28].copy_from_slice(&self.target_ip.octets());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_byte_exact() {
        let bytes = [
            0, 1, 8, 0, 6, 4, 0, 1, 2, 0, 0, 0, 0, 1, 10, 0, 0, 5, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1,
        ];
        let p = ArpPacket::new_checked(&bytes[..]).unwrap();
        let r = ArpRepr::parse(&p);
        assert_eq!(r.operation, ArpOperation::Request);
        assert_eq!(r.target_ip, Ipv4Addr::new(10, 0, 0, 1));
        let mut out = [0u8; PACKET_LEN];
        r.emit(&mut out).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn non_ethernet_ipv4_arp_is_unsupported() {
        let mut bytes = [0u8; PACKET_LEN];
        bytes[1] = 6; // IEEE 802 hardware
        assert_eq!(
            ArpPacket::new_checked(&bytes[..]).unwrap_err(),
            WireError::Unsupported
        );
    }
}
