//! Ethernet II frames with an optional 802.1Q VLAN tag.

use super::{WireError, be16, need, put16};
use std::fmt;

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00, used where ARP leaves a hardware address unknown.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// True for group (broadcast and multicast) addresses: the I/G bit is set.
    pub fn is_group(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// The Ethernet multicast address an IPv6 solicited-node/multicast address maps to
    /// (RFC 2464 §7: 33:33 followed by the last four octets).
    pub fn ipv6_multicast(ip: std::net::Ipv6Addr) -> MacAddr {
        let o = ip.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for MacAddr {
    type Err = WireError;

    /// Accepts `aa:bb:cc:dd:ee:ff` and the Windows spelling `AA-BB-CC-DD-EE-FF`.
    fn from_str(s: &str) -> Result<Self, WireError> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in &mut out {
            let p = parts.next().ok_or(WireError::Malformed)?;
            if p.len() != 2 {
                return Err(WireError::Malformed);
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| WireError::Malformed)?;
        }
        if parts.next().is_some() {
            return Err(WireError::Malformed);
        }
        Ok(MacAddr(out))
    }
}

/// EtherType values the engine dispatches on.
pub struct EtherType;

impl EtherType {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of the 802.1Q tag inserted after the source address.
pub const VLAN_TAG_LEN: usize = 4;

/// A read/write view of an Ethernet frame (header and payload) in a byte buffer.
#[derive(Debug)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
    header_len: usize,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the buffer holds a whole header (and the VLAN tag if one is announced).
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        need(b, HEADER_LEN)?;
        let header_len = if be16(b, 12) == EtherType::VLAN {
            need(b, HEADER_LEN + VLAN_TAG_LEN)?;
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        };
        Ok(EthernetFrame { buf, header_len })
    }

    /// Destination address.
    pub fn dst(&self) -> MacAddr {
        mac_at(self.buf.as_ref(), 0)
    }

    /// Source address.
    pub fn src(&self) -> MacAddr {
        mac_at(self.buf.as_ref(), 6)
    }

    /// The 802.1Q tag control information (PCP, DEI, VLAN id), if the frame is tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        (self.header_len > HEADER_LEN).then(|| be16(self.buf.as_ref(), 14))
    }

    /// The EtherType of the payload (after the VLAN tag, if any).
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), self.header_len - 2)
    }

    /// Length of the header including the VLAN tag.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    pub fn set_dst(&mut self, mac: MacAddr) {
        self.buf.as_mut()[0..6].copy_from_slice(&mac.0);
    }

    /// Sets the source address.
    pub fn set_src(&mut self, mac: MacAddr) {
        self.buf.as_mut()[6..12].copy_from_slice(&mac.0);
    }

    /// The payload after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len;
        &mut self.buf.as_mut()[h..]
    }
}

pub(crate) fn mac_at(b: &[u8], off: usize) -> MacAddr {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[off..off + 6]);
    MacAddr(m)
}

/// The fields of an Ethernet header, to build frames and compare parses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source address.
    pub src: MacAddr,
    /// Destination address.
    pub dst: MacAddr,
    /// 802.1Q tag control information when the frame is tagged.
    pub vlan_tci: Option<u16>,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> EthernetRepr {
        EthernetRepr {
            src: f.src(),
            dst: f.dst(),
            vlan_tci: f.vlan_tci(),
            ethertype: f.ethertype(),
        }
    }

    /// Bytes this header takes on the wire.
    pub fn header_len(&self) -> usize {
        HEADER_LEN
            + if self.vlan_tci.is_some() {
                VLAN_TAG_LEN
            } else {
                0
            }
    }

    /// Writes the header at the start of `buf`; fails if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        need(buf, self.header_len())?;
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        match self.vlan_tci {
            Some(tci) => {
                put16(buf, 12, EtherType::VLAN);
                put16(buf, 14, tci);
                put16(buf, 16, self.ethertype);
            }
            None => put16(buf, 12, self.ethertype),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tagged_frame_and_emits_the_same_bytes() {
        let bytes = [
            1, 2, 3, 4, 5, 6, 0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0x81, 0x00, 0x20, 0x64, 0x08, 0x00,
            0xaa,
        ];
        let f = EthernetFrame::new_checked(&bytes[..]).unwrap();
        let r = EthernetRepr::parse(&f);
        assert_eq!(r.vlan_tci, Some(0x2064));
        assert_eq!(r.ethertype, EtherType::IPV4);
        assert_eq!(f.payload(), &[0xaa]);
        let mut out = [0u8; 18];
        r.emit(&mut out).unwrap();
        assert_eq!(&out[..], &bytes[..18]);
    }

    #[test]
    fn short_buffers_are_errors_not_panics() {
        assert_eq!(
            EthernetFrame::new_checked(&[0u8; 13][..]).unwrap_err(),
            WireError::Truncated
        );
        let mut tagged = [0u8; 16];
        tagged[12] = 0x81;
        assert!(EthernetFrame::new_checked(&tagged[..]).is_err());
    }

    #[test]
    fn mac_parses_both_spellings() {
        let a: MacAddr = "00-15-5D-52-C0-00".parse().unwrap();
        let b: MacAddr = "00:15:5d:52:c0:00".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "00:15:5d:52:c0:00");
        assert!("00:15:5d".parse::<MacAddr>().is_err());
    }
}
