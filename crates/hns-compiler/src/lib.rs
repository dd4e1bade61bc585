//! The compiler from hnsd's objects to one node's VFP switch: networks, endpoints, their
//! policies, load balancers and SDN routes become ports and rules, each rule owned by the HNS
//! object that made it (and, for a load balancer, named after the Kubernetes Service that
//! kube-proxy set in `LinuxService`), so a trace says which object decided a packet.
//!
//! Pure: no I/O, no async. [`Compiler::build`] compiles a whole [`State`]; after that
//! [`Compiler::apply`] takes each batch of committed [`Change`]s and recompiles only the objects
//! they name (and what depends on them): their old rules are removed by owner and the new ones
//! installed, every other rule stays as it is.
//!
//! One file per concept: [`node`] (the node's facts), [`modes`] (what each network type does to
//! packets), [`network`], [`endpoint`], [`acl`], [`nat`], [`route`], [`loadbalancer`],
//! [`limitation`] and [`placement`] (rule sets and the ports they go to); [`pod`] (a pod's IP
//! stack as its endpoint configures it). Beside them, [`explain`]: the trace of a connection's
//! first packet through the compiled switch, told back by the objects that made each rule.

pub mod acl;
pub mod dump;
pub mod endpoint;
pub mod explain;
pub mod limitation;
pub mod loadbalancer;
pub mod modes;
pub mod nat;
pub mod network;
pub mod node;
pub mod operator;
pub mod placement;
pub mod pod;
pub mod route;

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use hcn::Guid;
use ipnet::IpNet;
use vfp::layer::DefaultAction;
use vfp::wire::MacAddr;
use vfp::{PoolId, PortConfig, PortId, Switch, SwitchConfig, SwitchKind};

use hns::state::{Change, Kind, Object, State};

pub use node::{DynamicPortRange, HostRoute, NodeFacts, Resolver};
pub use placement::{Compiled, HostClaim, Key, LayerDefault, Notice, Placement, Target};

use placement::{PortPlace, Role};

/// The compiler of one node: its switch and what each HNS object put into it.
#[derive(Debug)]
pub struct Compiler {
    facts: NodeFacts,
    switch: Switch,
    mgmt: PortId,
    uplink: Option<PortId>,
    places: HashMap<PortId, PortPlace>,
    endpoint_ports: HashMap<Guid, PortId>,
    gateway_ports: HashMap<Guid, PortId>,
    interfaces: HashMap<PortId, HostInterface>,
    mtus: HashMap<Guid, u16>,
    objects: HashMap<Key, Compiled>,
    pools: HashMap<IpAddr, PoolId>,
    owned: HashMap<IpAddr, Vec<(Key, MacAddr)>>,
    providers: BTreeSet<IpAddr>,
    /// Port numbers to give ports by name ([`Compiler::build_pinned`]).
    pins: HashMap<String, PortId>,
    /// Each local endpoint's `LinuxAclGeneration` as last compiled ([`acl::reset_if_applied`]).
    acl_generations: HashMap<Guid, u64>,
}

/// A host vNIC as the host's IP stack sees it: the management vNIC `vEthernet (<NIC>)`, an
/// endpoint attached to the host (flannel's `cbr0_ep`), or a NAT network's gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostInterface {
    /// Its switch port.
    pub port: PortId,
    /// Its name, as Windows shows it.
    pub name: String,
    /// Its MAC.
    pub mac: MacAddr,
    /// Its addresses with prefixes (connected routes).
    pub addresses: Vec<IpNet>,
}

impl Compiler {
    /// Builds the node's switch from every object in `state`.
    pub fn build(state: &State, facts: NodeFacts) -> Compiler {
        Compiler::build_pinned(state, facts, HashMap::new())
    }

