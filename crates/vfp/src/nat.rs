//! Source NAT port pools: an address with a range of ports that connections are translated to.
//! HNS reserves such blocks for `OutBoundNAT` and for a load balancer's `SourceVIP`.
//!
//! A port is held per remote end, as a NAT needs (endpoint-dependent mapping): replies are told
//! apart by the whole 5-tuple, so one (address, port) serves any number of connections at once
//! as long as their remote (address, port, protocol) differ, and the ports run out for one
//! destination, never for all of them. Ports are handed out in turn from a cursor that goes
//! round the range, so a port given back is not taken again for the same remote end before the
//! cursor has come round. A closed TCP connection holds its port until its flow entry expires,
//! but gives it up sooner to a new connection to the same remote end if that end would take
//! the new SYN on the tuple although it may still wait in TIME-WAIT on it
//! (`TcpTracker::takes_new_syn`); Linux NAT evicts a closing connection the same way
//! (`nf_nat_used_tuple_harder`). The switch keeps a connection's translation when the same
//! tuple opens again.

use crate::headers::Headers;
use crate::wire::proto;
use hashbrown::HashMap;
use std::net::IpAddr;

/// Identifies an SNAT pool in a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(pub u16);

/// One port taken from a pool by a connection (for the remote end its record translates to).
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

/// The far end of a translated connection, which an SNAT port is unique for (within the port
/// class of its protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Remote {
    /// The remote address.
    pub ip: IpAddr,
    /// The remote port; 0 for ICMP echo, whose identifier is the only "port" and is the one
    /// translated.
    pub port: u16,
}

impl Remote {
    /// The remote end of a connection whose translated packets carry `h`.
    pub fn of(h: &Headers) -> Remote {
        Remote {
            ip: h.dst_ip,
            port: if h.is_icmp() { 0 } else { h.dst_port },
        }
    }
}

/// A holder not yet installed in the flow table (its connection is being set up).
pub(crate) const UNBOUND: u32 = u32::MAX;

/// What a pool's port class has done since the pool was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnatCounters {
    /// Ports handed out.
    pub allocated: u64,
    /// Of those, taken over from a closed connection that still held them (its flow entry is
    /// evicted).
    pub reclaimed: u64,
    /// Connections refused: every port was held for their remote end by a live connection.
    pub exhausted: u64,
}

/// How busy a pool's port class is now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnatUsage {
    /// (remote end, port) pairs held, over all remote ends.
    pub in_use: usize,
    /// Remote ends holding at least one port.
    pub remotes: usize,
    /// Ports held by the busiest remote end: the pressure on the pool, since a connection is
    /// refused only when its own remote end holds every port.
    pub busiest: usize,
}

/// The ports of one class (protocol namespace) of a pool.
#[derive(Debug, Clone, Default)]
struct ClassPorts {
    /// (remote end, port) -> flow table slot of the connection holding it, or `UNBOUND`.
    held: HashMap<(Remote, u16), u32>,
    /// Ports held per remote end.
    per_remote: HashMap<Remote, u32>,
    /// Offset in the range of the next port to try.
    next: u16,
    counters: SnatCounters,
}

/// Where a port came from.
enum Found {
    Free(u16),
    /// Held by the connection in this flow table slot, which may give it up.
    Reclaim(u16, u32),
}

impl ClassPorts {
    /// The port `remote` would take: `prefer` if it is free for it, else the first port from
    /// the cursor that is free or whose holder is `reclaimable`. Costs one lookup per port
    /// tried: few while ports come free about as fast as the cursor goes round, up to the
    /// whole range when every port is held for `remote` by a live connection.
    fn find(
        &self,
        range: (u16, u32),
        remote: Remote,
        prefer: Option<u16>,
        reclaimable: impl Fn(u32, u16) -> bool,
    ) -> Option<Found> {
        let (first, size) = range;
        if let Some(p) = prefer.filter(|p| u32::from(p.wrapping_sub(first)) < size)
            && !self.held.contains_key(&(remote, p))
        {
            return Some(Found::Free(p));
        }
        if !self.per_remote.contains_key(&remote) {
            return Some(Found::Free(first.wrapping_add(self.next)));
        }
        (0..size).find_map(|i| {
            let port = first.wrapping_add(((u32::from(self.next) + i) % size) as u16);
            match self.held.get(&(remote, port)) {
                None => Some(Found::Free(port)),
                Some(&slot) if slot != UNBOUND && reclaimable(slot, port) => {
                    Some(Found::Reclaim(port, slot))
                }
                Some(_) => None,
            }
        })
    }
}

