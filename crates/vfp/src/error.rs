//! Errors of the programming API (what a compiler can get wrong), as opposed to packet drops.

use std::fmt;

/// A programming request the switch refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// No port with this id.
    UnknownPort(u16),
    /// The port has no layer of this name.
    UnknownLayer(String),
    /// The layer has no group of this name.
    UnknownGroup(String),
    /// A layer or group of this name already exists.
    Duplicate(String),
    /// The switch already has an uplink, or an internal switch was given one.
    Uplink(&'static str),
    /// The switch cannot hold more ports.
    TooManyPorts,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::UnknownPort(p) => write!(f, "no port {p} on this switch"),
            ConfigError::UnknownLayer(l) => write!(f, "the port has no layer named {l:?}"),
            ConfigError::UnknownGroup(g) => write!(f, "the layer has no group named {g:?}"),
            ConfigError::Duplicate(n) => write!(f, "{n:?} already exists; use another name"),
            ConfigError::Uplink(why) => write!(f, "uplink: {why}"),
            ConfigError::TooManyPorts => write!(f, "the switch has 65535 ports already"),
        }
    }
}

impl std::error::Error for ConfigError {}
