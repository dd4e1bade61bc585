//! hnsd's objects in memory, with the indexes HNS's rules need, and the rules themselves.
//!
//! A write is planned against the current state without touching it ([`State::plan`]), which
//! either refuses it with an HNS error or yields the [`Change`]s to make; the service makes them
//! durable and then [`State::apply`]s them. So a refused call changes nothing.

mod acl;
mod check;
mod endpoint;
mod loadbalancer;
mod namespace;
mod network;
mod pool;
mod route;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use hcn::error::{HResult, HnsError};
use hcn::loadbalancer::LoadBalancerFlags;
use hcn::modify::ModifyRequest;
use hcn::{Endpoint, EndpointPolicy, Guid, LoadBalancer, MacAddress, Namespace, Network, SdnRoute};
use serde_json::Value;

use crate::profile::Profile;

pub use check::{Fix, Problem};
pub use hcn::Kind;
pub use namespace::{NETNS_DIR, NETNS_PREFIX, netns_path};

/// One HNS object of any kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    Network(Network),
    Endpoint(Endpoint),
    Namespace(Namespace),
    LoadBalancer(LoadBalancer),
    Route(SdnRoute),
}

impl Object {
    pub fn kind(&self) -> Kind {
        match self {
            Object::Network(_) => Kind::Network,
            Object::Endpoint(_) => Kind::Endpoint,
            Object::Namespace(_) => Kind::Namespace,
            Object::LoadBalancer(_) => Kind::LoadBalancer,
            Object::Route(_) => Kind::Route,
        }
    }

    pub fn id(&self) -> Guid {
        match self {
            Object::Network(o) => o.id,
            Object::Endpoint(o) => o.id,
            Object::Namespace(o) => o.id,
            Object::LoadBalancer(o) => o.id,
            Object::Route(o) => o.id,
        }
    }

    /// The object as hcsshim marshals it.
    pub fn to_json(&self) -> Value {
        let v = match self {
            Object::Network(o) => serde_json::to_value(o),
            Object::Endpoint(o) => serde_json::to_value(o),
            Object::Namespace(o) => serde_json::to_value(o),
            Object::LoadBalancer(o) => serde_json::to_value(o),
            Object::Route(o) => serde_json::to_value(o),
        };
        // Serialising plain data with string keys cannot fail.
        v.unwrap_or(Value::Null)
    }

    /// The object as hcsshim marshals it, as bytes (what the store keeps).
    pub fn to_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        match self {
            Object::Network(o) => serde_json::to_vec(o),
            Object::Endpoint(o) => serde_json::to_vec(o),
            Object::Namespace(o) => serde_json::to_vec(o),
            Object::LoadBalancer(o) => serde_json::to_vec(o),
            Object::Route(o) => serde_json::to_vec(o),
        }
    }

    /// The checks the API makes of a document of this kind ([`hcn::Validate`]).
    pub fn validate(&self) -> Result<(), hcn::DecodeError> {
        use hcn::Validate;
        match self {
            Object::Network(o) => o.validate(),
            Object::Endpoint(o) => o.validate(),
            Object::Namespace(o) => o.validate(),
            Object::LoadBalancer(o) => o.validate(),
            Object::Route(o) => o.validate(),
        }
    }

    /// Reads an object of `kind` from its stored (canonical) JSON.
    pub fn from_stored(kind: Kind, bytes: &[u8]) -> Result<Object, serde_json::Error> {
        Ok(match kind {
            Kind::Network => Object::Network(serde_json::from_slice(bytes)?),
            Kind::Endpoint => Object::Endpoint(serde_json::from_slice(bytes)?),
            Kind::Namespace => Object::Namespace(serde_json::from_slice(bytes)?),
            Kind::LoadBalancer => Object::LoadBalancer(serde_json::from_slice(bytes)?),
            Kind::Route => Object::Route(serde_json::from_slice(bytes)?),
        })
    }
}

/// One change to make: an object written whole, or removed.
// Changes live for one write and are moved, not copied around; boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Put(Object),
    Delete(Kind, Guid),
}

