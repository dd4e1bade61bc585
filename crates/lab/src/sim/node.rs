//! A simulated Windows node: a real hnsd [`Service`] in process (an in-memory store) that its
//! agents reach through an `hns_client::Client`; the switch hnsd's compiler makes from every
//! committed batch (subscribed as the device data plane subscribes); the host's IP stack on
//! the host vNICs the compiler reports, with the routing table its agents change through
//! [`HostTable`]; and the pods' stacks on their endpoints' ports.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, MutexGuard};

use flannel::stack::{Interface as StackInterface, NodeStack};
use hcn::Guid;
use hcn::error::{HResult, HnsError};
use hns::state::{Object, WriteOp};
use hns::store::Store;
use hns::{InProcess, Profile, Service, State};
use hns_client::Client;
use hns_compiler::{Compiler, HostRoute, NodeFacts, Resolver};
use host::link::RouteEntry;
use ipnet::IpNet;
use vfp::PortId;
use vfp::wire::MacAddr;

use super::fabric::AttachmentId;
use super::stack::{Interface, Stack, StackRoute};

/// One node of the simulated cluster.
pub struct Node {
    pub name: String,
    /// The node's address on the physical network.
    pub address: IpNet,
    /// The NIC's MAC (the management vNIC's too).
    pub mac: MacAddr,
    /// hnsd.
    pub service: Arc<Service>,
    /// A client of this node's hnsd, as its agents have.
    pub hns: Client,
    compiler: Arc<Mutex<Compiler>>,
    /// The host's routing table and forwarding, as the node's agents set them.
    table: Arc<Mutex<HostTable>>,
    /// The host's IP stack.
    pub host: Stack,
    /// Pod stacks, by endpoint.
    pub pods: BTreeMap<Guid, Stack>,
    /// Where its NIC is on the fabric.
    pub attachment: AttachmentId,
    /// Switch port of each host stack interface.
    host_ports: Vec<PortId>,
    /// The pod network flanneld made on this node, once it has.
    pub network: Option<super::agents::flannel::PodNetwork>,
    /// kube-proxy's source VIP on an Overlay network, once reserved.
    pub source_vip: Option<IpAddr>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A node with an empty hnsd, its NIC on the fabric at `attachment` with `addresses` (the
    /// first is the node's address), and a default route via `router`.
    pub fn new(
        name: &str,
        addresses: Vec<IpNet>,
        mac: MacAddr,
        profile: Profile,
        resolver: Resolver,
        attachment: AttachmentId,
        router: IpAddr,
    ) -> Result<Node, HnsError> {
        let address = addresses.first().copied().unwrap_or_default();
        let store = Store::in_memory().map_err(|e| internal(format!("{name}: {e}")))?;
        let service =
            Arc::new(Service::start(store, profile).map_err(|e| internal(format!("{name}: {e}")))?);
        let facts = NodeFacts {
            name: name.to_string(),
            profile,
            host_mac: mac,
            addresses,
            uplink: Some("Ethernet".to_string()),
            routes: vec![HostRoute::new(IpNet::default(), router)],
            resolver,
            dynamic_ports: Default::default(),
        };
        let compiler = Arc::new(Mutex::new(service.read(|s| Compiler::build(s, facts))));
        let compiling = Arc::clone(&compiler);
        service.observe(Box::new(move |state, changes| {
            lock(&compiling).apply(state, changes);
        }));
        let table = HostTable {
            routes: vec![RouteEntry {
                destination: IpNet::default(),
                gateway: Some(router),
                oif: None,
                metric: None,
            }],
            forwarding: BTreeSet::new(),
        };
        let mut host = Stack::new(&format!("{name} host"));
        host.forwarding = true;
        let mut n = Node {
            name: name.to_string(),
            address,
            mac,
            hns: InProcess::client(Arc::clone(&service), name),
            service,
            compiler,
            table: Arc::new(Mutex::new(table)),
            host,
            pods: BTreeMap::new(),
            attachment,
            host_ports: Vec::new(),
            network: None,
            source_vip: None,
        };
        n.sync_host();
        Ok(n)
    }

    /// The compiled switch and what the compiler knows of the node. Do not hold it across an
    /// HNS call: each committed batch takes it.
    pub fn compiler(&self) -> MutexGuard<'_, Compiler> {
        lock(&self.compiler)
    }

