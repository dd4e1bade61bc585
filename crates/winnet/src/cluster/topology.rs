//! The topology file and the address plan, shared with the in-memory cluster: `lab::topology`.

pub use lab::topology::*;
