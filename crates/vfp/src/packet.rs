//! Whole packets, built and read as real Ethernet frames: the one builder that the simulated
//! hosts, hnsd's tracer and the engine's tests share. Pure (no I/O); frames are emitted with
//! `wire`'s `emit`s (full checksums) and read with its checked views, so a bad rewrite shows up
//! as a parse error rather than a silently wrong value.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::wire::{
    self, ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetFrame, EthernetRepr, Icmpv4Packet,
    Icmpv4Repr, Icmpv6Packet, Icmpv6Repr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, MacAddr,
    TcpFlags, TcpPacket, TcpRepr, UdpPacket, UdpRepr, proto,
};

/// The transport part of an IP packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum L4 {
    /// A TCP segment.
    Tcp {
        src_port: u16,
        dst_port: u16,
        flags: u8,
        seq: u32,
        ack: u32,
        payload: Vec<u8>,
    },
    /// A UDP datagram.
    Udp {
        src_port: u16,
        dst_port: u16,
        payload: Vec<u8>,
    },
    /// An ICMP / ICMPv6 echo request or reply.
    Echo {
        request: bool,
        ident: u16,
        seq: u16,
        data: Vec<u8>,
    },
    /// Any other protocol or message, opaque.
    Other { protocol: u8, bytes: Vec<u8> },
}

/// An IP packet with the Ethernet addresses it arrived with (zero when not yet framed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ttl: u8,
    pub l4: L4,
}

impl Packet {
    /// A packet from `src` to `dst`, not yet framed.
    pub fn new(src: IpAddr, dst: IpAddr, l4: L4) -> Packet {
        Packet {
            src_mac: MacAddr::ZERO,
            dst_mac: MacAddr::ZERO,
            src,
            dst,
            ttl: 64,
            l4,
        }
    }

    /// The IP protocol number.
    pub fn protocol(&self) -> u8 {
        match &self.l4 {
            L4::Tcp { .. } => proto::TCP,
            L4::Udp { .. } => proto::UDP,
            L4::Echo { .. } if self.src.is_ipv4() => proto::ICMP,
            L4::Echo { .. } => proto::ICMPV6,
            L4::Other { protocol, .. } => *protocol,
        }
    }

    /// Source port (TCP/UDP), 0 otherwise.
    pub fn src_port(&self) -> u16 {
        match &self.l4 {
            L4::Tcp { src_port, .. } | L4::Udp { src_port, .. } => *src_port,
            _ => 0,
        }
    }

    /// Destination port (TCP/UDP), 0 otherwise.
    pub fn dst_port(&self) -> u16 {
        match &self.l4 {
            L4::Tcp { dst_port, .. } | L4::Udp { dst_port, .. } => *dst_port,
            _ => 0,
        }
    }

    /// TCP flags, 0 otherwise.
    pub fn tcp_flags(&self) -> u8 {
        match &self.l4 {
            L4::Tcp { flags, .. } => *flags,
            _ => 0,
        }
    }

    /// An ICMP (IPv4) or ICMPv6 message other than an echo (an error such as Destination
    /// Unreachable, with the quoted packet in `data`), checksummed for `src` to `dst`. It is
    /// carried as [`L4::Other`], which is also how [`parse`] reads such a message back.
    pub fn icmp(
        src: IpAddr,
        dst: IpAddr,
        msg_type: u8,
        code: u8,
        rest: [u8; 4],
        data: Vec<u8>,
    ) -> Result<Packet, wire::WireError> {
        let (protocol, bytes) = match (src, dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => {
                let r = Icmpv4Repr::Other {
                    msg_type,
                    code,
                    rest,
                    data,
                };
                let mut b = vec![0; r.len()];
                r.emit(&mut b)?;
                (proto::ICMP, b)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let r = Icmpv6Repr::Other {
                    msg_type,
                    code,
                    rest,
                    data,
                };
                let mut b = vec![0; r.len()];
                r.emit(&mut b, s, d)?;
                (proto::ICMPV6, b)
            }
            _ => return Err(wire::WireError::Malformed),
        };
        Ok(Packet::new(src, dst, L4::Other { protocol, bytes }))
    }

    /// The same packet with these Ethernet addresses.
    pub fn with_macs(mut self, src_mac: MacAddr, dst_mac: MacAddr) -> Packet {
        (self.src_mac, self.dst_mac) = (src_mac, dst_mac);
        self
    }

