//! Rule actions: allow, block, or a header transposition, and how each changes a packet's
//! headers on the slow path. The fast path never looks at actions: it replays their combined
//! effect from the flow table.

use crate::counters::FlowCounters;
use crate::disposition::DropReason;
use crate::encap::Encap;
use crate::flow_table::{FlowRecord, FlowTable};
use crate::headers::{Headers, PacketHeaders};
use crate::lb::LoadBalancer;
use crate::nat::{NatPools, PoolId, Remote, SnatAlloc, port_class};
use crate::tcp_state::TcpMark;
use crate::wire::MacAddr;
use crate::wire::proto;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// What a matching rule does with a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Let the packet (and its connection) pass unchanged.
    Allow,
    /// Drop the packet.
    Block,
    /// Rewrite Ethernet addresses (L2Bridge / L2Tunnel container MAC <-> host MAC).
    MacRewrite {
        /// New source MAC.
        src: Option<MacAddr>,
        /// New destination MAC.
        dst: Option<MacAddr>,
    },
    /// Rewrite the destination (port mappings, DSR at the backend's own port).
    Dnat {
        /// New destination address.
        ip: IpAddr,
        /// New destination port (TCP/UDP only); `None` keeps it.
        port: Option<u16>,
    },
    /// Rewrite the source to a pool address and a port allocated for the connection
    /// (`OutBoundNAT`).
    Snat {
        /// The pool to allocate from.
        pool: PoolId,
    },
    /// Pick a backend and rewrite the destination to it (and the source, for non-DSR).
    LoadBalance(Arc<LoadBalancer>),
    /// Wrap the packet in VXLAN towards a remote provider address (`RemoteSubnetRoute`).
    Encap {
        /// The outer headers.
        outer: Arc<Encap>,
        /// Inner destination MAC to set (HNS `DistributedRouterMacAddress`).
        inner_dst_mac: Option<MacAddr>,
    },
    /// Remove VXLAN outer headers.
    Decap,
    /// Drop the packet as unsupported: what the reproduced Windows build does not do (ICMP
    /// through OutboundNAT, NodePort from the node itself, ...). The rule's origin names the
    /// limitation, so a trace can say why.
    Unsupported,
    /// Decide nothing here: the layer goes on to its next group (a `TierAcl` rule's `Pass`,
    /// which hands the packet to the next tier).
    Pass,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Allow => write!(f, "allow"),
            Action::Block => write!(f, "block"),
            Action::MacRewrite { src, dst } => {
                write!(f, "mac rewrite")?;
                if let Some(s) = src {
                    write!(f, " src={s}")?;
                }
                if let Some(d) = dst {
                    write!(f, " dst={d}")?;
                }
                Ok(())
            }
            Action::Dnat { ip, port: Some(p) } => write!(f, "dnat to {ip}:{p}"),
            Action::Dnat { ip, port: None } => write!(f, "dnat to {ip}"),
            Action::Snat { pool } => write!(f, "snat from pool {}", pool.0),
            Action::LoadBalance(lb) => {
                write!(
                    f,
                    "load balance over {} backends ({:?})",
                    lb.backends.len(),
                    lb.distribution
                )?;
                if let Some(p) = lb.source_nat {
                    write!(f, ", snat from pool {}", p.0)?;
                }
                if lb.preserve_dst {
                    write!(f, ", preserving the destination")?;
                }
                Ok(())
            }
            Action::Encap { outer, .. } => write!(f, "encap {outer}"),
            Action::Decap => write!(f, "decap"),
            Action::Unsupported => write!(f, "refuse as unsupported"),
            Action::Pass => write!(f, "pass to the next group"),
        }
    }
}

/// What an earlier evaluation of the same connection (or of an earlier connection on the same
/// tuple) chose, so that evaluating again keeps the backend and SNAT ports where the rules
/// still allow them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Prior {
    /// Final destination address and port of the connection.
    pub dst: Option<(IpAddr, u16)>,
    /// SNAT ports the connection holds.
    pub snat: [Option<SnatAlloc>; 2],
    /// The remote end those ports are held for.
    pub remote: Option<Remote>,
    /// The connection's flow table slot: it never gives up a port to itself.
    pub slot: Option<u32>,
}

