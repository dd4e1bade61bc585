//! The virtual switch: ports, forwarding, the unified flow table, and packet processing.
//! `process` is the data path; `trace` explains a packet with the same code and no side
//! effects; the remaining methods are the programming API a compiler (HNS objects -> rules)
//! calls.

use crate::action::Prior;
use crate::counters::FlowCounters;
use crate::disposition::{Disposition, DropReason};
use crate::encap::{self, OuterCache};
use crate::error::ConfigError;
use crate::flow_table::{FlowRecord, FlowTable};
use crate::forwarding::{Decision, Forwarding};
use crate::fragments::Fragments;
use crate::frame::Frame;
use crate::headers::{FlowKey, PacketHeaders};
use crate::layer::Layer;
use crate::nat::{NatPools, PoolId, Remote, SnatAlloc, SnatPool};
use crate::neighbor;
use crate::parse::{self, Kind, L4Kind, ParseContext, Parsed};
use crate::pipeline::{self, Env, Evaluation, Stop};
use crate::port::{Port, PortConfig, PortId, PortKind};
use crate::tcp_state::{FlowSide, FlowTimeouts, TcpPhase, TcpTracker};
use crate::time::Timestamp;
use crate::transform;
use crate::wire::{self, MacAddr, TcpFlags, proto};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

mod fast_path;
mod reset;

/// Whether the switch reaches a physical network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SwitchKind {
    /// Bound to a NIC: unknown destinations go to the uplink.
    External,
    /// Host and containers only: unknown destinations are dropped.
    Internal,
}

/// How to build a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchConfig {
    /// External or internal.
    pub kind: SwitchKind,
    /// The VXLAN UDP port (HNS `VxlanPort`; 4789 by default).
    pub vxlan_port: u16,
    /// Most connections the flow table holds.
    pub max_flows: usize,
    /// Idle timeouts.
    pub timeouts: FlowTimeouts,
    /// Seed of the flow hash and load-balancer hash. Fixed by default so runs repeat; set it
    /// from a random source in production so that flows cannot be crafted to collide.
    pub seed: u64,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            kind: SwitchKind::External,
            vxlan_port: wire::VXLAN_PORT,
            max_flows: 1 << 20,
            timeouts: FlowTimeouts::default(),
            seed: 0x5eed_f10e,
        }
    }
}

/// A VFP-style virtual switch.
#[derive(Debug)]
pub struct Switch {
    config: SwitchConfig,
    ports: Vec<Option<Port>>,
    fwd: Forwarding,
    pools: NatPools,
    pub(crate) flows: FlowTable,
    fragments: Fragments,
    /// Bumped by changes outside any port (addresses, pools, ports added or removed).
    topo_gen: u32,
    /// The shortest of the configured timeouts, in nanoseconds (compared with a timestamp
    /// difference on every packet, without building a `Duration`).
    min_timeout_nanos: u64,
    counters: FlowCounters,
    /// Outer headers of the tunnels the fast path encapsulates into.
    outers: OuterCache,
    /// Connections reset and not yet told so ([`Switch::reset_connections`]).
    resets: reset::Resets,
}

/// Rewrites `frame` the way the connection in `r` rewrites packets of `side`, and returns the
/// port they leave by.
#[inline(always)]
fn replay(
    r: &FlowRecord,
    side: FlowSide,
    frame: &mut Frame,
    p: &Parsed,
) -> Result<PortId, wire::WireError> {
    match side {
        FlowSide::Forward => {
            let t = r.fin();
            transform::apply(frame, p, &t, r.fin_outer.as_deref(), r.entropy).map(|()| r.port_b)
        }
        FlowSide::Reverse => {
            let t = r.orig().reversed();
            transform::apply(frame, p, &t, r.rev_outer.as_deref(), r.entropy).map(|()| r.port_a)
        }
    }
}

/// Records a connection's forward FIN, which its remote end's TIME-WAIT will compare a new
/// SYN on the same tuple with (so SNAT knows when the tuple may be handed out again).
#[cold]
#[inline(never)]
fn forward_fin(r: &mut FlowRecord, frame: &Frame, p: &Parsed) {
    if let Some(m) = parse::tcp_mark(frame.bytes(), p) {
        r.tcp.forward_fin(m);
    }
}