/// A write that a client asked for, already decoded.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum WriteOp {
    Create(Object),
    Modify(Kind, Guid, ModifyRequest),
    /// `HcnModifyLoadBalancer`: the whole object replaced.
    UpdateLoadBalancer(Guid, LoadBalancer),
    /// HNS v1 `POST /endpoints/{id}` (`HNSEndpoint.Update`, `ApplyACLPolicy`): the document's
    /// policies. A list of ACLs only replaces the endpoint's ACLs and keeps its other policies,
    /// as felix relies on (it sends its ACLs alone, and its pods keep the CNI's OutBoundNAT);
    /// a list with other policies too (an endpoint read, then ACLs appended) replaces all.
    UpdateEndpointV1(Guid, Vec<EndpointPolicy>),
    Delete(Kind, Guid),
}

/// What a planned write does, and what the client gets back.
#[derive(Debug)]
pub struct Plan {
    pub changes: Vec<Change>,
    /// The object as it will be after the write (none for a delete).
    pub result: Option<Object>,
}

/// Which frontend a load balancer port mapping claims. `None` VIP = every node address of the
/// family: a dual-stack NodePort's IPv4 and IPv6 load balancers (flags 0 and 2) share a port
/// without conflict, as HNS tells them apart by the IPv6 flag.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Frontend {
    vip: Option<IpAddr>,
    ipv6: bool,
    protocol: u32,
    port: u16,
}

/// Every object hnsd holds, with indexes.
#[derive(Debug, Default)]
pub struct State {
    profile: Profile,
    networks: BTreeMap<Guid, Network>,
    endpoints: BTreeMap<Guid, Endpoint>,
    namespaces: BTreeMap<Guid, Namespace>,
    load_balancers: BTreeMap<Guid, LoadBalancer>,
    routes: BTreeMap<Guid, SdnRoute>,
    /// Network name (lower case) -> ID.
    network_names: HashMap<String, Guid>,
    /// (network, remote?, IP) -> endpoint. Local and remote endpoints may share an IP, as on
    /// Windows (kubernetes#131138); two of the same side may not.
    ips: HashMap<(Guid, bool, IpAddr), Guid>,
    /// (network, MAC) -> local endpoint.
    macs: HashMap<(Guid, MacAddress), Guid>,
    /// Claimed frontends -> load balancer.
    frontends: HashMap<Frontend, Guid>,
    /// Endpoint -> the load balancers and routes that name it.
    endpoint_users: HashMap<Guid, Vec<(Kind, Guid)>>,
    /// Network -> where HNS IPAM takes the next address from.
    ip_pools: HashMap<Guid, endpoint::IpPool>,
    /// Network -> where the next MAC comes from, one allocator per MacPool range.
    mac_pools: HashMap<Guid, Vec<pool::LowestFree>>,
}

