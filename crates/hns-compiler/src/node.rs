//! What the compiler knows about the node besides its HNS objects: the management vNIC's MAC
//! and addresses, the NIC an external switch binds to, the host's routes, the profile, and how
//! to find an underlay neighbour's MAC (a remote provider address, a next hop).

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use vfp::wire::MacAddr;

use hns::profile::Profile;
pub use hns_client::switch::DynamicPortRange;

/// The facts of one node that shape its switch.
#[derive(Clone, Debug)]
pub struct NodeFacts {
    /// The node's name (traces, port names).
    pub name: String,
    /// The Windows build reproduced.
    pub profile: Profile,
    /// The NIC's MAC, which the management vNIC `vEthernet (<NIC>)` takes over on an
    /// external switch.
    pub host_mac: MacAddr,
    /// The node's addresses with their prefixes (the management vNIC's): NodePort frontends,
    /// the OutboundNAT source, the overlay provider address unless a network names one.
    pub addresses: Vec<IpNet>,
    /// The NIC external networks bind to (`NetAdapterName`); `None` makes an internal switch.
    pub uplink: Option<String>,
    /// The host's routes that have a next hop: the default route and the user-defined routes
    /// of flannel host-gw (a remote node's pod subnet via its node address).
    pub routes: Vec<HostRoute>,
    /// Resolves the underlay MAC of an address (the host's ARP cache).
    pub resolver: Resolver,
    /// The ports the SNAT pools draw from (Windows' dynamic port range).
    pub dynamic_ports: DynamicPortRange,
}

impl NodeFacts {
    /// The node's addresses without prefixes.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().map(IpNet::addr)
    }

    /// The first node address of the family of `like`.
    pub fn ip_like(&self, like: IpAddr) -> Option<IpAddr> {
        self.ips().find(|a| a.is_ipv4() == like.is_ipv4())
    }

    /// The next hop of the default route of the family of `like`.
    pub fn default_gateway(&self, like: IpAddr) -> Option<IpAddr> {
        self.routes
            .iter()
            .find(|r| r.destination.prefix_len() == 0 && r.next_hop.is_ipv4() == like.is_ipv4())
            .map(|r| r.next_hop)
    }
}

/// A route of the host with a next hop (Windows `New-NetRoute -NextHop`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostRoute {
    /// Where it leads.
    pub destination: IpNet,
    /// The neighbour that carries it.
    pub next_hop: IpAddr,
}

impl HostRoute {
    /// A route to `destination` via `next_hop`.
    pub fn new(destination: IpNet, next_hop: IpAddr) -> HostRoute {
        HostRoute {
            destination,
            next_hop,
        }
    }
}

/// The host's view of its underlay neighbours: the MAC of an address on the physical
/// network, as its ARP cache knows it.
#[derive(Clone)]
pub struct Resolver(Arc<dyn Fn(IpAddr) -> Option<MacAddr> + Send + Sync>);

impl Resolver {
    /// A resolver from a function.
    pub fn new(f: impl Fn(IpAddr) -> Option<MacAddr> + Send + Sync + 'static) -> Resolver {
        Resolver(Arc::new(f))
    }

    /// A resolver from a fixed table.
    pub fn from_table(table: HashMap<IpAddr, MacAddr>) -> Resolver {
        Resolver::new(move |ip| table.get(&ip).copied())
    }

    /// A resolver that knows nobody.
    pub fn none() -> Resolver {
        Resolver::new(|_| None)
    }

    /// The MAC of `ip`, if known.
    pub fn mac_of(&self, ip: IpAddr) -> Option<MacAddr> {
        (self.0)(ip)
    }
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resolver")
    }
}
