//! The direction of a packet relative to the device behind a port.

use std::fmt;

/// Which way a packet crosses a port, seen from the device attached to it (the pod, the host,
/// or the physical network behind the uplink). `Out` is egress from that device into the switch
/// (layers run top-down); `In` is ingress from the switch to the device (layers run bottom-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// From the device into the switch.
    Out,
    /// From the switch to the device.
    In,
}

impl Direction {
    /// Index for per-direction arrays.
    pub(crate) fn idx(self) -> usize {
        match self {
            Direction::Out => 0,
            Direction::In => 1,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Out => "out",
            Direction::In => "in",
        })
    }
}
