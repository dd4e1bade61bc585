//! Frame builders and an independent checksum verifier shared by the integration tests.
#![allow(dead_code)]

use std::net::IpAddr;
use vfp::wire::{
    EtherType, EthernetRepr, Icmpv4Repr, Icmpv6Repr, Ipv4Repr, Ipv6Repr, MacAddr, TcpFlags,
    TcpRepr, UdpRepr, proto,
};

pub fn mac(n: u8) -> MacAddr {
    MacAddr([0x02, 0, 0, 0, 0, n])
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The L4 part of a test packet.
#[derive(Clone, Debug)]
pub enum L4 {
    Tcp {
        sport: u16,
        dport: u16,
        flags: u8,
        seq: u32,
        ack: u32,
        payload: Vec<u8>,
    },
    Udp {
        sport: u16,
        dport: u16,
        payload: Vec<u8>,
    },
    Echo {
        request: bool,
        ident: u16,
        seq: u16,
    },
    /// Raw ICMPv4/v6 message bytes (type, code, rest, data) to be checksummed by emit.
    IcmpRaw {
        msg_type: u8,
        code: u8,
        rest: [u8; 4],
        data: Vec<u8>,
    },
}

/// A test packet: Ethernet + IPv4/IPv6 + L4, built with full (non-incremental) checksums.
#[derive(Clone, Debug)]
pub struct Pkt {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ttl: u8,
    pub l4: L4,
}

impl Pkt {
    pub fn tcp(src: &str, sport: u16, dst: &str, dport: u16, flags: u8) -> Pkt {
        Pkt {
            src_mac: mac(1),
            dst_mac: mac(2),
            src: ip(src),
            dst: ip(dst),
            ttl: 64,
            l4: L4::Tcp {
                sport,
                dport,
                flags,
                seq: 1,
                ack: 0,
                payload: vec![],
            },
        }
    }

    pub fn udp(src: &str, sport: u16, dst: &str, dport: u16, payload: &[u8]) -> Pkt {
        Pkt {
            src_mac: mac(1),
            dst_mac: mac(2),
            src: ip(src),
            dst: ip(dst),
            ttl: 64,
            l4: L4::Udp {
                sport,
                dport,
                payload: payload.to_vec(),
            },
        }
    }

    pub fn echo(src: &str, dst: &str, request: bool, ident: u16) -> Pkt {
        Pkt {
            src_mac: mac(1),
            dst_mac: mac(2),
            src: ip(src),
            dst: ip(dst),
            ttl: 64,
            l4: L4::Echo {
                request,
                ident,
                seq: 1,
            },
        }
    }

    pub fn macs(mut self, src: MacAddr, dst: MacAddr) -> Pkt {
        self.src_mac = src;
        self.dst_mac = dst;
        self
    }

    pub fn seq_ack(mut self, s: u32, a: u32) -> Pkt {
        if let L4::Tcp { seq, ack, .. } = &mut self.l4 {
            *seq = s;
            *ack = a;
        }
        self
    }

    fn l4_bytes(&self) -> (u8, Vec<u8>) {
        let v6 = self.src.is_ipv6();
        match &self.l4 {
            L4::Tcp {
                sport,
                dport,
                flags,
                seq,
                ack,
                payload,
            } => {
                let mut r = TcpRepr::new(*sport, *dport, *flags);
                (r.seq, r.ack, r.payload) = (*seq, *ack, payload.clone());
                let mut b = vec![0; r.len()];
                r.emit(&mut b, self.src, self.dst).unwrap();
                (proto::TCP, b)
            }
            L4::Udp {
                sport,
                dport,
                payload,
            } => {
                let r = UdpRepr {
                    src_port: *sport,
                    dst_port: *dport,
                    payload: payload.clone(),
                };
                let mut b = vec![0; r.len()];
                r.emit(&mut b, self.src, self.dst).unwrap();
                (proto::UDP, b)
            }
            L4::Echo {
                request,
                ident,
                seq,
            } if !v6 => {
                let r = Icmpv4Repr::Echo {
                    request: *request,
                    ident: *ident,
                    seq: *seq,
                    data: vec![7; 8],
                };
                let mut b = vec![0; r.len()];
                r.emit(&mut b).unwrap();
                (proto::ICMP, b)
            }
            L4::Echo {
                request,
                ident,
                seq,
            } => {
                let r = Icmpv6Repr::Echo {
                    request: *request,
                    ident: *ident,
                    seq: *seq,
                    data: vec![7; 8],
                };
                let mut b = vec![0; r.len()];
                r.emit(&mut b, v6addr(self.src), v6addr(self.dst)).unwrap();
                (proto::ICMPV6, b)
            }
            L4::IcmpRaw {
                msg_type,
                code,
                rest,
                data,
            } if !v6 => {
                let r = Icmpv4Repr::Other {
                    msg_type: *msg_type,
                    code: *code,
                    rest: *rest,
                    data: data.clone(),
                };
                let mut b = vec![0; r.len()];
                r.emit(&mut b).unwrap();
                (proto::ICMP, b)
            }
            L4::IcmpRaw {
                msg_type,
                code,
                rest,
                data,
            } => {
                let r = Icmpv6Repr::Other {
                    msg_type: *msg_type,
                    code: *code,
                    rest: *rest,
                    data: data.clone(),
                };
                let mut b = vec![0; r.len()];
                r.emit(&mut b, v6addr(self.src), v6addr(self.dst)).unwrap();
                (proto::ICMPV6, b)
            }
        }
    }

    /// The IP datagram (no Ethernet header).
    pub fn ip_bytes(&self) -> Vec<u8> {
        let (p, l4) = self.l4_bytes();
        let mut out;
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut r = Ipv4Repr::simple(s, d, p, l4.len());
                r.ttl = self.ttl;
                out = vec![0; 20];
                r.emit(&mut out).unwrap();
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut r = Ipv6Repr::simple(s, d, p, l4.len());
                r.hop_limit = self.ttl;
                out = vec![0; 40];
                r.emit(&mut out).unwrap();
            }
            _ => panic!("mixed families"),
        }
        out.extend_from_slice(&l4);
        out
    }

    /// The whole Ethernet frame.
    pub fn build(&self) -> Vec<u8> {
        let ethertype = if self.src.is_ipv4() {
            EtherType::IPV4
        } else {
            EtherType::IPV6
        };
        let mut out = vec![0; 14];
        EthernetRepr {
            src: self.src_mac,
            dst: self.dst_mac,
            vlan_tci: None,
            ethertype,
        }
        .emit(&mut out)
        .unwrap();
        out.extend_from_slice(&self.ip_bytes());
        out
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
