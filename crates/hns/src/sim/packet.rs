//! Packets as the simulated hosts see them: the engine's one builder and reader, `vfp::packet`.

pub use vfp::packet::*;