    /// [`Compiler::build`], giving each port named in `pins` that number: a switch rebuilt
    /// from a record (`winnet collect`'s bundle) then numbers its ports as the live one did,
    /// whatever order the live ports were made in.
    pub fn build_pinned(
        state: &State,
        facts: NodeFacts,
        pins: HashMap<String, PortId>,
    ) -> Compiler {
        let kind = if facts.uplink.is_some() {
            SwitchKind::External
        } else {
            SwitchKind::Internal
        };
        let vxlan_port = state
            .networks()
            .find_map(network::vxlan_port)
            .unwrap_or(vfp::wire::VXLAN_PORT);
        let mut switch = Switch::new(SwitchConfig {
            kind,
            vxlan_port,
            ..SwitchConfig::default()
        });
        let ips: Vec<IpAddr> = facts.ips().collect();
        let name = match &facts.uplink {
            Some(nic) => format!("vEthernet ({nic})"),
            None => "vEthernet (host)".to_string(),
        };
        // The switch is new: adding its first two ports cannot fail.
        let mgmt = switch
            .add_port(PortConfig::host(&name, facts.host_mac, ips))
            .unwrap_or_default();
        let uplink = facts
            .uplink
            .as_ref()
            .and_then(|nic| switch.add_port(PortConfig::uplink(nic)).ok());
        let mut c = Compiler {
            switch,
            mgmt,
            uplink,
            places: HashMap::new(),
            endpoint_ports: HashMap::new(),
            gateway_ports: HashMap::new(),
            interfaces: HashMap::new(),
            mtus: HashMap::new(),
            objects: HashMap::new(),
            pools: HashMap::new(),
            owned: HashMap::new(),
            providers: BTreeSet::new(),
            pins,
            acl_generations: HashMap::new(),
            facts,
        };
        c.places.insert(
            mgmt,
            PortPlace {
                object: None,
                network: None,
                role: Role::Host,
            },
        );
        c.interfaces.insert(
            mgmt,
            HostInterface {
                port: mgmt,
                name,
                mac: c.facts.host_mac,
                addresses: c.facts.addresses.clone(),
            },
        );
        if let Some(up) = uplink {
            c.places.insert(
                up,
                PortPlace {
                    object: None,
                    network: None,
                    role: Role::Uplink,
                },
            );
        }
        let mut keys = BTreeSet::from([Key::Node]);
        keys.extend(state.networks().map(|n| Key::Network(n.id)));
        keys.extend(state.endpoints().map(|e| Key::Endpoint(e.id)));
        keys.extend(state.load_balancers().map(|l| Key::LoadBalancer(l.id)));
        keys.extend(state.routes().map(|r| Key::Route(r.id)));
        c.recompile(state, keys);
        c
    }

    /// Brings the switch in line with `state` after `changes` were applied to it: only the
    /// objects they name, and those that depend on them, are recompiled.
    pub fn apply(&mut self, state: &State, changes: &[Change]) {
        let mut keys = BTreeSet::new();
        for change in changes {
            let (kind, id) = match change {
                Change::Put(obj) => (obj.kind(), obj.id()),
                Change::Delete(kind, id) => (*kind, *id),
            };
            match kind {
                Kind::Network => {
                    keys.insert(Key::Network(id));
                    // An endpoint's rules depend on its network's mode, VSID, gateway and
                    // remote subnet routes.
                    keys.extend(
                        state
                            .endpoints()
                            .filter(|e| e.host_compute_network == id)
                            .map(|e| Key::Endpoint(e.id)),
                    );
                }
                Kind::Endpoint => {
                    keys.insert(Key::Endpoint(id));
                    // A host-attached endpoint is the gateway the network's pods are answered
                    // with (flannel's cbr0_ep on L2Bridge): its network depends on it.
                    let now = state
                        .endpoint(id)
                        .filter(|e| network::is_host_attached(state, e))
                        .map(|e| e.host_compute_network);
                    let before = self
                        .place_of(id)
                        .filter(|p| p.role == Role::Host)
                        .and_then(|p| p.network);
                    keys.extend(now.or(before).map(Key::Network));
                }
                Kind::Namespace => {
                    if let Change::Put(Object::Namespace(ns)) = change {
                        keys.extend(ns.endpoint_ids().map(Key::Endpoint));
                    }
                }
                Kind::LoadBalancer => {
                    keys.insert(Key::LoadBalancer(id));
                }
                Kind::Route => {
                    keys.insert(Key::Route(id));
                }
            }
        }
        self.recompile(state, keys);
    }

    /// Replaces the node's routes (flannel host-gw added or removed one) and recompiles what
    /// depends on them.
    pub fn set_routes(&mut self, state: &State, routes: Vec<HostRoute>) {
        self.facts.routes = routes;
        let mut keys = BTreeSet::from([Key::Node]);
        keys.extend(state.networks().map(|n| Key::Network(n.id)));
        keys.extend(state.endpoints().map(|e| Key::Endpoint(e.id)));
        self.recompile(state, keys);
    }

    /// The switch.
    pub fn switch(&self) -> &Switch {
        &self.switch
    }

    /// The switch, to process packets (its rules belong to the compiler: change objects,
    /// not rules).
    pub fn switch_mut(&mut self) -> &mut Switch {
        &mut self.switch
    }

