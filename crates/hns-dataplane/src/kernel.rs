//! The host's routes and neighbours, as the compiler needs them: next hops of the host's routes
//! (the default route, flannel host-gw's routes to other nodes' pod subnets) and the underlay
//! MACs of next hops and remote provider addresses. A follower thread reads them from the
//! kernel, asks the kernel to resolve addresses the compiler wanted and did not find (one UDP
//! datagram to the discard port makes it ARP), and recompiles when what the compiler used has
//! changed.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use host::HostError;
use host::netlink::Netlink;
use vfp::wire::MacAddr;

use crate::Shared;
use hns_compiler::{HostRoute, Resolver};

/// How often the kernel's tables are read.
const PERIOD: Duration = Duration::from_millis(250);

/// What the compiler last saw of the kernel, and what it asked for.
pub struct KernelView {
    neighbors: Arc<RwLock<HashMap<IpAddr, MacAddr>>>,
    asked: Arc<Mutex<BTreeSet<IpAddr>>>,
    /// The answers the switch was compiled with, per address asked.
    compiled_with: HashMap<IpAddr, Option<MacAddr>>,
    routes: Option<Vec<HostRoute>>,
}

impl KernelView {
    /// An empty view (filled by the follower within one period).
    pub fn new() -> Result<KernelView, HostError> {
        let mut view = KernelView {
            neighbors: Arc::default(),
            asked: Arc::default(),
            compiled_with: HashMap::new(),
            routes: None,
        };
        let mut nl = Netlink::open()?;
        view.read_neighbors(&mut nl)?;
        Ok(view)
    }

    /// The resolver the compiler calls: the kernel's neighbour table; every address asked is
    /// remembered so that a later answer recompiles.
    pub fn resolver(&self) -> Resolver {
        let table = Arc::clone(&self.neighbors);
        let asked = Arc::clone(&self.asked);
        Resolver::new(move |ip| {
            let known = read(&table).get(&ip).copied();
            // The first time an unknown address is asked for, the kernel is asked to resolve
            // it at once rather than at the follower's next round.
            if lock(&asked).insert(ip) && known.is_none() {
                probe(ip);
            }
            known
        })
    }

    fn read_neighbors(&mut self, nl: &mut Netlink) -> Result<(), HostError> {
        let table: HashMap<IpAddr, MacAddr> = nl
            .neighbors()?
            .into_iter()
            .filter(|n| n.usable)
            .filter_map(|n| Some((n.ip, MacAddr(n.mac?))))
            .collect();
        *self.neighbors.write().unwrap_or_else(|p| p.into_inner()) = table;
        Ok(())
    }

    /// Reads the kernel's tables; returns the routes to compile with when the switch must be
    /// recompiled (routes changed, or an address the compiler asked for changed).
    fn refresh(&mut self, nl: &mut Netlink) -> Result<Option<Vec<HostRoute>>, HostError> {
        self.read_neighbors(nl)?;
        let mut routes: Vec<HostRoute> = nl
            .routes()?
            .into_iter()
            .filter_map(|r| Some(HostRoute::new(r.destination, r.gateway?)))
            .collect();
        routes.sort_by_key(|r| (r.destination.prefix_len(), r.destination.addr(), r.next_hop));
        routes.dedup();
        let asked: Vec<IpAddr> = lock(&self.asked).iter().copied().collect();
        let table = read(&self.neighbors).clone();
        let mut stale = false;
        for ip in &asked {
            let now = table.get(ip).copied();
            if now.is_none() {
                probe(*ip);
            }
            if self.compiled_with.get(ip).copied().flatten() != now {
                stale = true;
            }
        }
        let routes_changed = self.routes.as_ref() != Some(&routes);
        if !stale && !routes_changed {
            return Ok(None);
        }
        self.compiled_with = asked
            .iter()
            .map(|ip| (*ip, table.get(ip).copied()))
            .collect();
        self.routes = Some(routes.clone());
        Ok(Some(routes))
    }
}

/// Makes the kernel resolve `ip`: a datagram to its discard port (nothing listens there; the
/// ARP or neighbour solicitation it causes is the point).
fn probe(ip: IpAddr) {
    let bind: SocketAddr = if ip.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    if let Ok(s) = UdpSocket::bind(bind) {
        let _ = s.send_to(&[], (ip, 9));
    }
}

/// The follower thread: refresh, and recompile when needed, until the data plane stops.
pub(crate) fn follow(shared: &Shared) {
    let mut nl = match Netlink::open() {
        Ok(nl) => nl,
        Err(e) => {
            tracing::error!(
                "the kernel follower cannot open netlink: {e}; routes and neighbours will not be followed"
            );
            return;
        }
    };
    while !shared.stopping() {
        let refreshed = shared.lock().kernel.refresh(&mut nl);
        match refreshed {
            Ok(Some(routes)) => shared.with_state(|state, inner, epoll| {
                if let Some(c) = inner.compiler.as_mut() {
                    c.set_routes(state, routes);
                }
                inner.reconcile(state, epoll);
            }),
            Ok(None) => {}
            Err(e) => tracing::warn!("reading the host's routes and neighbours: {e}"),
        }
        std::thread::sleep(PERIOD);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}
