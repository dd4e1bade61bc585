//! Sending test traffic between any two hosts of the cluster and reporting what arrived: TCP
//! SYN and data, UDP, ICMP echo. Each exchange carries a fresh token (the TCP sequence number,
//! the UDP and echo payload), so the request is found wherever it arrived (a load balancer may
//! have sent it to any backend, NAT may have changed its addresses) and the reply is the one
//! that answers it: from the address and port the client sent to, as a real client requires.

use std::fmt;
use std::net::IpAddr;

use vfp::wire::TcpFlags;

use super::cluster::{Cluster, DropRecord, Who};
use vfp::packet::{L4, Packet};

/// What became of one request and its reply.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// The request as the host that received it saw it.
    pub request: Option<(Who, Packet)>,
    /// The reply as the client saw it.
    pub reply: Option<Packet>,
    /// Switch drops meanwhile.
    pub drops: Vec<DropRecord>,
    /// Stack drops meanwhile (no route, unreadable frame, ...).
    pub stack_drops: Vec<String>,
}

impl Exchange {
    /// True when the client got its answer.
    pub fn ok(&self) -> bool {
        self.reply.is_some()
    }

    /// True when the answer is a TCP reset: the port is closed where the SYN arrived.
    pub fn refused(&self) -> bool {
        self.reply
            .as_ref()
            .is_some_and(|r| matches!(r.l4, L4::Tcp { .. }) && r.tcp_flags() & TcpFlags::RST != 0)
    }

    /// Who received the request.
    pub fn receiver(&self) -> Option<Who> {
        self.request.as_ref().map(|(w, _)| *w)
    }

    /// The request as received.
    pub fn seen(&self) -> Option<&Packet> {
        self.request.as_ref().map(|(_, p)| p)
    }

    /// The payload of a UDP reply.
    pub fn reply_payload(&self) -> Option<&[u8]> {
        match &self.reply.as_ref()?.l4 {
            L4::Udp { payload, .. } => Some(payload),
            _ => None,
        }
    }
}

impl fmt::Display for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.request {
            Some((w, p)) => writeln!(f, "request arrived at {w:?}: {p}")?,
            None => writeln!(f, "request did not arrive")?,
        }
        match &self.reply {
            Some(p) => writeln!(f, "reply: {p}")?,
            None => writeln!(f, "no reply")?,
        }
        for d in &self.drops {
            writeln!(
                f,
                "dropped at {} port {}: {}\n{}",
                d.node, d.port, d.reason, d.trace
            )?;
        }
        for d in &self.stack_drops {
            writeln!(f, "stack: {d}")?;
        }
        Ok(())
    }
}

/// The kind of request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Syn,
    Data,
    Udp,
    Ping,
}

impl Cluster {
    /// A TCP SYN from `from` to `dst:port`; the reply is the SYN-ACK (or RST).
    pub fn tcp_syn(&mut self, from: Who, dst: IpAddr, port: u16) -> Exchange {
        self.exchange(from, dst, port, Kind::Syn, None)
    }

    /// A TCP data segment (PSH|ACK, after the handshake) from `from` to `dst:port` from
    /// source port `sport`; the reply is the ACK.
    pub fn tcp_data(&mut self, from: Who, sport: u16, dst: IpAddr, port: u16) -> Exchange {
        self.exchange(from, dst, port, Kind::Data, Some(sport))
    }

    /// A full exchange on one connection: SYN, then a data segment on the same 4-tuple.
    pub fn tcp_connect(&mut self, from: Who, dst: IpAddr, port: u16) -> (Exchange, Exchange) {
        let syn = self.tcp_syn(from, dst, port);
        let sport = syn.reply.as_ref().map(Packet::dst_port).unwrap_or_default();
        let data = self.tcp_data(from, sport, dst, port);
        (syn, data)
    }

    /// A UDP datagram from `from` to `dst:port`; the reply is the echo.
    pub fn udp(&mut self, from: Who, dst: IpAddr, port: u16) -> Exchange {
        self.exchange(from, dst, port, Kind::Udp, None)
    }

    /// An ICMP (or ICMPv6) echo request from `from` to `dst`; the reply is the echo reply.
    pub fn ping(&mut self, from: Who, dst: IpAddr) -> Exchange {
        self.exchange(from, dst, 0, Kind::Ping, None)
    }

    fn exchange(
        &mut self,
        from: Who,
        dst: IpAddr,
        port: u16,
        kind: Kind,
        sport: Option<u16>,
    ) -> Exchange {
        self.token = self.token.wrapping_add(1);
        let token = 0x5157_0000 | self.token;
        let sport = sport.unwrap_or(30000 + (self.token % 30000) as u16);
        let Some(src) = self.stack(from).and_then(|s| s.source_for(dst)) else {
            return no_source(self.name(from), dst);
        };
        let l4 = match kind {
            Kind::Syn => L4::Tcp {
                src_port: sport,
                dst_port: port,
                flags: TcpFlags::SYN,
                seq: token,
                ack: 0,
                payload: Vec::new(),
            },
            Kind::Data => L4::Tcp {
                src_port: sport,
                dst_port: port,
                flags: TcpFlags::PSH | TcpFlags::ACK,
                seq: token,
                ack: 7001,
                payload: token.to_be_bytes().to_vec(),
            },
            Kind::Udp => L4::Udp {
                src_port: sport,
                dst_port: port,
                payload: token.to_be_bytes().to_vec(),
            },
            Kind::Ping => L4::Echo {
                request: true,
                ident: (token & 0xffff) as u16,
                seq: 1,
                data: token.to_be_bytes().to_vec(),
            },
        };
        let request = Packet::new(src, dst, l4);
        self.carry(
            from,
            request,
            |p| carries_request(p, kind, token),
            |p| answers(p, kind, token, dst, port, sport),
        )
    }