    /// The node's facts.
    pub fn facts(&self) -> &NodeFacts {
        &self.facts
    }

    /// The management vNIC's port.
    pub fn management_port(&self) -> PortId {
        self.mgmt
    }

    /// The uplink's port, on an external switch.
    pub fn uplink_port(&self) -> Option<PortId> {
        self.uplink
    }

    /// The port of a local endpoint.
    pub fn endpoint_port(&self, endpoint: Guid) -> Option<PortId> {
        self.endpoint_ports.get(&endpoint).copied()
    }

    /// The MTU of a local endpoint's vNIC when an `EncapOverhead` policy lowers it.
    pub fn endpoint_mtu(&self, endpoint: Guid) -> Option<u16> {
        self.mtus.get(&endpoint).copied()
    }

    /// The host's vNICs, for the host's IP stack.
    pub fn host_interfaces(&self) -> Vec<HostInterface> {
        let mut v: Vec<HostInterface> = self.interfaces.values().cloned().collect();
        v.sort_by_key(|i| i.port);
        v
    }

    /// The frontends the host sends into the switch rather than to itself.
    pub fn host_claims(&self) -> BTreeSet<HostClaim> {
        self.objects
            .values()
            .flat_map(|c| c.claims.iter().copied())
            .collect()
    }

    /// Everything the compiler noted: limitations applied, parts not compiled.
    pub fn notices(&self) -> Vec<Notice> {
        let mut keys: Vec<&Key> = self.objects.keys().collect();
        keys.sort();
        keys.iter()
            .filter_map(|k| self.objects.get(k))
            .flat_map(|c| c.notices.iter().cloned())
            .collect()
    }

    /// Number of rules the switch holds, over every port and layer.
    pub fn rule_count(&self) -> usize {
        self.switch
            .ports()
            .flat_map(|p| p.layers())
            .map(vfp::Layer::rule_count)
            .sum()
    }

    /// The SNAT pool of `ip`, made on first use over the node's dynamic port range.
    pub(crate) fn pool(&mut self, ip: IpAddr) -> PoolId {
        let range = self.facts.dynamic_ports;
        *self
            .pools
            .entry(ip)
            .or_insert_with(|| self.switch.add_snat_pool(ip, range.start, range.last()))
    }

    fn place_of(&self, endpoint: Guid) -> Option<PortPlace> {
        let port = self.endpoint_ports.get(&endpoint)?;
        self.places.get(port).copied()
    }

    /// Recompiles each key in order and installs the result.
    fn recompile(&mut self, state: &State, keys: BTreeSet<Key>) {
        for key in keys {
            let compiled = match key {
                Key::Node => route::compile_node(self),
                Key::Network(id) => match state.network(id) {
                    Some(net) => {
                        self.ensure_gateway_port(net);
                        network::compile(self, state, net)
                    }
                    None => {
                        self.remove_port_of(Key::Network(id));
                        Compiled::default()
                    }
                },
                Key::Endpoint(id) => match state.endpoint(id) {
                    Some(ep) => {
                        self.ensure_endpoint_port(state, ep);
                        let compiled = endpoint::compile(self, state, ep);
                        self.replace(key, compiled);
                        acl::reset_if_applied(self, ep);
                        continue;
                    }
                    None => {
                        self.remove_port_of(Key::Endpoint(id));
                        self.mtus.remove(&id);
                        self.acl_generations.remove(&id);
                        Compiled::default()
                    }
                },
                Key::LoadBalancer(id) => match state.load_balancer(id) {
                    Some(lb) => loadbalancer::compile(self, state, lb),
                    None => Compiled::default(),
                },
                Key::Route(id) => match state.route(id) {
                    Some(r) => route::compile_sdn_route(self, state, r),
                    None => Compiled::default(),
                },
            };
            self.replace(key, compiled);
        }
        self.sync_providers();
    }

