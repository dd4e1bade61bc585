//! Connections the switch resets. HNS drops an endpoint's TCP flows when its ACLs are applied
//! again, even unchanged ("Microsoft has confirmed this is a HNS issue", Calico's Windows
//! limitations; calico#10199): [`Switch::reset_connections`] reproduces it. Each end learns it
//! the next time it sends, from a RST the switch answers with, as a host answers a segment of a
//! connection it does not know (RFC 9293 §3.10.7.1: the RST's sequence number is the segment's
//! acknowledgment, so the sender takes it). A segment that arrived in VXLAN from another node
//! is answered through the tunnel it came by, as every reply of its connection was.

use std::collections::HashMap;

use super::Switch;
use crate::disposition::Disposition;
use crate::encap;
use crate::frame::Frame;
use crate::headers::FlowKey;
use crate::packet::{L4, Packet};
use crate::parse::{self, L4Kind, Parsed};
use crate::port::PortId;
use crate::tcp_state::FlowSide;
use crate::time::Timestamp;
use crate::wire::tcp::TcpPacket;
use crate::wire::{TcpFlags, proto};

/// The two sides of every reset connection not yet told.
#[derive(Debug, Default)]
pub(crate) struct Resets {
    keys: HashMap<FlowKey, Reset>,
}

/// What the switch keeps of a reset connection.
#[derive(Debug, Clone, Copy)]
struct Reset {
    /// When the connection was last heard from (it is forgotten when it would have expired).
    last_seen: Timestamp,
    /// The connection's VXLAN source port, which its encapsulated RST keeps.
    entropy: u16,
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
                let reset = Reset {
                    last_seen: r.last_seen,
                    entropy: r.entropy,
                };
                for side in [FlowSide::Forward, FlowSide::Reverse] {
                    self.resets.keys.insert(r.key(side), reset);
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
        let key = p.flow_key(from);
        let reset = *self.resets.keys.get(&key)?;
        let rst = rst_for(frame, p, reset.entropy)?;
        frame.set(&rst);
        self.resets.keys.remove(&key);
        Some(Disposition::Reply(from))
    }

    /// Forgets the reset connections whose ends have been silent for as long as an
    /// established connection may be.
    pub(crate) fn expire_resets(&mut self, now: Timestamp) {
        let ttl = self.config.timeouts.tcp_established;
        self.resets
            .keys
            .retain(|_, r| now.since(r.last_seen) <= ttl);
    }
}

/// The RST answering the segment in `frame`: from its destination to its source, with the
/// segment's acknowledgment as sequence number, and, if the segment arrived in VXLAN, in the
/// tunnel back to its sender with the connection's source port `entropy`. `None` if it cannot
/// be built.
fn rst_for(frame: &Frame, p: &Parsed, entropy: u16) -> Option<Vec<u8>> {
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
    if p.outer.is_none() {
        return Some(rst);
    }
    let back = parse::arrival_encap(frame.bytes(), p)?.reversed();
    let mut out = Frame::new(&rst);
    encap::push(&mut out, &back, entropy).ok()?;
    Some(out.into_vec())
}
