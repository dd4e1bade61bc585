//! Frame builders and an independent checksum verifier shared by the integration tests.
#![allow(dead_code)]

use std::net::IpAddr;
use vfp::wire::{MacAddr, TcpFlags};

pub fn mac(n: u8) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0, n])
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub use vfp::packet::{L4, Packet};

/// The data the test echo requests carry.
pub const ECHO_DATA: [u8; 8] = [7; 8];

/// Test packets from `vfp::packet` with fixed defaults: MACs `mac(1)` to `mac(2)`, TCP sequence
/// 1, echo sequence 1 carrying [`ECHO_DATA`].
pub mod pkt {
    use super::{ECHO_DATA, L4, Packet, ip, mac};

    fn packet(src: &str, dst: &str, l4: L4) -> Packet {
        Packet::new(ip(src), ip(dst), l4).with_macs(mac(1), mac(2))
    }

    pub fn tcp(src: &str, src_port: u16, dst: &str, dst_port: u16, flags: u8) -> Packet {
        let l4 = L4::Tcp {
            src_port,
            dst_port,
            flags,
            seq: 1,
            ack: 0,
            payload: vec![],
        };
        packet(src, dst, l4)
    }

    pub fn udp(src: &str, src_port: u16, dst: &str, dst_port: u16, payload: &[u8]) -> Packet {
        let l4 = L4::Udp {
            src_port,
            dst_port,
            payload: payload.to_vec(),
        };
        packet(src, dst, l4)
    }

    pub fn echo(src: &str, dst: &str, request: bool, ident: u16) -> Packet {
        let l4 = L4::Echo {
            request,
            ident,
            seq: 1,
            data: ECHO_DATA.to_vec(),
        };
        packet(src, dst, l4)
    }

    /// An ICMP/ICMPv6 message other than echo (type, code, rest of header, data).
    pub fn icmp(src: &str, dst: &str, msg_type: u8, code: u8, data: Vec<u8>) -> Packet {
        Packet::icmp(ip(src), ip(dst), msg_type, code, [0; 4], data)
            .expect("an ICMP message of one address family")
            .with_macs(mac(1), mac(2))
    }
}

/// What the tests do with a `Packet`; the builder's refusals become panics saying why.
pub trait TestPacket {
    /// The whole Ethernet frame, between the packet's own MACs.
    fn build(&self) -> Vec<u8>;
    /// The IP datagram (no Ethernet header).
    fn ip_bytes(&self) -> Vec<u8>;
    /// The same TCP segment with this sequence and acknowledgement number.
    fn with_seq_ack(self, seq: u32, ack: u32) -> Self;
}

impl TestPacket for Packet {
    fn build(&self) -> Vec<u8> {
        self.to_frame()
            .unwrap_or_else(|e| panic!("building {self}: {e}"))
    }

    fn ip_bytes(&self) -> Vec<u8> {
        self.ip_datagram()
            .unwrap_or_else(|e| panic!("building {self}: {e}"))
    }

    fn with_seq_ack(mut self, s: u32, a: u32) -> Packet {
        if let L4::Tcp { seq, ack, .. } = &mut self.l4 {
            (*seq, *ack) = (s, a);
        }
        self
    }
}

pub fn v6addr(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V6(v) => v,
        IpAddr::V4(v) => v.to_ipv6_mapped(),
    }
}

/// An independent Internet checksum (RFC 1071), written here rather than taken from the crate,
/// so that rewritten frames are checked against a second implementation.
pub fn sum16(data: &[u8]) -> u32 {
    let mut s: u32 = 0;
    let mut i = 0;
    while i + 1 < data.len() {
        s += (u32::from(data[i]) << 8) | u32::from(data[i + 1]);
        i += 2;
    }
    if i < data.len() {
        s += u32::from(data[i]) << 8;
    }
    s
}

pub fn folds_to_ffff(mut s: u32) -> bool {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

fn pseudo(src: &[u8], dst: &[u8], proto: u8, len: usize) -> u32 {
    sum16(src) + sum16(dst) + u32::from(proto) + (len as u32 & 0xffff) + (len as u32 >> 16)
}

/// Verifies every checksum in an Ethernet frame from scratch: IPv4 header, TCP/UDP/ICMPv6 with
/// pseudo-header, ICMPv4, and (for VXLAN on port 4789) the inner frame too. Panics with a
/// description on the first wrong one.
pub fn verify_checksums(frame: &[u8]) {
    let et = u16::from_be_bytes([frame[12], frame[13]]);
    let l3 = &frame[14..];
    let (proto, src, dst, seg): (u8, Vec<u8>, Vec<u8>, &[u8]) = match et {
        0x0800 => {
            let hl = usize::from(l3[0] & 0xf) * 4;
            assert!(folds_to_ffff(sum16(&l3[..hl])), "IPv4 header checksum");
            let total = usize::from(u16::from_be_bytes([l3[2], l3[3]]));
            (
                l3[9],
                l3[12..16].to_vec(),
                l3[16..20].to_vec(),
                &l3[hl..total],
            )
        }
        0x86dd => {
            let plen = usize::from(u16::from_be_bytes([l3[4], l3[5]]));
            (
                l3[6],
                l3[8..24].to_vec(),
                l3[24..40].to_vec(),
                &l3[40..40 + plen],
            )
        }
        _ => return,
    };
    match proto {
        6 => assert!(
            folds_to_ffff(pseudo(&src, &dst, 6, seg.len()) + sum16(seg)),
            "TCP checksum"
        ),
        17 => {
            if !(et == 0x0800 && seg[6] == 0 && seg[7] == 0) {
                assert!(
                    folds_to_ffff(pseudo(&src, &dst, 17, seg.len()) + sum16(seg)),
                    "UDP checksum"
                );
            }
            if u16::from_be_bytes([seg[2], seg[3]]) == 4789 {
                verify_checksums(&seg[16..]);
            }
        }
        1 => assert!(folds_to_ffff(sum16(seg)), "ICMPv4 checksum"),
        58 => assert!(
            folds_to_ffff(pseudo(&src, &dst, 58, seg.len()) + sum16(seg)),
            "ICMPv6 checksum"
        ),
        _ => {}
    }
}

pub const SYN: u8 = TcpFlags::SYN;
pub const ACK: u8 = TcpFlags::ACK;
pub const FIN: u8 = TcpFlags::FIN;