    /// Runs `f` on hnsd's committed objects.
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        self.service.read(f)
    }

    /// A write straight to hnsd's committer (what the API does after decoding a body);
    /// returns the object as it now is.
    pub fn hns(&mut self, op: WriteOp) -> Result<Option<Object>, HnsError> {
        let written = block_on(self.service.write(op))??;
        self.sync_host();
        Ok(written)
    }

    /// Creates an object and returns its ID.
    pub fn create(&mut self, obj: Object) -> Result<Guid, HnsError> {
        let id = self.hns(WriteOp::Create(obj))?.map(|o| o.id());
        id.ok_or_else(|| HnsError::new(HResult::E_INVALIDARG, "create returned nothing"))
    }

    /// The node's IP stack as flanneld sees it.
    pub fn node_stack(&self) -> Box<dyn NodeStack> {
        Box::new(SimStack {
            compiler: Arc::clone(&self.compiler),
            table: Arc::clone(&self.table),
        })
    }

    /// Brings the host stack in line with hnsd's compiler and the host's table: its vNICs,
    /// routes and claims; and the compiler in line with the host's routes.
    pub fn sync_host(&mut self) {
        let mut compiler = lock(&self.compiler);
        let ifaces = compiler.host_interfaces();
        let same = ifaces.len() == self.host_ports.len()
            && ifaces
                .iter()
                .zip(&self.host_ports)
                .all(|(i, p)| i.port == *p)
            && ifaces
                .iter()
                .zip(&self.host.interfaces)
                .all(|(i, h)| i.mac == h.mac && i.addresses == h.addresses);
        if !same {
            self.host_ports = ifaces.iter().map(|i| i.port).collect();
            self.host.interfaces = ifaces
                .into_iter()
                .map(|i| Interface {
                    name: i.name,
                    mac: i.mac,
                    addresses: i.addresses,
                })
                .collect();
        }
        let table = lock(&self.table);
        self.host.routes = table
            .routes
            .iter()
            .map(|r| StackRoute {
                destination: r.destination,
                via: r.gateway,
                dev: r
                    .oif
                    .and_then(|i| self.host.interfaces.get((i as usize).checked_sub(1)?))
                    .map(|i| i.name.clone()),
            })
            .collect();
        let routes: Vec<HostRoute> = table
            .routes
            .iter()
            .filter_map(|r| Some(HostRoute::new(r.destination, r.gateway?)))
            .collect();
        drop(table);
        if compiler.facts().routes != routes {
            // The compiler reads the state it compiles; take the state first, as hnsd does.
            drop(compiler);
            self.service
                .read(|s| lock(&self.compiler).set_routes(s, routes));
            compiler = lock(&self.compiler);
        }
        self.host.claims = compiler.host_claims();
    }

    /// The switch port of host interface `iface`.
    pub fn host_port(&self, iface: usize) -> Option<PortId> {
        self.host_ports.get(iface).copied()
    }

    /// The host interface on switch port `port`.
    pub fn host_iface(&self, port: PortId) -> Option<usize> {
        self.host_ports.iter().position(|p| *p == port)
    }

    /// The pod whose endpoint is on switch port `port`.
    pub fn pod_at(&self, port: PortId) -> Option<Guid> {
        let compiler = self.compiler();
        self.pods
            .keys()
            .copied()
            .find(|ep| compiler.endpoint_port(*ep) == Some(port))
    }
}

/// The host's routing table, and the interfaces flanneld turned forwarding on for (the
/// simulated host forwards between all of them; this records what was asked).
#[derive(Debug, Default)]
struct HostTable {
    routes: Vec<RouteEntry>,
    forwarding: BTreeSet<String>,
}

/// flanneld's view of a simulated node's IP stack: the interfaces are the host vNICs hnsd's
/// compiler reports (index = position + 1), the routes the node's [`HostTable`].
struct SimStack {
    compiler: Arc<Mutex<Compiler>>,
    table: Arc<Mutex<HostTable>>,
}

impl NodeStack for SimStack {
    fn holder_of(&mut self, ip: Ipv4Addr) -> Result<Option<StackInterface>, flannel::Error> {
        let compiler = lock(&self.compiler);
        let ifaces = compiler.host_interfaces();
        let Some(at) = ifaces
            .iter()
            .position(|i| i.addresses.iter().any(|a| a.addr() == IpAddr::V4(ip)))
        else {
            return Ok(None);
        };
        // The management vNIC has the Linux name hnsd's data plane gives it.
        let name = match &compiler.facts().uplink {
            Some(nic) if ifaces[at].port == compiler.management_port() => {
                hns_client::management_name(nic)
            }
            _ => ifaces[at].name.clone(),
        };
        Ok(Some(StackInterface {
            index: at as u32 + 1,
            name,
        }))
    }

    fn enable_forwarding(&mut self, name: &str) -> Result<(), flannel::Error> {
        lock(&self.table).forwarding.insert(name.to_string());
        Ok(())
    }

    fn routes(&mut self) -> Result<Vec<RouteEntry>, flannel::Error> {
        Ok(lock(&self.table).routes.clone())
    }

    fn add_route(&mut self, route: &RouteEntry, _onlink: bool) -> Result<(), flannel::Error> {
        let mut t = lock(&self.table);
        if t.routes.contains(route) {
            return Err(flannel::Error::Hns(format!(
                "route to {} exists (the kernel answers EEXIST)",
                route.destination
            )));
        }
        t.routes.push(*route);
        Ok(())
    }

    fn del_route(&mut self, route: &RouteEntry) -> Result<(), flannel::Error> {
        lock(&self.table).routes.retain(|r| r != route);
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn internal(message: String) -> HnsError {
    HnsError::new(HResult::E_FAIL, message)
}

/// Runs a future of hnsd or an agent to completion on a runtime of its own (the simulation is
/// synchronous; each call finishes before frames move).
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> Result<T, HnsError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| internal(format!("cannot start an async runtime: {e}")))?;
    Ok(rt.block_on(f))
}
