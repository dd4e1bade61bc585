//! `winnet doctor` and `winnet collect` on this machine: a [`doctor::NodeSnapshot`] taken live
//! from a node ([`collect`]), a bundle of them written and read back ([`bundle`]), a trace
//! replayed from a bundle ([`replay`]), the safe repairs of `--fix` ([`fix`]), a node's
//! pods read from the Kubernetes objects ([`pods`]), and its NetworkPolicy agent's plan
//! ([`policy`]). The checks
//! themselves are the `doctor` crate's, pure over the snapshot, so live and bundle answers are
//! the same by construction.

pub mod bundle;
pub mod collect;
pub mod fix;
pub mod pods;
pub mod policy;
#[cfg(test)]
mod policy_tests;
pub mod replay;