    /// The IP datagram (IP header and transport bytes, no Ethernet header). Fails when the
    /// source and destination are of different families or the packet is too large to emit.
    pub fn ip_datagram(&self) -> Result<Vec<u8>, wire::WireError> {
        let (protocol, l4) = self.l4_bytes()?;
        let mut out = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut r = Ipv4Repr::simple(s, d, protocol, l4.len());
                r.ttl = self.ttl;
                let mut ip = vec![0u8; r.header_len()];
                r.emit(&mut ip)?;
                ip
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let mut r = Ipv6Repr::simple(s, d, protocol, l4.len());
                r.hop_limit = self.ttl;
                let mut ip = vec![0u8; 40];
                r.emit(&mut ip)?;
                ip
            }
            _ => return Err(wire::WireError::Malformed),
        };
        out.extend_from_slice(&l4);
        Ok(out)
    }

    /// The frame carrying this packet from `src_mac` to `dst_mac`.
    pub fn frame(&self, src_mac: MacAddr, dst_mac: MacAddr) -> Result<Vec<u8>, wire::WireError> {
        let ip = self.ip_datagram()?;
        let ethertype = if self.src.is_ipv4() {
            EtherType::IPV4
        } else {
            EtherType::IPV6
        };
        let mut out = vec![0u8; 14];
        EthernetRepr {
            src: src_mac,
            dst: dst_mac,
            vlan_tci: None,
            ethertype,
        }
        .emit(&mut out)?;
        out.extend_from_slice(&ip);
        Ok(out)
    }

    /// The frame carrying this packet between its own Ethernet addresses.
    pub fn to_frame(&self) -> Result<Vec<u8>, wire::WireError> {
        self.frame(self.src_mac, self.dst_mac)
    }

    fn l4_bytes(&self) -> Result<(u8, Vec<u8>), wire::WireError> {
        let (s, d) = (self.src, self.dst);
        Ok(match &self.l4 {
            L4::Tcp {
                src_port,
                dst_port,
                flags,
                seq,
                ack,
                payload,
            } => {
                let mut r = TcpRepr::new(*src_port, *dst_port, *flags);
                (r.seq, r.ack, r.payload) = (*seq, *ack, payload.clone());
                let mut b = vec![0; r.len()];
                r.emit(&mut b, s, d)?;
                (proto::TCP, b)
            }
            L4::Udp {
                src_port,
                dst_port,
                payload,
            } => {
                let r = UdpRepr {
                    src_port: *src_port,
                    dst_port: *dst_port,
                    payload: payload.clone(),
                };
                let mut b = vec![0; r.len()];
                r.emit(&mut b, s, d)?;
                (proto::UDP, b)
            }
            L4::Echo {
                request,
                ident,
                seq,
                data,
            } => match (s, d) {
                (IpAddr::V6(s6), IpAddr::V6(d6)) => {
                    let r = Icmpv6Repr::Echo {
                        request: *request,
                        ident: *ident,
                        seq: *seq,
                        data: data.clone(),
                    };
                    let mut b = vec![0; r.len()];
                    r.emit(&mut b, s6, d6)?;
                    (proto::ICMPV6, b)
                }
                _ => {
                    let r = Icmpv4Repr::Echo {
                        request: *request,
                        ident: *ident,
                        seq: *seq,
                        data: data.clone(),
                    };
                    let mut b = vec![0; r.len()];
                    r.emit(&mut b)?;
                    (proto::ICMP, b)
                }
            },
            L4::Other { protocol, bytes } => (*protocol, bytes.clone()),
        })
    }
}

impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.l4 {
            L4::Tcp { flags, .. } => format!("tcp {:?}", TcpFlags(*flags)),
            L4::Udp { .. } => "udp".to_string(),
            L4::Echo { request: true, .. } => "echo request".to_string(),
            L4::Echo { request: false, .. } => "echo reply".to_string(),
            L4::Other { protocol, .. } => format!("proto {protocol}"),
        };
        write!(
            f,
            "{} {}:{} > {} {}:{} {kind}",
            self.src_mac,
            self.src,
            self.src_port(),
            self.dst_mac,
            self.dst,
            self.dst_port()
        )
    }
}

/// A frame as a host reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// An ARP packet.
    Arp(ArpRepr),
    /// A neighbour solicitation or advertisement, with the IPv6 source.
    Nd(Ipv6Addr, Icmpv6Repr),
    /// An IP packet.
    Ip(Packet),
    /// Something else (ignored).
    Other,
}