/// True if `r` was evaluated under the rules its ports and the switch (generation `topo_gen`)
/// hold now.
#[inline(always)]
fn fresh(ports: &[Option<Port>], topo_gen: u32, r: &FlowRecord) -> bool {
    let g = |id: u16| {
        ports
            .get(usize::from(id))
            .and_then(Option::as_ref)
            .map(|p| p.generation)
    };
    evaluated_at(r, [g(r.port_a), g(r.port_b)], topo_gen)
}

/// True if `r` was evaluated when its ports had the generations `ports` (`None`: the port is
/// gone) and the switch `topo_gen`.
#[inline(always)]
fn evaluated_at(r: &FlowRecord, ports: [Option<u32>; 2], topo_gen: u32) -> bool {
    Some(r.generation[0]) == ports[0]
        && Some(r.generation[1]) == ports[1]
        && r.generation[2] == topo_gen
}

/// The idle timeout of the connection in `r`.
fn timeout(t: &FlowTimeouts, r: &FlowRecord) -> Duration {
    match r.proto() {
        proto::TCP => t.tcp(r.tcp.phase()),
        proto::UDP => t.udp,
        _ => t.other,
    }
}

/// True if the connection in `r` has been idle longer than its timeout (`min_timeout_nanos`:
/// the shortest of them all).
#[inline(always)]
fn idle_out(t: &FlowTimeouts, min_timeout_nanos: u64, r: &FlowRecord, now: Timestamp) -> bool {
    // Most packets follow their predecessor within the shortest timeout; only the others pay
    // for working out the connection's phase.
    let idle_nanos = now.as_nanos().saturating_sub(r.last_seen.as_nanos());
    idle_nanos > min_timeout_nanos && now.since(r.last_seen) > timeout(t, r)
}

/// What a flow-table lookup found.
pub(crate) enum Cached {
    Hit(u32, FlowSide),
    Stale(u32),
    Gone(u32),
    Miss,
}

impl Switch {
    /// An empty switch.
    pub fn new(config: SwitchConfig) -> Switch {
        let flows = FlowTable::new(config.max_flows, config.seed);
        let t = &config.timeouts;
        let min_timeout = [
            t.tcp_opening,
            t.tcp_established,
            t.tcp_closing,
            t.tcp_closed,
            t.udp,
            t.other,
        ]
        .into_iter()
        .min()
        .unwrap_or_default();
        let min_timeout_nanos = u64::try_from(min_timeout.as_nanos()).unwrap_or(u64::MAX);
        Switch {
            min_timeout_nanos,
            config,
            ports: Vec::new(),
            fwd: Forwarding::default(),
            pools: NatPools::default(),
            flows,
            fragments: Fragments::default(),
            topo_gen: 0,
            counters: FlowCounters::default(),
            outers: OuterCache::default(),
            resets: reset::Resets::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SwitchConfig {
        &self.config
    }

    fn touch(&mut self) {
        self.topo_gen = self.topo_gen.wrapping_add(1);
    }

    /// Adds a port. An uplink is refused on an internal switch or if one exists.
    pub fn add_port(&mut self, config: PortConfig) -> Result<PortId, ConfigError> {
        self.check_uplink(&config)?;
        let slot = match self.ports.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.ports.len() < usize::from(u16::MAX) => {
                self.ports.push(None);
                self.ports.len() - 1
            }
            None => return Err(ConfigError::TooManyPorts),
        };
        Ok(self.install_port(slot, config))
    }

    /// Adds a port with the number `id`, refused if a port has it: a switch rebuilt from a
    /// record (a support bundle) keeps the numbers the live one gave, so that a trace on it
    /// names the same ports.
    pub fn add_port_as(&mut self, id: PortId, config: PortConfig) -> Result<PortId, ConfigError> {
        self.check_uplink(&config)?;
        let slot = usize::from(id);
        if self.ports.get(slot).is_some_and(Option::is_some) {
            return Err(ConfigError::Duplicate(format!("port {id}")));
        }
        if self.ports.len() <= slot {
            self.ports.resize_with(slot + 1, || None);
        }
        Ok(self.install_port(slot, config))
    }

    fn check_uplink(&self, config: &PortConfig) -> Result<(), ConfigError> {
        if config.kind == PortKind::Uplink {
            if self.config.kind == SwitchKind::Internal {
                return Err(ConfigError::Uplink("an internal switch has no uplink"));
            }
            if self.fwd.uplink.is_some() {
                return Err(ConfigError::Uplink("the switch already has an uplink"));
            }
        }
        Ok(())
    }

    fn install_port(&mut self, slot: usize, config: PortConfig) -> PortId {
        let id = slot as PortId;
        let port = Port::new(id, config);
        self.fwd.add_port(&port);
        if port.kind() == PortKind::Uplink {
            self.fwd.uplink = Some(id);
        }
        self.ports[slot] = Some(port);
        self.touch();
        id
    }

    /// Removes a port; connections through it are dropped when next seen or expired.
    pub fn remove_port(&mut self, id: PortId) -> Result<Port, ConfigError> {
        let port = self
            .ports
            .get_mut(usize::from(id))
            .and_then(Option::take)
            .ok_or(ConfigError::UnknownPort(id))?;
        self.fwd.remove_port(&port);
        if self.fwd.uplink == Some(id) {
            self.fwd.uplink = None;
        }
        self.touch();
        Ok(port)
    }

    /// A port.
    pub fn port(&self, id: PortId) -> Option<&Port> {
        self.ports.get(usize::from(id))?.as_ref()
    }

    /// A port, to change its layers (each `layer_mut` marks its cached flows stale).
    pub fn port_mut(&mut self, id: PortId) -> Result<&mut Port, ConfigError> {
        self.ports
            .get_mut(usize::from(id))
            .and_then(Option::as_mut)
            .ok_or(ConfigError::UnknownPort(id))
    }

    /// Shortcut for `port_mut(port)?.layer_mut(name)`.
    pub fn layer_mut(&mut self, port: PortId, name: &str) -> Result<&mut Layer, ConfigError> {
        self.port_mut(port)?.layer_mut(name)
    }

    /// Every port.
    pub fn ports(&self) -> impl Iterator<Item = &Port> {
        self.ports.iter().flatten()
    }

    /// Ports a flooded frame from `from` is copied to: the others on its virtual network.
    pub fn flood_targets(&self, from: PortId) -> impl Iterator<Item = PortId> + '_ {
        let vni = self.port(from).map(|p| p.config().vni);
        self.ports()
            .filter(move |p| p.id() != from && Some(p.config().vni) == vni)
            .map(Port::id)
    }

