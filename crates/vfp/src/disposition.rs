//! What became of a packet: delivered, sent to the uplink, answered by the switch, flooded,
//! or dropped for a typed reason.

use crate::port::PortId;
use std::fmt;

/// Why the switch dropped a packet. Fieldless so it can index counters; a trace adds which
/// layer and rule were involved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropReason {
    /// The frame could not be parsed (short, bad lengths, bad version).
    Malformed,
    /// The frame entered on a port id the switch does not have.
    UnknownPort,
    /// A rule with a Block action matched.
    BlockedByRule,
    /// No rule matched in a layer whose default is to block.
    BlockedByDefault,
    /// A load balancer has no backends.
    NoBackends,
    /// The SNAT port pool has no free port for this protocol.
    SnatExhausted,
    /// The SNAT pool named by a rule does not exist.
    NoSuchPool,
    /// The flow table is at capacity; the new connection was refused.
    FlowTableFull,
    /// No port has the destination MAC and the switch has no uplink (internal switch).
    UnknownDestination,
    /// An encapsulated frame names a VNI/inner destination no port has.
    UnknownVni,
    /// Encapsulated ARP or other non-IP inner frames are not forwarded.
    EncapsulatedNonIp,
    /// The rewrite could not be applied (e.g. a rule mixes IPv4 and IPv6 addresses).
    RewriteFailed,
    /// A packet would leave on the port it came from without any rewrite (a loop).
    Hairpin,
    /// A rule refused it as unsupported: a documented limitation of the Windows build being
    /// reproduced (the rule's origin names which).
    Unsupported,
}

impl DropReason {
    /// Number of reasons, for counter arrays.
    pub const COUNT: usize = 14;

    /// Every reason, in counter order.
    pub const ALL: [DropReason; DropReason::COUNT] = [
        DropReason::Malformed,
        DropReason::UnknownPort,
        DropReason::BlockedByRule,
        DropReason::BlockedByDefault,
        DropReason::NoBackends,
        DropReason::SnatExhausted,
        DropReason::NoSuchPool,
        DropReason::FlowTableFull,
        DropReason::UnknownDestination,
        DropReason::UnknownVni,
        DropReason::EncapsulatedNonIp,
        DropReason::RewriteFailed,
        DropReason::Hairpin,
        DropReason::Unsupported,
    ];

    /// Index into per-reason counter arrays.
    pub fn idx(self) -> usize {
        self as usize
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DropReason::Malformed => "malformed frame",
            DropReason::UnknownPort => "unknown ingress port",
            DropReason::BlockedByRule => "blocked by rule",
            DropReason::BlockedByDefault => "blocked by layer default",
            DropReason::NoBackends => "load balancer has no backends",
            DropReason::SnatExhausted => "SNAT port pool exhausted",
            DropReason::NoSuchPool => "SNAT pool does not exist",
            DropReason::FlowTableFull => "flow table full",
            DropReason::UnknownDestination => "no port for destination (internal switch)",
            DropReason::UnknownVni => "no port for encapsulated destination",
            DropReason::EncapsulatedNonIp => "encapsulated non-IP frame",
            DropReason::RewriteFailed => "rewrite could not be applied",
            DropReason::Hairpin => "would loop back to its ingress port",
            DropReason::Unsupported => "refused: not supported by the build being reproduced",
        })
    }
}

/// The switch's verdict on one frame. For every variant but `Drop` and `Flood` the frame
/// buffer now holds the bytes to send out of the named port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
    /// Send out of a local port (pod or host vNIC).
    Deliver(PortId),
    /// Send out of the uplink to the physical network.
    Uplink(PortId),
    /// The switch answered (ARP, neighbour solicitation): send the frame back out of this port.
    Reply(PortId),
    /// A broadcast/multicast frame: send a copy out of each of `Switch::flood_targets(from)`.
    Flood {
        /// The port it came in on (excluded from the copies).
        from: PortId,
    },
    /// Dropped.
    Drop(DropReason),
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Disposition::Deliver(p) => write!(f, "delivered to port {p}"),
            Disposition::Uplink(p) => write!(f, "sent to the uplink (port {p})"),
            Disposition::Reply(p) => write!(f, "answered by the switch out of port {p}"),
            Disposition::Flood { from } => write!(f, "flooded (from port {from})"),
            Disposition::Drop(r) => write!(f, "dropped: {r}"),
        }
    }
}
