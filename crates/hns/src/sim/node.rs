//! A simulated Windows node: hnsd's objects (a [`State`] changed through `plan`/`apply`
//! exactly as hnsd's committer does), the switch compiled from them, the host's IP stack on
//! the host vNICs the compiler reports, and the pods' stacks on their endpoints' ports.

use std::collections::BTreeMap;

use hcn::error::HnsError;
use hcn::{Guid, Namespace, NamespaceType};
use ipnet::IpNet;
use vfp::PortId;
use vfp::wire::MacAddr;

use super::fabric::AttachmentId;
use super::stack::{Interface, Stack, StackRoute};
use crate::compiler::{Compiler, HostRoute, NodeFacts, Resolver};
use crate::profile::Profile;
use crate::state::{Object, State, WriteOp};

/// One node of the simulated cluster.
#[derive(Debug)]
pub struct Node {
    pub name: String,
    /// The node's address on the physical network.
    pub address: IpNet,
    /// The NIC's MAC (the management vNIC's too).
    pub mac: MacAddr,
    pub state: State,
    pub compiler: Compiler,
    /// The host's IP stack.
    pub host: Stack,
    /// Pod stacks, by endpoint.
    pub pods: BTreeMap<Guid, Stack>,
    /// Where its NIC is on the fabric.
    pub attachment: AttachmentId,
    /// Switch port of each host stack interface.
    host_ports: Vec<PortId>,
    /// Host routes beyond what the compiler knows (on-link pod subnets of Overlay).
    extra_routes: Vec<StackRoute>,
    /// The host namespace endpoints attach to (created on first use).
    host_namespace: Option<Guid>,
    /// The pod network flannel made on this node, once it has.
    pub network: Option<super::flannel::PodNetwork>,
}

impl Node {
    /// A node with an empty hnsd, its NIC on the fabric at `attachment`.
    pub fn new(
        name: &str,
        address: IpNet,
        mac: MacAddr,
        profile: Profile,
        resolver: Resolver,
        attachment: AttachmentId,
    ) -> Node {
        let state = State::new(profile);
        let facts = NodeFacts {
            name: name.to_string(),
            profile,
            host_mac: mac,
            addresses: vec![address],
            uplink: Some("Ethernet".to_string()),
            routes: Vec::new(),
            resolver,
        };
        let compiler = Compiler::build(&state, facts);
        let mut host = Stack::new(&format!("{name} host"));
        host.forwarding = true;
        let mut n = Node {
            name: name.to_string(),
            address,
            mac,
            state,
            compiler,
            host,
            pods: BTreeMap::new(),
            attachment,
            host_ports: Vec::new(),
            extra_routes: Vec::new(),
            host_namespace: None,
            network: None,
        };
        n.sync_host();
        n
    }

    /// A write to hnsd: planned and applied as hnsd's committer does, then compiled into the
    /// switch. Returns the object as it now is.
    pub fn hns(&mut self, op: WriteOp) -> Result<Option<Object>, HnsError> {
        let plan = self.state.plan(op)?;
        self.state.apply(&plan.changes);
        self.compiler.apply(&self.state, &plan.changes);
        self.sync_host();
        Ok(plan.result)
    }

    /// Creates an object and returns its ID.
    pub fn create(&mut self, obj: Object) -> Result<Guid, HnsError> {
        let id = self.hns(WriteOp::Create(obj))?.map(|o| o.id());
        id.ok_or_else(|| HnsError::new(hcn::HResult::E_INVALIDARG, "create returned nothing"))
    }

    /// Attaches a local endpoint to the host's namespace (the host gets a vNIC on it).
    pub fn attach_to_host(&mut self, endpoint: Guid) -> Result<(), HnsError> {
        let ns = match self.host_namespace {
            Some(ns) => ns,
            None => {
                let ns = self.create(Object::Namespace(Namespace {
                    namespace_type: Some(NamespaceType::Host),
                    ..Namespace::default()
                }))?;
                self.host_namespace = Some(ns);
                ns
            }
        };
        self.attach(ns, endpoint)
    }

    /// Adds an endpoint to a namespace.
    pub fn attach(&mut self, namespace: Guid, endpoint: Guid) -> Result<(), HnsError> {
        let req = serde_json::json!({
            "ResourceType": "Endpoint", "RequestType": "Add",
            "Settings": {"EndpointId": endpoint.to_string()}
        });
        let req: hcn::ModifyRequest = hcn::decode_value(req)
            .map_err(|e| HnsError::new(e.code, format!("namespace request: {}", e.message)))?;
        self.hns(WriteOp::Modify(crate::Kind::Namespace, namespace, req))?;
        Ok(())
    }

    /// Sets the host's routes (the default route, flannel host-gw's) in the host stack and the
    /// compiler, plus on-link routes only the host stack needs.
    pub fn set_routes(&mut self, routes: Vec<HostRoute>, on_link: Vec<StackRoute>) {
        self.compiler.set_routes(&self.state, routes);
        self.extra_routes = on_link;
        self.sync_host();
    }

    /// Brings the host stack in line with the compiler: its vNICs, routes and claims.
    pub fn sync_host(&mut self) {
        let ifaces = self.compiler.host_interfaces();
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
        let mut routes: Vec<StackRoute> = self
            .compiler
            .facts()
            .routes
            .iter()
            .map(|r| StackRoute {
                destination: r.destination,
                via: Some(r.next_hop),
                dev: None,
            })
            .collect();
        routes.extend(self.extra_routes.iter().cloned());
        self.host.routes = routes;
        self.host.claims = self.compiler.host_claims();
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
        self.pods
            .keys()
            .copied()
            .find(|ep| self.compiler.endpoint_port(*ep) == Some(port))
    }
}
