//! VFP-style packet engine. Pure: no I/O, no async.

pub mod action;
pub mod counters;
pub mod direction;
pub mod disposition;
pub mod encap;
pub mod error;
pub mod flow_table;
pub mod frame;
pub mod headers;
pub mod layer;
pub mod lb;
pub mod nat;
mod parse;
pub mod port;
pub mod rule;
mod rule_index;
pub mod tcp_state;
pub mod time;
mod transform;
pub mod wire;