impl State {
    pub fn new(profile: Profile) -> State {
        State {
            profile,
            ..State::default()
        }
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The object of `kind` with `id`.
    pub fn get(&self, kind: Kind, id: Guid) -> Option<Object> {
        match kind {
            Kind::Network => self.networks.get(&id).cloned().map(Object::Network),
            Kind::Endpoint => self.endpoints.get(&id).cloned().map(Object::Endpoint),
            Kind::Namespace => self.namespaces.get(&id).cloned().map(Object::Namespace),
            Kind::LoadBalancer => self
                .load_balancers
                .get(&id)
                .cloned()
                .map(Object::LoadBalancer),
            Kind::Route => self.routes.get(&id).cloned().map(Object::Route),
        }
    }

    /// Every object of `kind`, cloned, in ID order.
    pub fn list_objects(&self, kind: Kind) -> Vec<Object> {
        match kind {
            Kind::Network => self
                .networks
                .values()
                .cloned()
                .map(Object::Network)
                .collect(),
            Kind::Endpoint => self
                .endpoints
                .values()
                .cloned()
                .map(Object::Endpoint)
                .collect(),
            Kind::Namespace => self
                .namespaces
                .values()
                .cloned()
                .map(Object::Namespace)
                .collect(),
            Kind::LoadBalancer => self
                .load_balancers
                .values()
                .cloned()
                .map(Object::LoadBalancer)
                .collect(),
            Kind::Route => self.routes.values().cloned().map(Object::Route).collect(),
        }
    }

    /// Number of objects of `kind`.
    pub fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Network => self.networks.len(),
            Kind::Endpoint => self.endpoints.len(),
            Kind::Namespace => self.namespaces.len(),
            Kind::LoadBalancer => self.load_balancers.len(),
            Kind::Route => self.routes.len(),
        }
    }

    /// The network with `id`, borrowed (the data plane compiler reads objects in place).
    pub fn network(&self, id: Guid) -> Option<&Network> {
        self.networks.get(&id)
    }

    /// The endpoint with `id`, borrowed.
    pub fn endpoint(&self, id: Guid) -> Option<&Endpoint> {
        self.endpoints.get(&id)
    }

    /// The namespace with `id`, borrowed.
    pub fn namespace(&self, id: Guid) -> Option<&Namespace> {
        self.namespaces.get(&id)
    }

    /// The load balancer with `id`, borrowed.
    pub fn load_balancer(&self, id: Guid) -> Option<&LoadBalancer> {
        self.load_balancers.get(&id)
    }

    /// The SDN route with `id`, borrowed.
    pub fn route(&self, id: Guid) -> Option<&SdnRoute> {
        self.routes.get(&id)
    }

    pub fn networks(&self) -> impl Iterator<Item = &Network> {
        self.networks.values()
    }

    pub fn endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.endpoints.values()
    }

    pub fn namespaces(&self) -> impl Iterator<Item = &Namespace> {
        self.namespaces.values()
    }

    pub fn load_balancers(&self) -> impl Iterator<Item = &LoadBalancer> {
        self.load_balancers.values()
    }

    pub fn routes(&self) -> impl Iterator<Item = &SdnRoute> {
        self.routes.values()
    }

    /// Decides what a write does without changing anything.
    pub fn plan(&self, op: WriteOp) -> Result<Plan, HnsError> {
        match op {
            WriteOp::Create(Object::Network(n)) => self.plan_create_network(n),
            WriteOp::Create(Object::Endpoint(e)) => self.plan_create_endpoint(e),
            WriteOp::Create(Object::Namespace(n)) => self.plan_create_namespace(n),
            WriteOp::Create(Object::LoadBalancer(lb)) => self.plan_create_load_balancer(lb),
            WriteOp::Create(Object::Route(r)) => self.plan_create_route(r),
            WriteOp::Modify(Kind::Network, id, req) => self.plan_modify_network(id, req),
            WriteOp::Modify(Kind::Endpoint, id, req) => self.plan_modify_endpoint(id, req),
            WriteOp::Modify(Kind::Namespace, id, req) => self.plan_modify_namespace(id, req),
            WriteOp::Modify(kind, _, _) => Err(HnsError::new(
                HResult::HCN_E_REQUEST_UNSUPPORTED,
                format!(
                    "{kind} take no modify request; PATCH a load balancer with the whole object"
                ),
            )),
            WriteOp::UpdateLoadBalancer(id, lb) => self.plan_update_load_balancer(id, lb),
            WriteOp::UpdateEndpointV1(id, policies) => self.plan_update_endpoint_v1(id, policies),
            WriteOp::Delete(Kind::Network, id) => self.plan_delete_network(id),
            WriteOp::Delete(Kind::Endpoint, id) => self.plan_delete_endpoint(id),
            WriteOp::Delete(Kind::Namespace, id) => self.plan_delete_namespace(id),
            WriteOp::Delete(Kind::LoadBalancer, id) => self.plan_delete_load_balancer(id),
            WriteOp::Delete(Kind::Route, id) => self.plan_delete_route(id),
        }
    }

    /// Makes planned changes, keeping the indexes in step.
    pub fn apply(&mut self, changes: &[Change]) {
        for change in changes {
            match change {
                Change::Put(obj) => {
                    self.unindex(obj.kind(), obj.id());
                    self.index(obj);
                    self.insert(obj.clone());
                }
                Change::Delete(kind, id) => {
                    self.unindex(*kind, *id);
                    self.remove(*kind, *id);
                }
            }
        }
    }

    /// A fresh ID for a create that named none; refuses an ID already taken.
    fn new_id(&self, kind: Kind, asked: Guid) -> Result<Guid, HnsError> {
        if asked.is_nil() {
            return Ok(Guid::new_v4());
        }
        if self.get(kind, asked).is_some() {
            return Err(HnsError::new(
                HResult::ERROR_ALREADY_EXISTS,
                format!("a {} with ID {asked} already exists", kind.singular()),
            ));
        }
        Ok(asked)
    }

    fn insert(&mut self, obj: Object) {
        match obj {
            Object::Network(o) => {
                self.networks.insert(o.id, o);
            }
            Object::Endpoint(o) => {
                self.endpoints.insert(o.id, o);
            }
            Object::Namespace(o) => {
                self.namespaces.insert(o.id, o);
            }
            Object::LoadBalancer(o) => {
                self.load_balancers.insert(o.id, o);
            }
            Object::Route(o) => {
                self.routes.insert(o.id, o);
            }
        }
    }

    fn remove(&mut self, kind: Kind, id: Guid) {
        match kind {
            Kind::Network => {
                self.ip_pools.remove(&id);
                self.mac_pools.remove(&id);
                drop(self.networks.remove(&id))
            }
            Kind::Endpoint => drop(self.endpoints.remove(&id)),
            Kind::Namespace => drop(self.namespaces.remove(&id)),
            Kind::LoadBalancer => drop(self.load_balancers.remove(&id)),
            Kind::Route => drop(self.routes.remove(&id)),
        }
    }

    fn index(&mut self, obj: &Object) {
        match obj {
            Object::Network(n) => {
                self.network_names.insert(n.name.to_ascii_lowercase(), n.id);
                // A network's subnets and MAC pool never change after create.
                if !self.ip_pools.contains_key(&n.id)
                    && let Some(p) = endpoint::IpPool::new(n, &self.ips)
                {
                    self.ip_pools.insert(n.id, p);
                }
                if !self.mac_pools.contains_key(&n.id) {
                    let pools = endpoint::mac_pools(n, &self.macs);
                    self.mac_pools.insert(n.id, pools);
                }
            }
            Object::Endpoint(e) => {
                let net = e.host_compute_network;
                for ip in e.ips() {
                    self.ips.insert((net, e.is_remote(), ip), e.id);
                    if let (Some(p), false) = (self.ip_pools.get_mut(&net), e.is_remote()) {
                        p.taken(net, ip, &self.ips);
                    }
                }
                if let (Some(mac), false) = (e.mac_address, e.is_remote()) {
                    self.macs.insert((net, mac), e.id);
                    for p in self.mac_pools.get_mut(&net).into_iter().flatten() {
                        let macs = &self.macs;
                        p.taken(u128::from(mac.to_u64()), |m| {
                            macs.contains_key(&(net, endpoint::mac_of(m)))
                        });
                    }
                }
            }
            Object::Namespace(_) => {}
            Object::LoadBalancer(lb) => {
                for f in frontends(lb) {
                    self.frontends.insert(f, lb.id);
                }
                for ep in &lb.host_compute_endpoints {
                    self.endpoint_users
                        .entry(*ep)
                        .or_default()
                        .push((Kind::LoadBalancer, lb.id));
                }
            }
            Object::Route(r) => {
                for ep in &r.host_compute_endpoints {
                    self.endpoint_users
                        .entry(*ep)
                        .or_default()
                        .push((Kind::Route, r.id));
                }
            }
        }
    }

    fn unindex(&mut self, kind: Kind, id: Guid) {
        let Some(old) = self.get(kind, id) else {
            return;
        };
        match old {
            Object::Network(n) => {
                self.network_names.remove(&n.name.to_ascii_lowercase());
            }
            Object::Endpoint(e) => {
                let net = e.host_compute_network;
                for ip in e.ips() {
                    self.ips.remove(&(net, e.is_remote(), ip));
                    if let (Some(p), false) = (self.ip_pools.get_mut(&net), e.is_remote()) {
                        p.freed(ip);
                    }
                }
                if let Some(mac) = e.mac_address
                    && self.macs.get(&(net, mac)) == Some(&e.id)
                {
                    self.macs.remove(&(net, mac));
                    for p in self.mac_pools.get_mut(&net).into_iter().flatten() {
                        p.freed(u128::from(mac.to_u64()));
                    }
                }
            }
            Object::Namespace(_) => {}
            Object::LoadBalancer(lb) => {
                for f in frontends(&lb) {
                    self.frontends.remove(&f);
                }
                self.forget_user(&lb.host_compute_endpoints, (Kind::LoadBalancer, lb.id));
            }
            Object::Route(r) => self.forget_user(&r.host_compute_endpoints, (Kind::Route, r.id)),
        }
    }

    fn forget_user(&mut self, endpoints: &[Guid], user: (Kind, Guid)) {
        for ep in endpoints {
            if let Some(users) = self.endpoint_users.get_mut(ep) {
                users.retain(|u| *u != user);
                if users.is_empty() {
                    self.endpoint_users.remove(ep);
                }
            }
        }
    }
}

