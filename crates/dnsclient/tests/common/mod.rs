//! Fixtures shared by this crate's tests.
pub mod knot;
