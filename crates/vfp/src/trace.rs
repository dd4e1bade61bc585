//! The explanation of what the switch does with a packet: every layer's decision with the rule
//! and the object it came from, the headers before and after, the forwarding decision and the
//! final disposition. Produced by `Switch::trace`, which runs the processing code with side
//! effects off (no flow installed, no counter touched, no SNAT port taken).

use crate::action::{Action, Prior};
use crate::direction::Direction;
use crate::disposition::{Disposition, DropReason};
use crate::forwarding::ForwardReason;
use crate::frame::Frame;
use crate::headers::PacketHeaders;
use crate::layer::DefaultAction;
use crate::parse::{self, Kind, L4Kind, Parsed};
use crate::pipeline::{self, Recorder, Stop};
use crate::port::PortId;
use crate::rule::{Origin, Priority};
use crate::switch::{Cached, Switch};
use crate::tcp_state::FlowSide;
use crate::time::Timestamp;
use crate::transform;
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

impl Switch {
    /// Explains what `process` would do with `frame` entering at `from`, without doing it: no
    /// flow entry, no counter, no SNAT port is consumed.
    pub fn trace(&mut self, from: PortId, frame: &[u8], now: Timestamp) -> Trace {
        let mut t = Trace {
            ingress: from,
            input: None,
            cached: None,
            steps: Vec::new(),
            forward: None,
            output: None,
            frame: None,
            disposition: Disposition::Drop(DropReason::UnknownPort),
            note: None,
        };
        if self.port(from).is_none() {
            return t;
        }
        let Ok(p) = parse::parse(frame, &self.parse_ctx()) else {
            t.disposition = Disposition::Drop(DropReason::Malformed);
            return t;
        };
        let mut f = Frame::new(frame);
        let start = PacketHeaders {
            inner: p.headers,
            outer: parse::arrival_encap(frame, &p).map(Arc::new),
        };
        match (p.kind, &p.l4_kind) {
            (Kind::Ip, L4Kind::NeighborDiscovery { .. }) | (Kind::Arp, _) | (Kind::Other, _) => {
                t.note = Some("handled at layer 2: answered if owned, else forwarded by MAC");
                t.disposition = self.layer2(from, &mut f, &p);
            }
            _ if p.headers.dst_mac.is_group() && p.outer.is_none() => {
                t.note = Some("broadcast/multicast: flooded without the layers");
                t.disposition = Disposition::Flood { from };
            }
            _ => {
                let key = p.flow_key(from);
                match self.lookup(&key, &p, now) {
                    Cached::Hit(slot, side) => self.trace_cached(slot, side, &mut f, &p, &mut t),
                    // A new connection on a gone one's tuple takes over its ports, as in `ip`.
                    Cached::Gone(slot) => {
                        let prior = self.flows.get(slot).map(|r| Prior::of(r, Some(slot)));
                        let prior = prior.unwrap_or_default();
                        self.trace_layers(from, &mut f, &p, &start, prior, &mut t)
                    }
                    _ => self.trace_layers(from, &mut f, &p, &start, Prior::default(), &mut t),
                }
            }
        }
        t.input = (p.kind == Kind::Ip).then_some(start);
        if !matches!(
            t.disposition,
            Disposition::Drop(_) | Disposition::Flood { .. }
        ) {
            t.frame = Some(f.bytes().to_vec());
        }
        t
    }

    /// A packet of a cached connection: the connection's transposition, as the fast path
    /// replays it.
    fn trace_cached(&self, slot: u32, side: FlowSide, f: &mut Frame, p: &Parsed, t: &mut Trace) {
        let Some(r) = self.flows.get(slot) else {
            return;
        };
        let orig = PacketHeaders {
            inner: r.orig(),
            outer: r.rev_outer.as_ref().map(|o| Arc::new(o.reversed())),
        };
        let fin = PacketHeaders {
            inner: r.fin(),
            outer: r.fin_outer.clone(),
        };
        let (inner, outer, to) = r.target(side);
        let out = PacketHeaders {
            inner,
            outer: outer.cloned(),
        };
        let ok = transform::apply(f, p, &out.inner, out.outer.as_deref(), r.entropy).is_ok();
        t.cached = Some(CachedFlow { side, orig, fin });
        t.output = Some(out);
        t.disposition = if ok {
            self.out_disposition(to)
        } else {
            Disposition::Drop(DropReason::RewriteFailed)
        };
    }

    /// A packet of a new (or stale) connection: the slow path, recording every layer.
    fn trace_layers(
        &mut self,
        from: PortId,
        f: &mut Frame,
        p: &Parsed,
        start: &PacketHeaders,
        prior: Prior,
        t: &mut Trace,
    ) {
        let mut rec = Recorder::default();
        let syn = parse::opening_syn(f.bytes(), p);
        let r = pipeline::evaluate(
            &mut self.env(),
            from,
            start,
            prior,
            syn,
            false,
            Some(&mut rec),
        );
        t.steps = rec.steps;
        t.forward = rec.forward;
        t.disposition = match r {
            Ok(ev) => {
                t.output = Some(ev.after.clone());
                let mut plain = p.clone();
                if let L4Kind::IcmpError(_) = plain.l4_kind {
                    plain.l4_kind = L4Kind::IcmpOther;
                }
                self.emit(f, &plain, &ev, 0)
            }
            Err(Stop::Flood) => Disposition::Flood { from },
            Err(Stop::Drop(d)) => Disposition::Drop(d),
        };
    }
}