    /// A UDP datagram carrying `payload` from `from` to `dst:port` (a DNS query, say); the
    /// reply is the first datagram back from `dst:port` to the client's port, whatever it
    /// carries ([`Exchange::reply_payload`]).
    pub fn udp_exchange(&mut self, from: Who, dst: IpAddr, port: u16, payload: &[u8]) -> Exchange {
        self.token = self.token.wrapping_add(1);
        let sport = 30000 + (self.token % 30000) as u16;
        let Some(src) = self.stack(from).and_then(|s| s.source_for(dst)) else {
            return no_source(self.name(from), dst);
        };
        let l4 = L4::Udp {
            src_port: sport,
            dst_port: port,
            payload: payload.to_vec(),
        };
        let request = Packet::new(src, dst, l4);
        self.carry(
            from,
            request,
            |p| matches!(&p.l4, L4::Udp { payload: got, .. } if got == payload),
            |p| {
                p.src == dst
                    && matches!(p.l4, L4::Udp { src_port, dst_port, .. }
                        if src_port == port && dst_port == sport)
            },
        )
    }

    /// Sends `request` from `from`, carries everything that follows, and reports where a
    /// packet `is_request` arrived and the packet `is_reply` that came back to `from`.
    fn carry(
        &mut self,
        from: Who,
        request: Packet,
        is_request: impl Fn(&Packet) -> bool,
        is_reply: impl Fn(&Packet) -> bool,
    ) -> Exchange {
        let marks: Vec<(Who, usize)> = self
            .all_hosts()
            .iter()
            .map(|w| (*w, self.inbox_len(*w)))
            .collect();
        let drops_before = self.drops.len();
        let stack_drops_before: Vec<(Who, usize)> = marks
            .iter()
            .map(|(w, _)| (*w, self.stack(*w).map_or(0, |s| s.drops.len())))
            .collect();
        let out = self
            .stack_mut(from)
            .map(|s| s.send(request))
            .unwrap_or_default();
        self.run(from, out);
        let mut ex = Exchange {
            request: None,
            reply: None,
            drops: self.drops[drops_before..].to_vec(),
            stack_drops: Vec::new(),
        };
        for (w, before) in &stack_drops_before {
            if let Some(s) = self.stack(*w) {
                ex.stack_drops.extend(
                    s.drops[*before..]
                        .iter()
                        .map(|d| format!("{}: {d}", s.name)),
                );
            }
        }
        for (w, before) in &marks {
            let Some(s) = self.stack(*w) else { continue };
            for r in &s.inbox[*before..] {
                let p = &r.packet;
                if ex.request.is_none() && is_request(p) {
                    ex.request = Some((*w, p.clone()));
                }
                if *w == from && ex.reply.is_none() && is_reply(p) {
                    ex.reply = Some(p.clone());
                }
            }
        }
        ex
    }

    fn all_hosts(&self) -> Vec<Who> {
        let mut v = vec![Who::External];
        for (i, n) in self.nodes.iter().enumerate() {
            v.push(Who::Node(i));
            v.extend(n.pods.keys().map(|ep| Who::Pod(i, *ep)));
        }
        v
    }

    fn inbox_len(&self, w: Who) -> usize {
        self.stack(w).map_or(0, |s| s.inbox.len())
    }
}

/// The exchange of a host that cannot send to `dst`'s family.
fn no_source(name: String, dst: IpAddr) -> Exchange {
    Exchange {
        request: None,
        reply: None,
        drops: Vec::new(),
        stack_drops: vec![format!("{name} has no address of the family of {dst}")],
    }
}

fn carries_request(p: &Packet, kind: Kind, token: u32) -> bool {
    match (&p.l4, kind) {
        (L4::Tcp { seq, flags, .. }, Kind::Syn) => {
            *seq == token
                && TcpFlags(*flags).has(TcpFlags::SYN)
                && !TcpFlags(*flags).has(TcpFlags::ACK)
        }
        (L4::Tcp { seq, payload, .. }, Kind::Data) => *seq == token && !payload.is_empty(),
        (L4::Udp { payload, .. }, Kind::Udp) => {
            payload == &token.to_be_bytes() && p.dst_port() != 0
        }
        (
            L4::Echo {
                request: true,
                data,
                ..
            },
            Kind::Ping,
        ) => data == &token.to_be_bytes(),
        _ => false,
    }
}

fn answers(p: &Packet, kind: Kind, token: u32, dst: IpAddr, port: u16, sport: u16) -> bool {
    if p.src != dst {
        return false;
    }
    match (&p.l4, kind) {
        (
            L4::Tcp {
                ack,
                src_port,
                dst_port,
                ..
            },
            Kind::Syn,
        ) => *ack == token.wrapping_add(1) && *src_port == port && *dst_port == sport,
        // The ACK of the data, or a RST of the connection (a reset flow's answer, whose
        // sequence number is the segment's acknowledgment: the client takes it).
        (
            L4::Tcp {
                ack,
                src_port,
                dst_port,
                flags,
                ..
            },
            Kind::Data,
        ) => {
            (*ack == token.wrapping_add(4) || flags & TcpFlags::RST != 0)
                && *src_port == port
                && *dst_port == sport
        }
        (
            L4::Udp {
                payload,
                src_port,
                dst_port,
            },
            Kind::Udp,
        ) => {
            payload[..] == [&token.to_be_bytes()[..], b"!"].concat()[..]
                && *src_port == port
                && *dst_port == sport
        }
        (
            L4::Echo {
                request: false,
                data,
                ..
            },
            Kind::Ping,
        ) => data == &token.to_be_bytes(),
        _ => false,
    }
}
