//! The checks, one file per layer pair: each a pure function over a [`Node`](crate::node::Node)
//! that appends its findings.

pub mod dns;
pub mod endpoints;
pub mod flannel;
pub mod icmp_probes;
pub mod kernel;
pub mod known;
pub mod loadbalancers;
pub mod nat;
pub mod policy;
pub mod snat;
pub mod switch;