/// Reads a frame; an error says what was wrong (bad checksum, truncated).
pub fn parse(frame: &[u8]) -> Result<(EthernetRepr, Parsed), String> {
    let eth = EthernetFrame::new_checked(frame).map_err(|e| format!("ethernet: {e}"))?;
    let er = EthernetRepr::parse(&eth);
    let payload = eth.payload();
    let parsed = match er.ethertype {
        EtherType::ARP => {
            let a = ArpPacket::new_checked(payload).map_err(|e| format!("arp: {e}"))?;
            Parsed::Arp(ArpRepr::parse(&a))
        }
        EtherType::IPV4 => {
            let ip = Ipv4Packet::new_checked(payload).map_err(|e| format!("ipv4: {e}"))?;
            let r = Ipv4Repr::parse(&ip).map_err(|e| format!("ipv4 header checksum: {e}"))?;
            let (s, d) = (IpAddr::V4(r.src), IpAddr::V4(r.dst));
            let l4 = l4(r.protocol, ip.payload(), s, d)?;
            Parsed::Ip(Packet {
                src_mac: er.src,
                dst_mac: er.dst,
                src: s,
                dst: d,
                ttl: r.ttl,
                l4,
            })
        }
        EtherType::IPV6 => {
            let ip = Ipv6Packet::new_checked(payload).map_err(|e| format!("ipv6: {e}"))?;
            let r = Ipv6Repr::parse(&ip);
            let (s, d) = (IpAddr::V6(r.src), IpAddr::V6(r.dst));
            let body = ip.payload();
            if r.next_header == proto::ICMPV6 {
                let p = Icmpv6Packet::new_checked(body).map_err(|e| format!("icmpv6: {e}"))?;
                let m = Icmpv6Repr::parse(&p, r.src, r.dst)
                    .map_err(|e| format!("icmpv6 checksum: {e}"))?;
                if matches!(
                    m,
                    Icmpv6Repr::NeighborSolicit { .. } | Icmpv6Repr::NeighborAdvert { .. }
                ) {
                    return Ok((er, Parsed::Nd(r.src, m)));
                }
            }
            let l4 = l4(r.next_header, body, s, d)?;
            Parsed::Ip(Packet {
                src_mac: er.src,
                dst_mac: er.dst,
                src: s,
                dst: d,
                ttl: r.hop_limit,
                l4,
            })
        }
        _ => Parsed::Other,
    };
    Ok((er, parsed))
}

fn l4(protocol: u8, b: &[u8], s: IpAddr, d: IpAddr) -> Result<L4, String> {
    Ok(match protocol {
        proto::TCP => {
            let t = TcpPacket::new_checked(b).map_err(|e| format!("tcp: {e}"))?;
            let r = TcpRepr::parse(&t, s, d).map_err(|e| format!("tcp checksum: {e}"))?;
            L4::Tcp {
                src_port: r.src_port,
                dst_port: r.dst_port,
                flags: r.flags.0,
                seq: r.seq,
                ack: r.ack,
                payload: r.payload,
            }
        }
        proto::UDP => {
            let u = UdpPacket::new_checked(b).map_err(|e| format!("udp: {e}"))?;
            let r = UdpRepr::parse(&u, s, d).map_err(|e| format!("udp checksum: {e}"))?;
            L4::Udp {
                src_port: r.src_port,
                dst_port: r.dst_port,
                payload: r.payload,
            }
        }
        proto::ICMP => {
            let p = Icmpv4Packet::new_checked(b).map_err(|e| format!("icmp: {e}"))?;
            match Icmpv4Repr::parse(&p).map_err(|e| format!("icmp checksum: {e}"))? {
                Icmpv4Repr::Echo {
                    request,
                    ident,
                    seq,
                    data,
                } => L4::Echo {
                    request,
                    ident,
                    seq,
                    data,
                },
                Icmpv4Repr::Other { .. } => L4::Other {
                    protocol,
                    bytes: b.to_vec(),
                },
            }
        }
        proto::ICMPV6 => {
            let (IpAddr::V6(s6), IpAddr::V6(d6)) = (s, d) else {
                return Err("icmpv6 over ipv4".into());
            };
            let p = Icmpv6Packet::new_checked(b).map_err(|e| format!("icmpv6: {e}"))?;
            match Icmpv6Repr::parse(&p, s6, d6).map_err(|e| format!("icmpv6 checksum: {e}"))? {
                Icmpv6Repr::Echo {
                    request,
                    ident,
                    seq,
                    data,
                } => L4::Echo {
                    request,
                    ident,
                    seq,
                    data,
                },
                _ => L4::Other {
                    protocol,
                    bytes: b.to_vec(),
                },
            }
        }
        _ => L4::Other {
            protocol,
            bytes: b.to_vec(),
        },
    })
}

/// An ARP request from `mac`/`ip` for `target`, broadcast.
pub fn arp_request(mac: MacAddr, ip: std::net::Ipv4Addr, target: std::net::Ipv4Addr) -> Vec<u8> {
    arp(
        ArpOperation::Request,
        mac,
        ip,
        MacAddr::BROADCAST,
        MacAddr::ZERO,
        target,
    )
}

