//! Connections the switch resets. HNS drops an endpoint's TCP flows when its ACLs are applied
//! again, even unchanged ("Microsoft has confirmed this is a HNS issue", Calico's Windows
//! limitations; calico#10199): [`Switch::reset_connections`] reproduces it. Each end learns it
//! the next time it sends, from a RST the switch answers with, as a host answers a segment of a
//! connection it does not know (RFC 9293 §3.10.7.1: the RST's sequence number is the segment's
//! acknowledgment, so the sender takes it).

use std::collections::HashMap;

use super::Switch;
use crate::disposition::Disposition;
use crate::frame::Frame;
use crate::headers::FlowKey;
use crate::packet::{L4, Packet};
use crate::parse::{L4Kind, Parsed};
use crate::port::PortId;
use crate::tcp_state::FlowSide;
use crate::time::Timestamp;
use crate::wire::tcp::TcpPacket;
use crate::wire::{TcpFlags, proto};

/// The two sides of every reset connection not yet told, and when the connection was last
/// heard from (it is forgotten when it would have expired).
#[derive(Debug, Default)]
pub(crate) struct Resets {
    keys: HashMap<FlowKey, Timestamp>,
}

impl Switch {
    /// Resets the TCP connections through `port`: their flows go, and the next segment either
    /// end sends is answered with a RST. Returns how many connections were reset.
    pub fn reset_connections(&mut self, port: PortId) -> usize {
        let slots: Vec<u32> = self
            .flows
            .slots()
            .filter(|&s| {
                self.flows.get(s).is_some_and(|r| {
                    r.proto() == proto::TCP && (r.port_a == port || r.port_b == port)
                })
            })
            .collect();
        for &s in &slots {
            if let Some(r) = self.flows.get(s) {
                for side in [FlowSide::Forward, FlowSide::Reverse] {
                    self.resets.keys.insert(r.key(side), r.last_seen);
                }
            }
            self.drop_record(s);
        }
        slots.len()
    }

    /// The RST that answers a segment of a reset connection, written over `frame`; `None` for
    /// any other packet (and for one the RST could not be built for, which then goes on as a
    /// packet without a flow).
    pub(crate) fn answer_reset(
        &mut self,
        from: PortId,
        frame: &mut Frame,
        p: &Parsed,
    ) -> Option<Disposition> {
        if self.resets.keys.is_empty() {
            return None;
        }
        let L4Kind::Tcp { flags } = p.l4_kind else {
            return None;
        };
        let f = TcpFlags(flags);
        if f.has(TcpFlags::SYN) || f.has(TcpFlags::RST) || !f.has(TcpFlags::ACK) {
            return None;
        }
        if p.outer.is_some() {
            return None;
        }
        let key = p.flow_key(from);
        self.resets.keys.get(&key)?;
        let ack = TcpPacket::new_checked(frame.bytes().get(p.l4..)?)
            .ok()?
            .ack();
        let h = &p.headers;
        let rst = Packet::new(
            h.dst_ip,
            h.src_ip,
            L4::Tcp {
                src_port: h.dst_port,
                dst_port: h.src_port,
                flags: TcpFlags::RST,
                seq: ack,
                ack: 0,
                payload: Vec::new(),
            },
        )
        .frame(h.dst_mac, h.src_mac)
        .ok()?;
        self.resets.keys.remove(&key);
        frame.set(&rst);
        Some(Disposition::Reply(from))
    }

    /// Forgets the reset connections whose ends have been silent for as long as an
    /// established connection may be.
    pub(crate) fn expire_resets(&mut self, now: Timestamp) {
        let ttl = self.config.timeouts.tcp_established;
        self.resets.keys.retain(|_, t| now.since(*t) <= ttl);
    }
}