/// The frontends a load balancer claims: each VIP (or "every node address") x each mapping.
fn frontends(lb: &LoadBalancer) -> Vec<Frontend> {
    let vips: Vec<Option<IpAddr>> = if lb.frontend_vips.is_empty() {
        vec![None]
    } else {
        lb.frontend_vips.iter().copied().map(Some).collect()
    };
    vips.iter()
        .flat_map(|vip| {
            lb.port_mappings.iter().map(move |pm| Frontend {
                vip: *vip,
                ipv6: vip.map_or(lb.flags & LoadBalancerFlags::IPV6 != 0, |v| v.is_ipv6()),
                protocol: pm.protocol,
                port: pm.external_port,
            })
        })
        .collect()
}

/// Decodes the `Settings` of a modify request into `T`, naming the field on failure.
fn settings<T>(req: &ModifyRequest) -> Result<T, HnsError>
where
    T: serde::de::DeserializeOwned + hcn::Validate,
{
    hcn::decode_value(req.settings.clone())
        .map_err(|e| HnsError::new(e.code, format!("Settings.{}: {}", e.path, e.message)))
}

/// How a policy list takes a modify request: which given policy a `Remove` takes away, and
/// which current policies an `Update` replaces.
pub(super) struct PolicyEdit<P> {
    pub type_name: fn(&P) -> &'static str,
    /// `Remove`: the current policy `c` is the given `g`.
    pub same: fn(c: &P, g: &P) -> bool,
    /// `Update`: the current policy `c` goes, replaced by `given`.
    pub replaced: fn(c: &P, given: &[P]) -> bool,
}