impl Prior {
    /// What the cached connection `r` chose; `slot` is where it still lies in the table, if it
    /// does.
    pub(crate) fn of(r: &FlowRecord, slot: Option<u32>) -> Prior {
        let fin = r.fin();
        Prior {
            dst: Some((fin.dst_ip, fin.dst_port)),
            snat: r.snat,
            remote: Some(Remote::of(&fin)),
            slot,
        }
    }
}

/// Slow-path state threaded through the actions of one evaluation.
pub(crate) struct ActionCtx<'a> {
    pub pools: &'a mut NatPools,
    /// The cached connections: a closed one gives up its SNAT port to a new connection that
    /// needs it (and is evicted).
    pub flows: &'a mut FlowTable,
    pub counters: &'a mut FlowCounters,
    /// False in traces: show what would be allocated, allocate nothing.
    pub commit: bool,
    pub prior: Prior,
    /// The opening SYN's place in its sequence space, when the packet is one.
    pub syn: Option<TcpMark>,
    /// SNAT ports this evaluation holds (fresh or taken over from `prior`).
    pub snat: [Option<SnatAlloc>; 2],
    /// The remote end each of `snat` is held for.
    pub remotes: [Option<Remote>; 2],
    pub seed: u64,
}

/// True if the connection in `slot` is a closed TCP connection holding `port` of `pool` for
/// `remote` whose remote end would take `syn` on the same tuple (not answer it from
/// TIME-WAIT as a stray segment), so that it may give the port up.
fn closed_holder(
    flows: &FlowTable,
    own: Option<u32>,
    syn: Option<TcpMark>,
    (pool, class, remote): (PoolId, u8, Remote),
) -> impl Fn(u32, u16) -> bool + '_ {
    move |slot, port| {
        own != Some(slot)
            && flows.get(slot).is_some_and(|r| {
                r.proto() == proto::TCP
                    && r.tcp.takes_new_syn(syn)
                    && Remote::of(&r.fin()) == remote
                    && r.snat.contains(&Some(SnatAlloc { pool, class, port }))
            })
    }
}

impl ActionCtx<'_> {
    /// Takes a port for a connection: the prior one from this pool if it is held for the same
    /// remote end, else a new one (or, in a trace, the one that would be handed out).
    fn take_port(&mut self, pool: PoolId, class: u8, remote: Remote) -> Result<u16, DropReason> {
        if self.pools.get(pool).is_none() {
            return Err(DropReason::NoSuchPool);
        }
        let slot = self
            .snat
            .iter()
            .position(Option::is_none)
            .ok_or(DropReason::SnatExhausted)?;
        let same_remote = self.prior.remote == Some(remote);
        let reuse = self
            .prior
            .snat
            .iter_mut()
            .find(|a| same_remote && a.is_some_and(|a| a.pool == pool && a.class == class));
        let alloc = match reuse {
            Some(a) => a.take(),
            None => self.new_port(pool, class, remote, None),
        }
        .ok_or(DropReason::SnatExhausted)?;
        self.snat[slot] = Some(alloc);
        self.remotes[slot] = Some(remote);
        Ok(alloc.port)
    }

    /// A port of `pool` for `remote` (`prefer` if free), taken from a closed connection if
    /// need be, which is then evicted; in a trace, the port that would be taken.
    fn new_port(
        &mut self,
        pool: PoolId,
        class: u8,
        remote: Remote,
        prefer: Option<u16>,
    ) -> Option<SnatAlloc> {
        let closed = closed_holder(self.flows, self.prior.slot, self.syn, (pool, class, remote));
        if !self.commit {
            let port = self.pools.peek(pool, class, remote, prefer, closed)?;
            return Some(SnatAlloc { pool, class, port });
        }
        let taken = self.pools.alloc(pool, class, remote, prefer, closed)?;
        if let Some(slot) = taken.reclaimed_from
            && let Some(old) = self.flows.remove(slot)
        {
            self.counters.evicted += 1;
            let old_remote = Remote::of(&old.fin());
            for a in old.snat.into_iter().flatten() {
                if a != taken.alloc {
                    self.pools.release(a, old_remote);
                }
            }
        }
        Some(taken.alloc)
    }

    /// Makes every SNAT port of the evaluation unique for the remote end the packet finally
    /// goes to (`h`, after all layers): a layer after the SNAT may have changed the
    /// destination. The port is kept where it is free for the new remote end.
    pub(crate) fn settle(&mut self, h: &mut Headers) -> Result<(), DropReason> {
        let remote = Remote::of(h);
        for i in 0..self.snat.len() {
            let (Some(a), Some(was)) = (self.snat[i], self.remotes[i]) else {
                continue;
            };
            if was == remote {
                continue;
            }
            let b = self
                .new_port(a.pool, a.class, remote, Some(a.port))
                .ok_or(DropReason::SnatExhausted)?;
            if self.commit {
                self.pools.release(a, was);
            }
            self.snat[i] = Some(b);
            self.remotes[i] = Some(remote);
            let pool_ip = self.pools.get(a.pool).map(|p| p.ip);
            if b.port != a.port && Some(h.src_ip) == pool_ip && h.src_port == a.port {
                h.src_port = b.port;
                if h.is_icmp() {
                    h.dst_port = b.port;
                }
            }
        }
        Ok(())
    }
}