    /// Makes the switch answer ARP / neighbour solicitations for `ip` with `mac`, and route
    /// frames addressed to `mac` by their destination IP (a gateway).
    pub fn own_address(&mut self, ip: IpAddr, mac: MacAddr) {
        self.fwd.own(ip, mac);
        self.touch();
    }

    /// Stops answering for `ip`.
    pub fn disown_address(&mut self, ip: IpAddr) {
        self.fwd.disown(ip);
        self.touch();
    }

    /// Adds a provider address of this host: VXLAN frames to it are delivered by VNI and inner
    /// destination (and decapsulated by a `Decap` rule on the port).
    pub fn add_provider_address(&mut self, ip: IpAddr) {
        if !self.fwd.provider_addrs.contains(&ip) {
            self.fwd.provider_addrs.push(ip);
        }
        self.touch();
    }

    /// Removes a provider address.
    pub fn remove_provider_address(&mut self, ip: IpAddr) {
        self.fwd.provider_addrs.retain(|a| *a != ip);
        self.touch();
    }

    /// Adds an SNAT pool of `ip` with ports `first..=last`, for `Snat` and load-balancer
    /// `source_nat` actions.
    pub fn add_snat_pool(&mut self, ip: IpAddr, first: u16, last: u16) -> PoolId {
        self.pools.add(ip, first, last)
    }

    /// Removes an SNAT pool; connections using it are re-evaluated when next seen.
    pub fn remove_snat_pool(&mut self, id: PoolId) -> Option<SnatPool> {
        self.touch();
        self.pools.remove(id)
    }

    /// An SNAT pool.
    pub fn snat_pool(&self, id: PoolId) -> Option<&SnatPool> {
        self.pools.get(id)
    }

    /// The flow table (read-only).
    pub fn flows(&self) -> &FlowTable {
        &self.flows
    }

    /// Pre-sizes the flow table for `n` connections.
    pub fn reserve_flows(&mut self, n: usize) {
        self.flows.reserve(n);
    }

    /// Flow table counters.
    pub fn flow_counters(&self) -> &FlowCounters {
        &self.counters
    }