/// Applies a policy modify request to a policy list: `Add` appends (an identical policy is
/// refused), `Remove` removes the ones [`PolicyEdit::same`] finds (a missing one is refused),
/// `Update` replaces what [`PolicyEdit::replaced`] says.
fn edit_policies<P: PartialEq>(
    current: &mut Vec<P>,
    request: hcn::RequestType,
    given: Vec<P>,
    edit: &PolicyEdit<P>,
) -> Result<(), HnsError> {
    use hcn::RequestType;
    let type_name = edit.type_name;
    match request {
        RequestType::Add => {
            for p in given {
                if current.contains(&p) {
                    return Err(HnsError::new(
                        HResult::HCN_E_POLICY_ALREADY_EXISTS,
                        format!("an identical {} policy is already there", type_name(&p)),
                    ));
                }
                current.push(p);
            }
        }
        RequestType::Remove => {
            for p in given {
                let Some(at) = current.iter().position(|c| (edit.same)(c, &p)) else {
                    return Err(HnsError::new(
                        HResult::HCN_E_POLICY_NOT_FOUND,
                        format!("no identical {} policy to remove", type_name(&p)),
                    ));
                };
                current.remove(at);
            }
        }
        RequestType::Update => {
            current.retain(|c| !(edit.replaced)(c, &given));
            current.extend(given);
        }
        RequestType::Refresh => {
            return Err(HnsError::new(
                HResult::HCN_E_REQUEST_UNSUPPORTED,
                "RequestType Refresh is not supported for policies; use Add, Remove or Update",
            ));
        }
    }
    Ok(())
}
