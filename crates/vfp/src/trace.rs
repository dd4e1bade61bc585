//! The explanation of what the switch does with a packet: every layer's decision with the rule
//! and the object it came from, the headers before and after, the forwarding decision and the
//! final disposition. Produced by `Switch::trace`, which runs the processing code with side
//! effects off (no flow installed, no counter touched, no SNAT port taken).

use crate::action::Action;
use crate::direction::Direction;
use crate::disposition::Disposition;
use crate::forwarding::ForwardReason;
use crate::headers::PacketHeaders;
use crate::layer::DefaultAction;
use crate::port::PortId;
use crate::rule::{Origin, Priority};
use crate::tcp_state::FlowSide;
use std::fmt;
use std::sync::Arc;

/// What one layer decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerDecision {
    /// A rule matched.
    Rule {
        /// The object that made the rule.
        origin: Arc<Origin>,
        /// The group it is in.
        group: String,
        /// Its index among its owner's rules.
        index: u32,
        /// Its priority.
        priority: Priority,
        /// What it did.
        action: Action,
    },
    /// No rule matched; the layer default applied.
    Default(DefaultAction),
}

/// One layer crossed by the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceStep {
    /// The port.
    pub port: PortId,
    /// The port's name.
    pub port_name: String,
    /// The direction the packet crossed it.
    pub direction: Direction,
    /// The layer.
    pub layer: String,
    /// What the layer decided.
    pub decision: LayerDecision,
    /// Headers entering the layer.
    pub before: PacketHeaders,
    /// Headers leaving it (equal to `before` if the packet was dropped here).
    pub after: PacketHeaders,
}

/// The forwarding decision between the ingress and egress port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardStep {
    /// The egress port.
    pub to: PortId,
    /// Why.
    pub reason: ForwardReason,
}

/// A cached connection that decided the packet's fate without the layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedFlow {
    /// Which direction of the connection the packet is.
    pub side: FlowSide,
    /// Headers of the connection's first packet as it entered.
    pub orig: PacketHeaders,
    /// Headers of the connection's first packet as it left.
    pub fin: PacketHeaders,
}

/// The whole story of one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The ingress port.
    pub ingress: PortId,
    /// The parsed headers, if the frame was IP.
    pub input: Option<PacketHeaders>,
    /// Set when an existing connection decided the packet (fast path).
    pub cached: Option<CachedFlow>,
    /// The layers crossed on the slow path (empty layers that allow are left out).
    pub steps: Vec<TraceStep>,
    /// The forwarding decision, if one was made.
    pub forward: Option<ForwardStep>,
    /// Headers as the packet leaves, if it leaves.
    pub output: Option<PacketHeaders>,
    /// The frame as it would leave, if it leaves.
    pub frame: Option<Vec<u8>>,
    /// The final verdict.
    pub disposition: Disposition,
    /// Set for frames the switch handled at layer 2 (ARP, neighbour discovery, non-IP).
    pub note: Option<&'static str>,
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "ingress port {}", self.ingress)?;
        if let Some(i) = &self.input {
            writeln!(f, "  packet: {i}")?;
        }
        if let Some(n) = self.note {
            writeln!(f, "  {n}")?;
        }
        if let Some(c) = &self.cached {
            writeln!(
                f,
                "  flow table hit ({:?} side of {} -> {})",
                c.side, c.orig, c.fin
            )?;
        }
        for s in &self.steps {
            write!(
                f,
                "  port {} ({}) {} layer {}: ",
                s.port, s.port_name, s.direction, s.layer
            )?;
            match &s.decision {
                LayerDecision::Rule {
                    origin,
                    group,
                    index,
                    priority,
                    action,
                } => writeln!(
                    f,
                    "rule {index} of {origin} [group {group}, priority {priority}]: {action}"
                )?,
                LayerDecision::Default(d) => writeln!(f, "no rule matched, default {d:?}")?,
            }
            if s.before != s.after {
                writeln!(f, "      {} => {}", s.before, s.after)?;
            }
        }
        if let Some(fw) = &self.forward {
            writeln!(f, "  forwarded to port {} ({:?})", fw.to, fw.reason)?;
        }
        if let Some(o) = &self.output {
            writeln!(f, "  leaves as: {o}")?;
        }
        write!(f, "  {}", self.disposition)
    }
}