/// An SNAT address with a range of ports, held per remote end and protocol class.
#[derive(Debug, Clone)]
pub struct SnatPool {
    /// The source address connections are translated to.
    pub ip: IpAddr,
    /// First port of the range.
    pub first: u16,
    /// Last port of the range (inclusive).
    pub last: u16,
    classes: [ClassPorts; 3],
}

impl SnatPool {
    fn new(ip: IpAddr, first: u16, last: u16) -> SnatPool {
        SnatPool {
            ip,
            first: first.min(last),
            last: first.max(last),
            classes: Default::default(),
        }
    }

    /// Ports in the range.
    pub fn size(&self) -> usize {
        usize::from(self.last - self.first) + 1
    }

    fn range(&self) -> (u16, u32) {
        (self.first, self.size() as u32)
    }

    fn class(&self, class: u8) -> Option<&ClassPorts> {
        self.classes.get(usize::from(class))
    }

    /// Ports of this class the busiest remote end has not taken: how many more connections
    /// to it the pool accepts before it must reclaim closed ones or refuse.
    pub fn available(&self, class: u8) -> usize {
        self.size() - self.usage(class).busiest
    }

    /// Ports of this class held by connections to `remote`.
    pub fn in_use_to(&self, class: u8, remote: Remote) -> usize {
        self.class(class)
            .and_then(|c| c.per_remote.get(&remote))
            .map_or(0, |&n| n as usize)
    }

    /// How busy this class is now.
    pub fn usage(&self, class: u8) -> SnatUsage {
        let Some(c) = self.class(class) else {
            return SnatUsage::default();
        };
        SnatUsage {
            in_use: c.held.len(),
            remotes: c.per_remote.len(),
            busiest: c.per_remote.values().max().map_or(0, |&n| n as usize),
        }
    }

    /// What this class has done since the pool was made.
    pub fn counters(&self, class: u8) -> SnatCounters {
        self.class(class).map(|c| c.counters).unwrap_or_default()
    }
}

/// A port `NatPools::alloc` handed out.
pub(crate) struct Taken {
    pub alloc: SnatAlloc,
    /// The flow table slot of the closed connection the port was taken from, which must go.
    pub reclaimed_from: Option<u32>,
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

    fn class_mut(&mut self, id: PoolId, class: u8) -> Option<(&mut ClassPorts, (u16, u32))> {
        let pool = self.pools.get_mut(usize::from(id.0))?.as_mut()?;
        let range = pool.range();
        Some((pool.classes.get_mut(usize::from(class))?, range))
    }

    /// Takes a port of `class` for a connection to `remote`: `prefer` if it is free for it,
    /// else the next one in turn that is free or held by a connection `reclaimable(slot,
    /// port)` says may give it up. `None` when every port is held for `remote` by a live
    /// connection (or the pool is gone).
    pub(crate) fn alloc(
        &mut self,
        id: PoolId,
        class: u8,
        remote: Remote,
        prefer: Option<u16>,
        reclaimable: impl Fn(u32, u16) -> bool,
    ) -> Option<Taken> {
        let (c, range) = self.class_mut(id, class)?;
        let Some(found) = c.find(range, remote, prefer, reclaimable) else {
            c.counters.exhausted += 1;
            return None;
        };
        let (port, reclaimed_from) = match found {
            Found::Free(port) => {
                *c.per_remote.entry(remote).or_default() += 1;
                (port, None)
            }
            Found::Reclaim(port, slot) => {
                c.counters.reclaimed += 1;
                (port, Some(slot))
            }
        };
        c.held.insert((remote, port), UNBOUND);
        c.counters.allocated += 1;
        if prefer != Some(port) {
            let offset = u32::from(port.wrapping_sub(range.0));
            c.next = ((offset + 1) % range.1) as u16;
        }
        Some(Taken {
            alloc: SnatAlloc {
                pool: id,
                class,
                port,
            },
            reclaimed_from,
        })
    }

    /// The port `alloc` would hand out, without taking it (for traces).
    pub(crate) fn peek(
        &self,
        id: PoolId,
        class: u8,
        remote: Remote,
        prefer: Option<u16>,
        reclaimable: impl Fn(u32, u16) -> bool,
    ) -> Option<u16> {
        let pool = self.get(id)?;
        match pool
            .class(class)?
            .find(pool.range(), remote, prefer, reclaimable)?
        {
            Found::Free(p) | Found::Reclaim(p, _) => Some(p),
        }
    }