    /// Removes `key`'s old rules and addresses and installs `new`.
    fn replace(&mut self, key: Key, mut new: Compiled) {
        let old = self.objects.remove(&key).unwrap_or_default();
        for (port, layer, owner) in &old.installed {
            if let Ok(l) = self.switch.layer_mut(*port, layer) {
                l.remove_owner(owner);
            }
        }
        // In port order, so that a rebuild programs the switch the same way every time.
        let mut ports: Vec<(PortId, PortPlace)> =
            self.places.iter().map(|(p, pl)| (*p, *pl)).collect();
        ports.sort_by_key(|(p, _)| *p);
        for (port, place) in &ports {
            for d in old.defaults.iter().filter(|d| d.target.reaches(place)) {
                self.set_default(*port, d.layer, DefaultAction::Allow);
            }
            for d in new.defaults.iter().filter(|d| d.target.reaches(place)) {
                self.set_default(*port, d.layer, d.action);
            }
        }
        let mut installed = Vec::new();
        for p in &new.placements {
            for (port, place) in &ports {
                if p.target.reaches(place) && self.install(*port, p) {
                    installed.push((*port, p.layer, p.origin.owner.clone()));
                }
            }
        }
        new.installed = installed;
        self.update_owned(key, &old.owned, &new.owned);
        if !new.placements.is_empty()
            || !new.owned.is_empty()
            || !new.providers.is_empty()
            || !new.claims.is_empty()
            || !new.notices.is_empty()
            || !new.defaults.is_empty()
        {
            self.objects.insert(key, new);
        }
    }

    fn update_owned(&mut self, key: Key, old: &[(IpAddr, MacAddr)], new: &[(IpAddr, MacAddr)]) {
        let mut touched = BTreeSet::new();
        for (ip, _) in old {
            if let Some(v) = self.owned.get_mut(ip) {
                v.retain(|(k, _)| *k != key);
            }
            touched.insert(*ip);
        }
        for (ip, mac) in new {
            self.owned.entry(*ip).or_default().push((key, *mac));
            touched.insert(*ip);
        }
        for ip in touched {
            match self.owned.get(&ip).and_then(|v| v.first()) {
                Some((_, mac)) => self.switch.own_address(ip, *mac),
                None => {
                    self.owned.remove(&ip);
                    self.switch.disown_address(ip);
                }
            }
        }
    }

    fn sync_providers(&mut self) {
        let want: BTreeSet<IpAddr> = self
            .objects
            .values()
            .flat_map(|c| c.providers.iter().copied())
            .collect();
        for gone in self.providers.difference(&want) {
            self.switch.remove_provider_address(*gone);
        }
        for new in want.difference(&self.providers) {
            self.switch.add_provider_address(*new);
        }
        self.providers = want;
    }

    /// Creates (or re-creates, if its shape changed) the port of a local endpoint.
    fn ensure_endpoint_port(&mut self, state: &State, ep: &hcn::Endpoint) {
        let Some(want) = endpoint::port_config(self, state, ep) else {
            self.remove_port_of(Key::Endpoint(ep.id));
            return;
        };
        let host = want.config.kind == vfp::PortKind::HostVnic;
        let place = PortPlace {
            object: Some(ep.id),
            network: Some(ep.host_compute_network),
            role: if host { Role::Host } else { Role::Pod },
        };
        match want.mtu {
            Some(m) => self.mtus.insert(ep.id, m),
            None => self.mtus.remove(&ep.id),
        };
        if let Some(&port) = self.endpoint_ports.get(&ep.id) {
            let same = self.switch.port(port).map(|p| p.config()) == Some(&want.config)
                && self.places.get(&port) == Some(&place);
            if same {
                return;
            }
            self.remove_port_of(Key::Endpoint(ep.id));
        }
        let iface = host.then(|| HostInterface {
            port: 0,
            name: want.config.name.clone(),
            mac: want.config.mac.unwrap_or(MacAddr::ZERO),
            addresses: want.prefixes.clone(),
        });
        if let Some(port) = self.add_port(want.config, place, iface) {
            self.endpoint_ports.insert(ep.id, port);
        }
    }

    /// Creates the gateway vNIC of a NAT / ICS / Internal network.
    fn ensure_gateway_port(&mut self, net: &hcn::Network) {
        let Some(want) = network::gateway_port(net) else {
            self.remove_port_of(Key::Network(net.id));
            return;
        };
        if let Some(&port) = self.gateway_ports.get(&net.id) {
            if self.switch.port(port).map(|p| p.config()) == Some(&want.config) {
                return;
            }
            self.remove_port_of(Key::Network(net.id));
        }
        let place = PortPlace {
            object: Some(net.id),
            network: Some(net.id),
            role: Role::Host,
        };
        let iface = HostInterface {
            port: 0,
            name: want.config.name.clone(),
            mac: want.config.mac.unwrap_or(MacAddr::ZERO),
            addresses: want.prefixes.clone(),
        };
        if let Some(port) = self.add_port(want.config, place, Some(iface)) {
            self.gateway_ports.insert(net.id, port);
        }
    }