    pub(crate) fn parse_ctx(&self) -> ParseContext<'_> {
        ParseContext {
            vxlan_port: self.config.vxlan_port,
            provider_addrs: &self.fwd.provider_addrs,
        }
    }

    pub(crate) fn out_disposition(&self, to: PortId) -> Disposition {
        match self.port(to).map(Port::kind) {
            Some(PortKind::Uplink) => Disposition::Uplink(to),
            Some(_) => Disposition::Deliver(to),
            None => Disposition::Drop(DropReason::UnknownPort),
        }
    }

    /// Processes one frame that entered at port `from`: on return the frame holds the bytes to
    /// send, and the disposition says where.
    pub fn process(&mut self, from: PortId, frame: &mut Frame, now: Timestamp) -> Disposition {
        if let Some(d) = self.fast_path(from, frame, now) {
            return d;
        }
        self.process_general(from, frame, now)
    }

    /// `process` for any frame: parsed in full, then answered, forwarded at layer 2, flooded,
    /// replayed from the flow table or run through the layers. Kept out of `process`, so that
    /// the fast path there is compiled as a small function of its own.
    #[inline(never)]
    fn process_general(&mut self, from: PortId, frame: &mut Frame, now: Timestamp) -> Disposition {
        let rx = frame.len();
        let mut p = Parsed::at(0);
        let d = match parse::parse_into(frame.bytes(), &self.parse_ctx(), &mut p) {
            Ok(()) => self.dispatch(from, frame, &p, now),
            Err(_) => Disposition::Drop(DropReason::Malformed),
        };
        self.account(from, rx, frame.len(), d);
        d
    }

    fn account(&mut self, from: PortId, rx: usize, tx: usize, d: Disposition) {
        if let Some(p) = self
            .ports
            .get_mut(usize::from(from))
            .and_then(Option::as_mut)
        {
            p.counters.rx_packets += 1;
            p.counters.rx_bytes += rx as u64;
            if let Disposition::Drop(r) = d {
                p.counters.drops[r.idx()] += 1;
            }
        }
        if let Disposition::Deliver(to) | Disposition::Uplink(to) | Disposition::Reply(to) = d
            && let Some(p) = self.ports.get_mut(usize::from(to)).and_then(Option::as_mut)
        {
            p.counters.tx_packets += 1;
            p.counters.tx_bytes += tx as u64;
        }
    }

    fn dispatch(
        &mut self,
        from: PortId,
        frame: &mut Frame,
        p: &Parsed,
        now: Timestamp,
    ) -> Disposition {
        // IP packets need no check here: a cached flow only exists for a live port (removing
        // a port makes its flows stale), and the slow path refuses an unknown one.
        if p.kind != Kind::Ip && self.port(from).is_none() {
            return Disposition::Drop(DropReason::UnknownPort);
        }
        match (p.kind, &p.l4_kind) {
            (Kind::Ip, L4Kind::NeighborDiscovery { .. }) | (Kind::Arp, _) | (Kind::Other, _) => {
                self.layer2(from, frame, p)
            }
            _ if p.headers.dst_mac.is_group() && p.outer.is_none() => Disposition::Flood { from },
            (Kind::Ip, L4Kind::IcmpError(_)) => self.icmp_error(from, frame, p),
            (Kind::Ip, _) => self.ip(from, frame, p, now),
        }
    }

    /// ARP, neighbour discovery and non-IP frames: answered if for an owned address, else
    /// forwarded by MAC without the layers.
    pub(crate) fn layer2(&mut self, from: PortId, frame: &mut Frame, p: &Parsed) -> Disposition {
        if p.outer.is_some() {
            return Disposition::Drop(DropReason::EncapsulatedNonIp);
        }
        let answered = match p.kind {
            Kind::Arp => neighbor::answer_arp(frame, p, &self.fwd.owned),
            Kind::Ip => neighbor::answer_ns(frame, p, &self.fwd.owned),
            Kind::Other => false,
        };
        if answered {
            return Disposition::Reply(from);
        }
        let vni = self.port(from).map_or(0, |port| port.config().vni);
        match self.fwd.l2(from, vni, p.headers.dst_mac) {
            Decision::To(to, _) => self.out_disposition(to),
            Decision::Flood => Disposition::Flood { from },
            Decision::Drop(r) => Disposition::Drop(r),
        }
    }

    fn is_fresh(&self, r: &FlowRecord) -> bool {
        fresh(&self.ports, self.topo_gen, r)
    }

    fn timeout(&self, r: &FlowRecord) -> Duration {
        timeout(&self.config.timeouts, r)
    }

    /// True if the connection has been idle longer than its timeout.
    #[inline(always)]
    fn idle_out(&self, r: &FlowRecord, now: Timestamp) -> bool {
        idle_out(&self.config.timeouts, self.min_timeout_nanos, r, now)
    }

    pub(crate) fn lookup(&self, key: &FlowKey, p: &Parsed, now: Timestamp) -> Cached {
        let Some((slot, side)) = self.flows.find(key, self.flows.hash(key)) else {
            return Cached::Miss;
        };
        let Some(r) = self.flows.get(slot) else {
            return Cached::Miss;
        };
        let flags = TcpFlags(p.tcp_flags());
        let reopened = flags.has(TcpFlags::SYN)
            && !flags.has(TcpFlags::ACK)
            && side == FlowSide::Forward
            && r.tcp.phase() == TcpPhase::Closed;
        if reopened || self.idle_out(r, now) {
            Cached::Gone(slot)
        } else if self.is_fresh(r) {
            Cached::Hit(slot, side)
        } else {
            Cached::Stale(slot)
        }
    }

    /// An IP packet: the fast path if its connection is cached, else the layers.
    fn ip(&mut self, from: PortId, frame: &mut Frame, p: &Parsed, now: Timestamp) -> Disposition {
        if p.fragment.is_some_and(|f| f.later)
            && let Some((slot, side)) = self.fragments.later(from, p, &self.flows, now)
            && self.flows.get(slot).is_some_and(|r| self.is_fresh(r))
        {
            return self.fast(from, slot, side, frame, p, now);
        }
        let key = p.flow_key(from);
        let mut prior = Prior::default();
        for _ in 0..2 {
            match self.lookup(&key, p, now) {
                Cached::Hit(slot, side) => return self.fast(from, slot, side, frame, p, now),
                Cached::Stale(slot) => {
                    self.reevaluate(slot);
                }
                Cached::Gone(slot) => {
                    // The same tuple again (a SYN after the close, or traffic after the idle
                    // timeout): the new connection takes over the old one's SNAT ports (and
                    // backend) where the rules still give them, so that the remote end sees
                    // the tuple it saw before, as it would without NAT.
                    self.counters.expired += 1;
                    if let Some(old) = self.flows.remove(slot) {
                        prior = Prior::of(&old, None);
                    }
                }
                Cached::Miss => break,
            }
        }
        if let Some(d) = self.answer_reset(from, frame, p) {
            return d;
        }
        self.slow(from, frame, p, now, prior)
    }

    /// Replays a cached connection's transposition.
    #[inline]
    fn fast(
        &mut self,
        from: PortId,
        slot: u32,
        side: FlowSide,
        frame: &mut Frame,
        p: &Parsed,
        now: Timestamp,
    ) -> Disposition {
        let len = frame.len() as u64;
        let flags = p.tcp_flags();
        if p.fragment.is_some() {
            self.fragments.first(from, p, slot, side, now);
        }
        let Some(r) = self.flows.get_mut(slot) else {
            return Disposition::Drop(DropReason::UnknownPort);
        };
        r.last_seen = now;
        r.packets += 1;
        r.bytes += len;
        if flags != 0 {
            r.tcp.observe(side, flags);
            if flags & TcpFlags::FIN != 0 && side == FlowSide::Forward {
                forward_fin(r, frame, p);
            }
        }
        let res = replay(r, side, frame, p);
        self.counters.hits += 1;
        if let Some(port) = self
            .ports
            .get_mut(usize::from(from))
            .and_then(Option::as_mut)
        {
            port.counters.fast_path += 1;
        }
        match res {
            Ok(to) => self.out_disposition(to),
            Err(_) => Disposition::Drop(DropReason::RewriteFailed),
        }
    }

    pub(crate) fn env(&mut self) -> Env<'_> {
        Env {
            ports: &mut self.ports,
            fwd: &self.fwd,
            pools: &mut self.pools,
            flows: &mut self.flows,
            counters: &mut self.counters,
            seed: self.config.seed,
        }
    }

    fn generations(&self, a: PortId, b: PortId) -> [u32; 3] {
        let g = |id: u16| self.port(id).map_or(0, |p| p.generation);
        [g(a), g(b), self.topo_gen]
    }

    /// The first packet of a connection: the layers, then a flow entry, then the rewrite.
    /// `prior` holds the ports of an earlier connection on the same tuple, which this one takes
    /// over or gives back.
    fn slow(
        &mut self,
        from: PortId,
        frame: &mut Frame,
        p: &Parsed,
        now: Timestamp,
        prior: Prior,
    ) -> Disposition {
        if let Some(port) = self
            .ports
            .get_mut(usize::from(from))
            .and_then(Option::as_mut)
        {
            port.counters.slow_path += 1;
        }
        let start = PacketHeaders {
            inner: p.headers,
            outer: parse::arrival_encap(frame.bytes(), p).map(Arc::new),
        };
        let syn = parse::opening_syn(frame.bytes(), p);
        let evaluated = pipeline::evaluate(&mut self.env(), from, &start, prior, syn, true, None);
        // Ports of the earlier connection this one did not take over go back.
        let unused = match &evaluated {
            Ok(ev) => ev.unused_prior,
            Err(_) => prior.snat,
        };
        if let Some(remote) = prior.remote {
            self.release(unused, remote);
        }
        let ev = match evaluated {
            Ok(ev) => ev,
            Err(Stop::Flood) => return Disposition::Flood { from },
            Err(Stop::Drop(d)) => return Disposition::Drop(d),
        };
        let key = FlowKey::of(from, p.vni(), &p.headers);
        let mut tcp = TcpTracker::default();
        tcp.observe(FlowSide::Forward, p.tcp_flags());
        let mut rec = FlowRecord::new(start.inner, ev.after.inner);
        rec.fin_outer = ev.after.outer.clone();
        rec.rev_outer = start.outer.as_ref().map(|o| Arc::new(o.reversed()));
        rec.port_a = from;
        rec.port_b = ev.to;
        rec.generation = self.generations(from, ev.to);
        rec.last_seen = now;
        rec.tcp = tcp;
        rec.set_stateful(ev.stateful);
        rec.entropy = encap::entropy_port(self.flows.hash(&key));
        rec.snat = ev.snat;
        rec.packets = 1;
        rec.bytes = frame.len() as u64;
        let entropy = rec.entropy;
        let Some(slot) = self.install(rec) else {
            return Disposition::Drop(DropReason::FlowTableFull);
        };
        if p.fragment.is_some() {
            self.fragments.first(from, p, slot, FlowSide::Forward, now);
        }
        self.emit(frame, p, &ev, entropy)
    }

    pub(crate) fn emit(
        &self,
        frame: &mut Frame,
        p: &Parsed,
        ev: &Evaluation,
        entropy: u16,
    ) -> Disposition {
        match transform::apply(
            frame,
            p,
            &ev.after.inner,
            ev.after.outer.as_deref(),
            entropy,
        ) {
            Ok(()) => self.out_disposition(ev.to),
            Err(_) => Disposition::Drop(DropReason::RewriteFailed),
        }
    }

    /// Inserts a record; on a full table releases its SNAT ports and counts the refusal.
    fn install(&mut self, rec: FlowRecord) -> Option<u32> {
        let (snat, remote) = (rec.snat, Remote::of(&rec.fin()));
        match self.flows.insert(rec) {
            Ok((slot, displaced)) => {
                self.counters.created += 1;
                for old in displaced {
                    self.counters.evicted += 1;
                    self.release(old.snat, Remote::of(&old.fin()));
                }
                self.bind(snat, remote, slot);
                Some(slot)
            }
            Err(_) => {
                self.counters.full_drops += 1;
                self.release(snat, remote);
                None
            }
        }
    }

    /// Tells the pools which slot holds a connection's ports, so that they can be reclaimed
    /// once it has closed.
    fn bind(&mut self, snat: [Option<SnatAlloc>; 2], remote: Remote, slot: u32) {
        for a in snat.into_iter().flatten() {
            self.pools.bind(a, remote, slot);
        }
    }

    /// Gives back SNAT ports held for `remote` (the connection's translated destination).
    fn release(&mut self, snat: [Option<SnatAlloc>; 2], remote: Remote) {
        for a in snat.into_iter().flatten() {
            self.pools.release(a, remote);
        }
    }

    fn drop_record(&mut self, slot: u32) {
        if let Some(r) = self.flows.remove(slot) {
            self.release(r.snat, Remote::of(&r.fin()));
        }
    }

    /// Re-runs the layers for a connection whose ports or the switch changed since it was
    /// cached, keeping its backend and SNAT ports where the rules still give them. The record
    /// is updated, replaced, or removed if the connection is now dropped.
    fn reevaluate(&mut self, slot: u32) {
        let Some(old) = self.flows.get(slot).cloned() else {
            return;
        };
        self.counters.reevaluated += 1;
        let (orig, fin) = (old.orig(), old.fin());
        let start = PacketHeaders {
            inner: orig,
            outer: old.rev_outer.as_ref().map(|o| Arc::new(o.reversed())),
        };
        let prior = Prior {
            dst: Some((fin.dst_ip, fin.dst_port)),
            snat: old.snat,
            remote: Some(Remote::of(&fin)),
            slot: Some(slot),
        };
        let ev = match pipeline::evaluate(
            &mut self.env(),
            old.port_a,
            &start,
            prior,
            None,
            true,
            None,
        ) {
            Ok(ev) => ev,
            Err(_) => {
                self.counters.evicted += 1;
                return self.drop_record(slot);
            }
        };
        self.release(ev.unused_prior, Remote::of(&fin));
        let gens = self.generations(old.port_a, ev.to);
        let same = ev.after.inner == fin
            && ev.after.outer == old.fin_outer
            && ev.to == old.port_b
            && ev.stateful == old.stateful();
        if same && let Some(r) = self.flows.get_mut(slot) {
            r.generation = gens;
            r.snat = ev.snat;
            self.bind(ev.snat, Remote::of(&fin), slot);
            return;
        }
        self.flows.remove(slot);
        // The same connection with its new final headers; the rest as it was.
        let mut rec = FlowRecord::new(orig, ev.after.inner);
        rec.fin_outer = ev.after.outer;
        rec.rev_outer = old.rev_outer;
        rec.port_a = old.port_a;
        rec.port_b = ev.to;
        rec.generation = gens;
        rec.last_seen = old.last_seen;
        rec.tcp = old.tcp;
        rec.set_stateful(ev.stateful);
        rec.entropy = old.entropy;
        rec.snat = ev.snat;
        rec.packets = old.packets;
        rec.bytes = old.bytes;
        self.install(rec);
    }

    /// An ICMP error: rewritten like the connection it quotes, if that connection is cached;
    /// otherwise through the layers as a packet of its own (not cached, quote untouched).
    fn icmp_error(&mut self, from: PortId, frame: &mut Frame, p: &Parsed) -> Disposition {
        let key = p.flow_key(from);
        if let Some((slot, side)) = self.flows.find(&key, self.flows.hash(&key))
            && let Some(r) = self.flows.get(slot)
            && self.is_fresh(r)
        {
            return match replay(r, side, frame, p) {
                Ok(to) => self.out_disposition(to),
                Err(_) => Disposition::Drop(DropReason::RewriteFailed),
            };
        }
        let mut plain = p.clone();
        plain.l4_kind = L4Kind::IcmpOther;
        let start = PacketHeaders {
            inner: p.headers,
            outer: parse::arrival_encap(frame.bytes(), p).map(Arc::new),
        };
        match pipeline::evaluate(
            &mut self.env(),
            from,
            &start,
            Prior::default(),
            None,
            true,
            None,
        ) {
            Ok(ev) => {
                self.release(ev.snat, Remote::of(&ev.after.inner));
                self.emit(frame, &plain, &ev, 0)
            }
            Err(Stop::Flood) => Disposition::Flood { from },
            Err(Stop::Drop(d)) => Disposition::Drop(d),
        }
    }

    /// Removes connections idle past their timeout; returns how many.
    pub fn expire(&mut self, now: Timestamp) -> usize {
        let expired: Vec<u32> = self
            .flows
            .slots()
            .filter(|&s| {
                self.flows
                    .get(s)
                    .is_some_and(|r| now.since(r.last_seen) > self.timeout(r))
            })
            .collect();
        for &s in &expired {
            self.drop_record(s);
        }
        self.fragments.expire(now);
        self.expire_resets(now);
        self.counters.expired += expired.len() as u64;
        expired.len()
    }
}
