//! Load balancing: a VIP's backends (DIPs) and how a connection picks one, as HNS's
//! `HostComputeLoadBalancer` with its `DistributionType`.

use crate::headers::Headers;
use crate::nat::PoolId;
use crate::wire::MacAddr;
use std::hash::BuildHasher;
use std::net::IpAddr;

/// Which packets stick to the same backend (HNS `LoadBalancerDistribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// Per connection: the 5-tuple picks the backend (HNS `None` = 0).
    None,
    /// Same client address and protocol, same backend (HNS `SourceIPProtocol` = 1).
    SourceIpProtocol,
    /// Same client address, same backend (HNS `SourceIP` = 2; Kubernetes ClientIP affinity).
    SourceIp,
}

/// One backend (DIP) of a load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Backend {
    /// Backend address.
    pub ip: IpAddr,
    /// Backend port (HNS `InternalPort`); `None` keeps the destination port.
    pub port: Option<u16>,
    /// Backend MAC, when it is a local endpoint the frame should be addressed to directly.
    pub mac: Option<MacAddr>,
}

/// A load balancer action: pick a backend and rewrite the destination to it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LoadBalancer {
    /// The backends (HNS `HostComputeEndpoints`).
    pub backends: Vec<Backend>,
    /// How connections map to backends.
    pub distribution: Distribution,
    /// Non-DSR: also translate the source to this pool (HNS `SourceVIP`). `None` is DSR-style:
    /// the backend sees the client's address and replies come back through this flow.
    pub source_nat: Option<PoolId>,
    /// PreserveDIP: keep the VIP as destination and only address the frame to the backend's
    /// MAC. Only backends with a MAC (local ones) keep the VIP; the others are translated.
    pub preserve_dst: bool,
}

impl LoadBalancer {
    /// A per-connection load balancer with no source NAT.
    pub fn new(backends: Vec<Backend>) -> LoadBalancer {
        LoadBalancer {
            backends,
            distribution: Distribution::None,
            source_nat: None,
            preserve_dst: false,
        }
    }

    /// The backend for a packet with headers `h`. Deterministic for a given `seed`, so tests
    /// and traces are repeatable; `prior` (the backend a re-evaluated connection already uses)
    /// wins while it is still a backend, so rule changes do not move live connections.
    pub fn select(&self, h: &Headers, seed: u64, prior: Option<(IpAddr, u16)>) -> Option<&Backend> {
        if let Some((ip, port)) = prior
            && let Some(b) = self
                .backends
                .iter()
                .find(|b| b.ip == ip && b.port.unwrap_or(h.dst_port) == port)
        {
            return Some(b);
        }
        if self.backends.is_empty() {
            return None;
        }
        let s = foldhash::fast::FixedState::with_seed(seed);
        let hash = match self.distribution {
            Distribution::None => s.hash_one((h.src_ip, h.dst_ip, h.proto, h.src_port, h.dst_port)),
            Distribution::SourceIpProtocol => s.hash_one((h.src_ip, h.proto)),
            Distribution::SourceIp => s.hash_one(h.src_ip),
        };
        self.backends
            .get((hash % self.backends.len() as u64) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::proto;

    fn backends(n: u8) -> Vec<Backend> {
        (0..n)
            .map(|i| Backend {
                ip: IpAddr::from([10, 1, 0, i]),
                port: Some(8080),
                mac: None,
            })
            .collect()
    }

    fn client(port: u16, proto: u8) -> Headers {
        Headers {
            src_ip: "10.2.0.7".parse().unwrap(),
            dst_ip: "10.96.0.1".parse().unwrap(),
            proto,
            src_port: port,
            dst_port: 80,
            ..Headers::empty()
        }
    }

    #[test]
    fn source_ip_affinity_keeps_a_client_on_one_backend() {
        let mut lb = LoadBalancer::new(backends(8));
        lb.distribution = Distribution::SourceIp;
        let first = lb.select(&client(1, proto::TCP), 7, None).unwrap().ip;
        for p in 2..200 {
            assert_eq!(
                lb.select(&client(p, proto::UDP), 7, None).unwrap().ip,
                first
            );
        }
    }

    #[test]
    fn per_connection_spreads_and_prior_backend_sticks() {
        let lb = LoadBalancer::new(backends(4));
        let used: std::collections::HashSet<_> = (0..200)
            .map(|p| lb.select(&client(p, proto::TCP), 7, None).unwrap().ip)
            .collect();
        assert_eq!(used.len(), 4);
        let prior = Some((IpAddr::from([10, 1, 0, 3]), 8080));
        for p in 0..50 {
            let b = lb.select(&client(p, proto::TCP), 7, prior).unwrap();
            assert_eq!(b.ip, IpAddr::from([10, 1, 0, 3]));
        }
        assert!(
            LoadBalancer::new(vec![])
                .select(&client(1, 6), 7, None)
                .is_none()
        );
    }
}