    /// Records which flow table slot holds a port, so that the port can be reclaimed once
    /// that connection has closed.
    pub(crate) fn bind(&mut self, a: SnatAlloc, remote: Remote, slot: u32) {
        if let Some((c, _)) = self.class_mut(a.pool, a.class)
            && let Some(holder) = c.held.get_mut(&(remote, a.port))
        {
            *holder = slot;
        }
    }

    /// Returns a port held for `remote` to its pool (ignored if the pool was removed or the
    /// port is not held).
    pub(crate) fn release(&mut self, a: SnatAlloc, remote: Remote) {
        let Some((c, _)) = self.class_mut(a.pool, a.class) else {
            return;
        };
        if c.held.remove(&(remote, a.port)).is_none() {
            return;
        }
        if let Some(n) = c.per_remote.get_mut(&remote) {
            *n -= 1;
            if *n == 0 {
                c.per_remote.remove(&remote);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(ip: &str, port: u16) -> Remote {
        Remote {
            ip: ip.parse().unwrap(),
            port,
        }
    }

    fn take(p: &mut NatPools, id: PoolId, class: u8, r: Remote) -> Option<SnatAlloc> {
        p.alloc(id, class, r, None, |_, _| false).map(|t| t.alloc)
    }

    #[test]
    fn ports_are_unique_per_remote_end_and_go_round_in_turn() {
        let mut p = NatPools::default();
        let id = p.add("192.0.2.1".parse().unwrap(), 1000, 1002);
        let web = remote("10.0.0.5", 80);
        let a = take(&mut p, id, 0, web).unwrap();
        let b = take(&mut p, id, 0, web).unwrap();
        let c = take(&mut p, id, 0, web).unwrap();
        assert_eq!([a.port, b.port, c.port], [1000, 1001, 1002]);
        assert!(take(&mut p, id, 0, web).is_none());
        assert_eq!(p.get(id).unwrap().counters(0).exhausted, 1);
        // Another remote end (another port of the same address, too) has every port.
        for other in [remote("10.0.0.6", 80), remote("10.0.0.5", 443)] {
            assert!(take(&mut p, id, 0, other).is_some());
        }
        // UDP has its own namespace.
        assert!(take(&mut p, id, 1, web).is_some());
        let usage = p.get(id).unwrap().usage(0);
        assert_eq!((usage.in_use, usage.remotes, usage.busiest), (5, 3, 3));
        assert_eq!(p.get(id).unwrap().available(0), 0);
        // A port given back is taken again only when the cursor comes round to it.
        p.release(b, web);
        assert_eq!(p.get(id).unwrap().in_use_to(0, web), 2);
        assert_eq!(p.peek(id, 0, web, None, |_, _| false), Some(1001));
        assert_eq!(take(&mut p, id, 0, web).unwrap().port, 1001);
        p.release(a, web);
        p.release(a, web); // twice: ignored
        assert_eq!(p.get(id).unwrap().in_use_to(0, web), 2);
    }

    #[test]
    fn closed_holders_give_up_their_port_and_a_preferred_port_is_kept() {
        let mut p = NatPools::default();
        let id = p.add("192.0.2.1".parse().unwrap(), 1000, 1001);
        let web = remote("10.0.0.5", 80);
        let a = take(&mut p, id, 0, web).unwrap();
        let b = take(&mut p, id, 0, web).unwrap();
        p.bind(a, web, 7);
        p.bind(b, web, 8);
        // Slot 8 has closed: the next connection takes its port, and must evict it.
        let t = p.alloc(id, 0, web, None, |slot, _| slot == 8).unwrap();
        assert_eq!((t.alloc.port, t.reclaimed_from), (b.port, Some(8)));
        assert_eq!(p.get(id).unwrap().in_use_to(0, web), 2);
        assert_eq!(p.get(id).unwrap().counters(0).reclaimed, 1);
        // The cursor goes on to slot 7's port; then both are held by connections not yet
        // installed, which are never reclaimed.
        let t = p.alloc(id, 0, web, None, |_, _| true).unwrap();
        assert_eq!((t.alloc.port, t.reclaimed_from), (a.port, Some(7)));
        assert!(p.alloc(id, 0, web, None, |_, _| true).is_none());
        // Re-keyed for another remote end, the connection keeps its port when it can.
        let other = remote("10.0.0.6", 80);
        let t = p.alloc(id, 0, other, Some(1001), |_, _| false).unwrap();
        assert_eq!(t.alloc.port, 1001);
        assert_eq!(p.peek(id, 0, other, None, |_, _| false), Some(1000));
    }
}
