//! The components that drive each simulated node's hnsd, each the real one: the CNI plugins
//! ([`cni`]), flanneld's Windows backend ([`flannel`]), kube-proxy ([`proxy`]), the
//! NetworkPolicy agent ([`policy`]).

pub mod cni;
pub mod flannel;
pub mod policy;
pub mod proxy;