    /// Adds a port and installs on it every compiled rule set that targets it.
    fn add_port(
        &mut self,
        config: PortConfig,
        place: PortPlace,
        iface: Option<HostInterface>,
    ) -> Option<PortId> {
        let name = config.name.clone();
        let added = match self.pins.get(&name) {
            // Taken (two ports of one name in the record): numbered as a live switch would.
            Some(id) => self
                .switch
                .add_port_as(*id, config.clone())
                .or_else(|_| self.switch.add_port(config)),
            None => self.switch.add_port(config),
        };
        let port = match added {
            Ok(p) => p,
            Err(e) => {
                let key = match place.role {
                    Role::Host if place.object == place.network => place.network.map(Key::Network),
                    _ => place.object.map(Key::Endpoint),
                };
                if let Some(c) = key.and_then(|k| self.objects.get_mut(&k)) {
                    c.notices.push(Notice {
                        owner: name.clone(),
                        message: format!("no switch port for {name}: {e}"),
                        limitation: None,
                    });
                }
                return None;
            }
        };
        self.places.insert(port, place);
        if let Some(mut i) = iface {
            i.port = port;
            self.interfaces.insert(port, i);
        }
        let mut keys: Vec<Key> = self.objects.keys().copied().collect();
        keys.sort();
        for key in keys {
            let Some(c) = self.objects.get_mut(&key) else {
                continue;
            };
            let mut installed = Vec::new();
            for p in c.placements.iter().filter(|p| p.target.reaches(&place)) {
                if install_on(&mut self.switch, port, p) {
                    installed.push((port, p.layer, p.origin.owner.clone()));
                }
            }
            for d in c.defaults.iter().filter(|d| d.target.reaches(&place)) {
                if let Ok(l) = self.switch.layer_mut(port, d.layer) {
                    for dir in [vfp::Direction::In, vfp::Direction::Out] {
                        l.set_default(dir, d.action);
                    }
                }
            }
            c.installed.extend(installed);
        }
        Some(port)
    }

    /// Installs a placement's rules on `port`; false when the port has no such layer.
    fn install(&mut self, port: PortId, p: &Placement) -> bool {
        install_on(&mut self.switch, port, p)
    }

    /// Sets a layer's default in both directions on `port`.
    fn set_default(&mut self, port: PortId, layer: &str, action: DefaultAction) {
        if let Ok(l) = self.switch.layer_mut(port, layer) {
            for dir in [vfp::Direction::In, vfp::Direction::Out] {
                l.set_default(dir, action);
            }
        }
    }

    /// Removes the port of an endpoint or a network's gateway, and forgets the rules other
    /// objects had on it.
    fn remove_port_of(&mut self, key: Key) {
        let port = match key {
            Key::Endpoint(id) => self.endpoint_ports.remove(&id),
            Key::Network(id) => self.gateway_ports.remove(&id),
            _ => None,
        };
        let Some(port) = port else {
            return;
        };
        let _ = self.switch.remove_port(port);
        self.places.remove(&port);
        self.interfaces.remove(&port);
        for c in self.objects.values_mut() {
            c.installed.retain(|(p, _, _)| *p != port);
        }
    }
}

/// Installs a placement's rules on `port`, in its group (made on first use); false when the
/// port has no such layer.
fn install_on(switch: &mut Switch, port: PortId, p: &Placement) -> bool {
    let Ok(l) = switch.layer_mut(port, p.layer) else {
        return false;
    };
    match &p.group {
        None => l.set_rules(p.origin.clone(), p.rules.clone()),
        Some(g) => {
            if !l.groups().iter().any(|x| x.name() == g) {
                // In its place among the groups ([`acl::group_rank`]); checked just above: new.
                let rank = acl::group_rank(g);
                let at = l
                    .groups()
                    .iter()
                    .filter(|x| acl::group_rank(x.name()) <= rank)
                    .count();
                let _ = l.insert_group(g, at);
            }
            let _ = l.set_group_rules(g, p.origin.clone(), p.rules.clone());
        }
    }
    true
}

/// A MAC address of the HNS model as the switch writes it.
pub(crate) fn mac(m: hcn::MacAddress) -> MacAddr {
    MacAddr(m.0)
}

/// A port to create, with the prefixes of its addresses (for a host vNIC's connected routes)
/// and its MTU.
pub(crate) struct PortWant {
    pub config: PortConfig,
    pub prefixes: Vec<IpNet>,
    pub mtu: Option<u16>,
}
