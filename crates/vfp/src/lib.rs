//! VFP-style packet engine. Pure: no I/O, no async.

pub mod wire;