/// Applies `action` to the headers; an error is the reason the packet is dropped.
pub(crate) fn apply(
    action: &Action,
    h: &mut PacketHeaders,
    cx: &mut ActionCtx<'_>,
) -> Result<(), DropReason> {
    match action {
        Action::Allow => {}
        Action::Block => return Err(DropReason::BlockedByRule),
        Action::MacRewrite { src, dst } => {
            h.inner.src_mac = src.unwrap_or(h.inner.src_mac);
            h.inner.dst_mac = dst.unwrap_or(h.inner.dst_mac);
        }
        Action::Dnat { ip, port } => {
            h.inner.dst_ip = *ip;
            if let Some(p) = port
                && !h.inner.is_icmp()
                && h.inner.has_ports()
            {
                h.inner.dst_port = *p;
            }
        }
        Action::Snat { pool } => snat(h, *pool, cx)?,
        Action::LoadBalance(lb) => load_balance(lb, h, cx)?,
        Action::Encap {
            outer,
            inner_dst_mac,
        } => {
            h.outer = Some(outer.clone());
            h.inner.dst_mac = inner_dst_mac.unwrap_or(h.inner.dst_mac);
        }
        Action::Decap => h.outer = None,
        Action::Unsupported => return Err(DropReason::Unsupported),
        // The layer hands the packet on before a Pass rule could act ([`Layer`]'s lookup).
        Action::Pass => {}
    }
    Ok(())
}

fn snat(h: &mut PacketHeaders, pool: PoolId, cx: &mut ActionCtx<'_>) -> Result<(), DropReason> {
    let ip = cx.pools.get(pool).ok_or(DropReason::NoSuchPool)?.ip;
    if ip.is_ipv4() != h.inner.src_ip.is_ipv4() {
        return Err(DropReason::RewriteFailed);
    }
    h.inner.src_ip = ip;
    if let Some(class) = port_class(h.inner.proto) {
        let port = cx.take_port(pool, class, Remote::of(&h.inner))?;
        h.inner.src_port = port;
        if h.inner.is_icmp() {
            // The echo identifier lives in both "ports" (see `Headers`).
            h.inner.dst_port = port;
        }
    }
    Ok(())
}

fn load_balance(
    lb: &LoadBalancer,
    h: &mut PacketHeaders,
    cx: &mut ActionCtx<'_>,
) -> Result<(), DropReason> {
    let b = *lb
        .select(&h.inner, cx.seed, cx.prior.dst)
        .ok_or(DropReason::NoBackends)?;
    // The destination can only be preserved for a backend reached by MAC (a local one);
    // a remote backend is translated as usual.
    if !lb.preserve_dst || b.mac.is_none() {
        if b.ip.is_ipv4() != h.inner.dst_ip.is_ipv4() {
            return Err(DropReason::RewriteFailed);
        }
        h.inner.dst_ip = b.ip;
        if let Some(p) = b.port
            && !h.inner.is_icmp()
        {
            h.inner.dst_port = p;
        }
    }
    if let Some(mac) = b.mac {
        h.inner.dst_mac = mac;
    }
    if let Some(pool) = lb.source_nat {
        snat(h, pool, cx)?;
    }
    Ok(())
}
