//! Counters kept per rule (in `StoredRule::hits`), per layer, per port and for the flow table.
//! Rule and layer counters count connections (slow-path decisions); port counters count
//! packets, since every packet crosses ports.

use crate::disposition::DropReason;

/// Decisions a layer made on the slow path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerCounters {
    /// Connections evaluated.
    pub evaluated: u64,
    /// Of which a rule matched.
    pub rule_hits: u64,
    /// Of which no rule matched and the layer default applied.
    pub default_hits: u64,
    /// Of which the packet was dropped here (rule, default, or action failure).
    pub drops: u64,
}

/// Traffic through one port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames received from the device (entering the switch here).
    pub rx_packets: u64,
    /// Bytes received from the device.
    pub rx_bytes: u64,
    /// Frames sent to the device.
    pub tx_packets: u64,
    /// Bytes sent to the device.
    pub tx_bytes: u64,
    /// Frames entering here that hit the flow table.
    pub fast_path: u64,
    /// Frames entering here that went through the layers.
    pub slow_path: u64,
    /// Frames entering here that were dropped, by reason.
    pub drops: [u64; DropReason::COUNT],
}

impl PortCounters {
    /// Drops for one reason.
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.drops[r.idx()]
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// Flow table activity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounters {
    /// Connections installed.
    pub created: u64,
    /// Connections removed after their idle timeout.
    pub expired: u64,
    /// Connections re-evaluated after a rule change.
    pub reevaluated: u64,
    /// Connections removed because a re-evaluation or another connection displaced them.
    pub evicted: u64,
    /// New connections refused because the table was full.
    pub full_drops: u64,
    /// Packets that took one lookup and a replay of the cached transposition.
    pub hits: u64,
}
