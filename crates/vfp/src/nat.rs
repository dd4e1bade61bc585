//! Source NAT port pools: the (address, port) pairs SNAT hands out, one per connection, so that
//! replies can be mapped back. HNS reserves such blocks for `OutBoundNAT` and for a load
//! balancer's `SourceVIP`.

use crate::wire::proto;
use std::collections::VecDeque;
use std::net::IpAddr;

/// Identifies an SNAT pool in a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(pub u16);

/// One port taken from a pool by a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnatAlloc {
    /// The pool.
    pub pool: PoolId,
    /// Port namespace: 0 TCP, 1 UDP, 2 ICMP echo identifiers.
    pub(crate) class: u8,
    /// The port (or identifier) handed out.
    pub port: u16,
}

/// The port namespace of a protocol; protocols without ports have none.
pub(crate) fn port_class(p: u8) -> Option<u8> {
    match p {
        proto::TCP => Some(0),
        proto::UDP => Some(1),
        proto::ICMP | proto::ICMPV6 => Some(2),
        _ => None,
    }
}

/// An SNAT address with a range of ports, handed out per protocol in FIFO order: a released
/// port goes to the back, so it is not reused while stray packets of its old flow may linger.
#[derive(Debug, Clone)]
pub struct SnatPool {
    /// The source address connections are translated to.
    pub ip: IpAddr,
    /// First port of the range.
    pub first: u16,
    /// Last port of the range (inclusive).
    pub last: u16,
    /// Free ports per class, created on first use.
    free: [Option<VecDeque<u16>>; 3],
}

impl SnatPool {
    fn new(ip: IpAddr, first: u16, last: u16) -> SnatPool {
        SnatPool {
            ip,
            first: first.min(last),
            last: first.max(last),
            free: [None, None, None],
        }
    }

    fn free_list(&mut self, class: u8) -> &mut VecDeque<u16> {
        let (first, last) = (self.first, self.last);
        self.free[usize::from(class)].get_or_insert_with(|| (first..=last).collect())
    }

    /// Ports of this class not handed out.
    pub fn available(&self, class: u8) -> usize {
        match &self.free[usize::from(class)] {
            Some(f) => f.len(),
            None => usize::from(self.last - self.first) + 1,
        }
    }
}

/// All SNAT pools of a switch.
#[derive(Debug, Clone, Default)]
pub struct NatPools {
    pools: Vec<Option<SnatPool>>,
}

impl NatPools {
    /// Adds a pool of `ip` with ports `first..=last`.
    pub fn add(&mut self, ip: IpAddr, first: u16, last: u16) -> PoolId {
        let pool = Some(SnatPool::new(ip, first, last));
        match self.pools.iter().position(Option::is_none) {
            Some(i) => {
                self.pools[i] = pool;
                PoolId(i as u16)
            }
            None => {
                self.pools.push(pool);
                PoolId((self.pools.len() - 1) as u16)
            }
        }
    }

    /// Removes a pool; connections using it are re-evaluated by the caller.
    pub fn remove(&mut self, id: PoolId) -> Option<SnatPool> {
        self.pools.get_mut(usize::from(id.0)).and_then(Option::take)
    }

    /// The pool, if it exists.
    pub fn get(&self, id: PoolId) -> Option<&SnatPool> {
        self.pools.get(usize::from(id.0)).and_then(Option::as_ref)
    }

    /// Takes a free port of `class`; `None` when exhausted.
    pub(crate) fn alloc(&mut self, id: PoolId, class: u8) -> Option<SnatAlloc> {
        let pool = self.pools.get_mut(usize::from(id.0))?.as_mut()?;
        let port = pool.free_list(class).pop_front()?;
        Some(SnatAlloc {
            pool: id,
            class,
            port,
        })
    }

    /// The port `alloc` would hand out next, without taking it (for traces).
    pub(crate) fn peek(&self, id: PoolId, class: u8) -> Option<u16> {
        let pool = self.get(id)?;
        match &pool.free[usize::from(class)] {
            Some(f) => f.front().copied(),
            None => Some(pool.first),
        }
    }

    /// Returns a port to its pool (ignored if the pool was removed or the port is outside it).
    pub(crate) fn release(&mut self, a: SnatAlloc) {
        if let Some(Some(pool)) = self.pools.get_mut(usize::from(a.pool.0))
            && (pool.first..=pool.last).contains(&a.port)
        {
            pool.free_list(a.class).push_back(a.port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_unique_until_released_then_reused_last() {
        let mut p = NatPools::default();
        let id = p.add("192.0.2.1".parse().unwrap(), 1000, 1002);
        let a = p.alloc(id, 0).unwrap();
        let b = p.alloc(id, 0).unwrap();
        let c = p.alloc(id, 0).unwrap();
        assert_eq!([a.port, b.port, c.port], [1000, 1001, 1002]);
        assert!(p.alloc(id, 0).is_none());
        // UDP has its own namespace.
        assert_eq!(p.alloc(id, 1).unwrap().port, 1000);
        p.release(b);
        assert_eq!(p.peek(id, 0), Some(1001));
        assert_eq!(p.alloc(id, 0).unwrap().port, 1001);
        assert_eq!(p.get(id).unwrap().available(0), 0);
    }
}