/// An ARP reply from `mac`/`ip` to `to_mac`/`to_ip`.
pub fn arp_reply(
    mac: MacAddr,
    ip: std::net::Ipv4Addr,
    to_mac: MacAddr,
    to_ip: std::net::Ipv4Addr,
) -> Vec<u8> {
    arp(ArpOperation::Reply, mac, ip, to_mac, to_mac, to_ip)
}

fn arp(
    op: ArpOperation,
    mac: MacAddr,
    ip: std::net::Ipv4Addr,
    eth_dst: MacAddr,
    target_mac: MacAddr,
    target_ip: std::net::Ipv4Addr,
) -> Vec<u8> {
    let mut out = vec![0u8; 14 + wire::arp::PACKET_LEN];
    let eth = EthernetRepr {
        src: mac,
        dst: eth_dst,
        vlan_tci: None,
        ethertype: EtherType::ARP,
    };
    let a = ArpRepr {
        operation: op,
        sender_mac: mac,
        sender_ip: ip,
        target_mac,
        target_ip,
    };
    // Both emits fit the buffer sized for them.
    let _ = eth.emit(&mut out);
    let _ = a.emit(&mut out[14..]);
    out
}

/// A neighbour discovery message from `mac`/`src` to `dst` (`dst_mac` on the wire).
pub fn nd(mac: MacAddr, src: Ipv6Addr, dst: Ipv6Addr, dst_mac: MacAddr, m: &Icmpv6Repr) -> Vec<u8> {
    let mut icmp = vec![0u8; m.len()];
    let _ = m.emit(&mut icmp, src, dst);
    let mut ip = Ipv6Repr::simple(src, dst, proto::ICMPV6, icmp.len());
    ip.hop_limit = 255;
    let mut out = vec![0u8; 14 + 40];
    let _ = EthernetRepr {
        src: mac,
        dst: dst_mac,
        vlan_tci: None,
        ethertype: EtherType::IPV6,
    }
    .emit(&mut out);
    let _ = ip.emit(&mut out[14..]);
    out.extend_from_slice(&icmp);
    out
}

/// The solicited-node multicast address of `ip` (RFC 4291 §2.7.1).
pub fn solicited_node(ip: Ipv6Addr) -> Ipv6Addr {
    let o = ip.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn round_trip(p: Packet) {
        let (a, b) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let frame = p.clone().with_macs(a, b).to_frame().unwrap();
        assert_eq!(frame, p.frame(a, b).unwrap());
        assert_eq!(&frame[14..], p.ip_datagram().unwrap().as_slice());
        let (eth, parsed) = parse(&frame).unwrap();
        assert_eq!((eth.src, eth.dst), (a, b));
        assert_eq!(parsed, Parsed::Ip(p.with_macs(a, b)));
    }

    #[test]
    fn every_transport_reads_back_as_built_in_both_families() {
        for (s, d) in [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")] {
            let tcp = L4::Tcp {
                src_port: 40000,
                dst_port: 80,
                flags: TcpFlags::SYN,
                seq: 7,
                ack: 0,
                payload: b"GET".to_vec(),
            };
            let udp = L4::Udp {
                src_port: 5353,
                dst_port: 53,
                payload: b"q".to_vec(),
            };
            let echo = L4::Echo {
                request: true,
                ident: 9,
                seq: 1,
                data: vec![7; 8],
            };
            for l4 in [tcp, udp, echo] {
                round_trip(Packet::new(ip(s), ip(d), l4));
            }
            round_trip(Packet::icmp(ip(s), ip(d), 3, 3, [0; 4], vec![1; 28]).unwrap());
        }
    }

    #[test]
    fn a_corrupted_checksum_is_an_error_not_a_packet() {
        let udp = L4::Udp {
            src_port: 1,
            dst_port: 2,
            payload: b"x".to_vec(),
        };
        let mut frame = Packet::new(ip("10.0.0.1"), ip("10.0.0.2"), udp)
            .to_frame()
            .unwrap();
        let last = frame.len() - 1;
        frame[last] ^= 0xff;
        let err = parse(&frame).unwrap_err();
        assert!(err.contains("udp checksum"), "{err}");
    }

    #[test]
    fn mixed_address_families_are_refused() {
        let echo = L4::Echo {
            request: true,
            ident: 1,
            seq: 1,
            data: vec![],
        };
        let p = Packet::new(ip("10.0.0.1"), ip("fd00::1"), echo);
        assert_eq!(p.to_frame(), Err(wire::WireError::Malformed));
        assert_eq!(p.ip_datagram(), Err(wire::WireError::Malformed));
        assert!(Packet::icmp(ip("10.0.0.1"), ip("fd00::1"), 3, 3, [0; 4], vec![]).is_err());
    }
}
