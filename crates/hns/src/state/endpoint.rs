//! Endpoint rules: the network must exist, addresses come from its subnets (HNS IPAM) and MACs
//! from its pool, no address twice on one side, no delete while attached.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hcn::error::{HResult, HnsError};
use hcn::modify::{ModifyRequest, PolicyRequest};
use hcn::namespace::NamespaceResourceData;
use hcn::network::SubnetFlags;
use hcn::policy::PortMappingPolicySetting;
use hcn::{
    Endpoint, EndpointPolicy, Guid, IpConfig, MacAddress, Namespace, NamespaceResource,
    NamespaceResourceType, Network, ResourceType, Subnet,
};
use ipnet::IpNet;

use super::pool::LowestFree;
use super::{Change, Kind, Object, Plan, PolicyEdit, State, edit_policies, settings};

/// An endpoint's `Update` replaces its whole policy list, as HNS does: Azure NPM re-sends the
/// endpoint's other policies (OutBoundNAT, routes) before its ACLs for this reason.
const ENDPOINT_POLICY_EDIT: PolicyEdit<EndpointPolicy> = PolicyEdit {
    type_name: EndpointPolicy::type_name,
    same: |c, g| c == g,
    replaced: |_, _| true,
};

/// A v1 update carrying only ACLs: it replaces the endpoint's ACLs, nothing else.
const V1_ACL_EDIT: PolicyEdit<EndpointPolicy> = PolicyEdit {
    type_name: EndpointPolicy::type_name,
    same: |c, g| c == g,
    replaced: |c, _| is_acl(c),
};

fn is_acl(p: &EndpointPolicy) -> bool {
    matches!(p, EndpointPolicy::Acl(_))
}

impl State {
    pub(super) fn plan_create_endpoint(&self, mut ep: Endpoint) -> Result<Plan, HnsError> {
        ep.id = self.new_id(Kind::Endpoint, ep.id)?;
        ep.linux_acl_generation = 0;
        if ep.host_compute_network.is_nil() {
            return Err(HnsError::new(
                HResult::E_INVALIDARG,
                "HostComputeNetwork: name the network the endpoint is on (its ID)",
            ));
        }
        let net = self
            .networks
            .get(&ep.host_compute_network)
            .ok_or_else(|| Kind::Network.not_found(&ep.host_compute_network))?;
        check_endpoint(&ep)?;
        self.check_endpoint_acls(&ep, net)?;
        let joins = self.namespace_to_join(&ep)?;
        self.assign_addresses(net, &mut ep)?;
        self.assign_mac(net, &mut ep)?;
        self.check_host_ports(&ep)?;
        let mut changes = Vec::new();
        if let Some(mut ns) = joins {
            ns.resources.push(NamespaceResource {
                resource_type: NamespaceResourceType::Endpoint,
                data: NamespaceResourceData { id: Some(ep.id) },
            });
            changes.push(Change::Put(Object::Namespace(ns)));
        }
        let obj = Object::Endpoint(ep);
        changes.push(Change::Put(obj.clone()));
        Ok(Plan {
            changes,
            result: Some(obj),
        })
    }

    pub(super) fn plan_modify_endpoint(
        &self,
        id: Guid,
        req: ModifyRequest,
    ) -> Result<Plan, HnsError> {
        if req.resource_type != ResourceType::Policy {
            return Err(HnsError::new(
                HResult::HCN_E_REQUEST_UNSUPPORTED,
                format!(
                    "ResourceType {} cannot be modified on an endpoint here; use Policy",
                    req.resource_type
                ),
            ));
        }
        let given: PolicyRequest<EndpointPolicy> = settings(&req)?;
        self.plan_endpoint_policies(id, req.request_type, given.policies, &ENDPOINT_POLICY_EDIT)
    }

    /// HNS v1's endpoint update: ACLs alone replace the endpoint's ACLs (felix sends only
    /// its rules, and the CNI's policies stay); a list with other policies replaces all.
    pub(super) fn plan_update_endpoint_v1(
        &self,
        id: Guid,
        policies: Vec<EndpointPolicy>,
    ) -> Result<Plan, HnsError> {
        let edit = if policies.iter().all(is_acl) {
            &V1_ACL_EDIT
        } else {
            &ENDPOINT_POLICY_EDIT
        };
        self.plan_endpoint_policies(id, hcn::RequestType::Update, policies, edit)
    }

    fn plan_endpoint_policies(
        &self,
        id: Guid,
        request: hcn::RequestType,
        given: Vec<EndpointPolicy>,
        edit: &PolicyEdit<EndpointPolicy>,
    ) -> Result<Plan, HnsError> {
        let mut ep = self
            .endpoints
            .get(&id)
            .cloned()
            .ok_or_else(|| Kind::Endpoint.not_found(&id))?;
        if given.iter().any(is_acl) || request == hcn::RequestType::Update {
            ep.linux_acl_generation += 1;
        }
        edit_policies(&mut ep.policies, request, given, edit)?;
        check_endpoint(&ep)?;
        self.check_host_ports(&ep)?;
        if let Some(net) = self.networks.get(&ep.host_compute_network) {
            self.check_endpoint_acls(&ep, net)?;
        }
        let obj = Object::Endpoint(ep);
        Ok(Plan {
            changes: vec![Change::Put(obj.clone())],
            result: Some(obj),
        })
    }

    /// Deleting an endpoint attached to a namespace is refused (detach first, as the CNI
    /// plugins do). Load balancers and routes that name it lose it, as on Windows, where
    /// deleting an endpoint that another Service still used succeeded (kubernetes#76316).
    pub(super) fn plan_delete_endpoint(&self, id: Guid) -> Result<Plan, HnsError> {
        let ep = self
            .endpoints
            .get(&id)
            .ok_or_else(|| Kind::Endpoint.not_found(&id))?;
        if !ep.host_compute_namespace.is_nil() {
            return Err(HnsError::new(
                HResult::HCN_E_ENTITY_HAS_REFERENCES,
                format!(
                    "endpoint {id} is attached to namespace {}; remove it from the namespace first",
                    ep.host_compute_namespace
                ),
            ));
        }
        let mut changes = Vec::new();
        for (kind, user) in self.endpoint_users.get(&id).into_iter().flatten() {
            match self.get(*kind, *user) {
                Some(Object::LoadBalancer(mut lb)) => {
                    lb.host_compute_endpoints.retain(|e| *e != id);
                    changes.push(Change::Put(Object::LoadBalancer(lb)));
                }
                Some(Object::Route(mut r)) => {
                    r.host_compute_endpoints.retain(|e| *e != id);
                    changes.push(Change::Put(Object::Route(r)));
                }
                _ => {}
            }
        }
        changes.push(Change::Delete(Kind::Endpoint, id));
        Ok(Plan {
            changes,
            result: None,
        })
    }

    /// The namespace an endpoint created with `HostComputeNamespace` joins, as HCN attaches it
    /// on create (hcsshim `hcn/hcnendpoint_test.go` TestCreateEndpointWithNamespace); it must
    /// exist and the endpoint must be local.
    fn namespace_to_join(&self, ep: &Endpoint) -> Result<Option<Namespace>, HnsError> {
        let id = ep.host_compute_namespace;
        if id.is_nil() {
            return Ok(None);
        }
        if ep.is_remote() {
            return Err(HnsError::new(
                HResult::HCN_E_INVALID_REMOTE_ENDPOINT_OPERATION,
                "HostComputeNamespace: a remote endpoint cannot join a namespace; leave it out",
            ));
        }
        let ns = self.namespaces.get(&id).cloned().ok_or_else(|| {
            HnsError::new(
                HResult::NAMESPACE_NOT_FOUND,
                format!("HostComputeNamespace: namespace {id} was not found; create it first"),
            )
        })?;
        Ok(Some(ns))
    }

    /// Fills in missing addresses from the network's subnets (HNS IPAM) and checks given ones.
    fn assign_addresses(&self, net: &Network, ep: &mut Endpoint) -> Result<(), HnsError> {
        let remote = ep.is_remote();
        if ep.ip_configurations.is_empty() {
            ep.ip_configurations = if remote {
                vec![IpConfig::default()]
            } else {
                self.one_address_per_family(net)?
            };
        }
        let mut taken: Vec<IpAddr> = Vec::new();
        for (i, config) in ep.ip_configurations.iter_mut().enumerate() {
            let at = format!("IpConfigurations[{i}].IpAddress");
            let ip = match config.ip_address {
                Some(ip) => ip,
                None if remote => {
                    return Err(HnsError::new(
                        HResult::E_INVALIDARG,
                        format!("{at}: a remote endpoint needs its address"),
                    ));
                }
                None => {
                    let subnet = net.subnets().find(|s| s.ip_address_prefix.is_some()).ok_or_else(|| {
                        HnsError::new(
                            HResult::HCN_E_SUBNET_NOT_FOUND,
                            format!("{at}: network \"{}\" has no subnet to take an address from; give one", net.name),
                        )
                    })?;
                    self.free_ip(net.id, subnet, &taken).ok_or_else(|| {
                        HnsError::new(
                            HResult::HCN_E_ADDR_INVALID_OR_RESERVED,
                            format!(
                                "{at}: no free address left in {:?}",
                                subnet.ip_address_prefix
                            ),
                        )
                    })?
                }
            };
            if !remote {
                let subnet = net.subnet_for(ip).ok_or_else(|| {
                    HnsError::new(
                        HResult::HCN_E_INVALID_IP,
                        format!(
                            "{at}: {ip} is not in any subnet of network \"{}\"",
                            net.name
                        ),
                    )
                })?;
                if reserved(subnet).contains(&ip) {
                    return Err(HnsError::new(
                        HResult::HCN_E_ADDR_INVALID_OR_RESERVED,
                        format!("{at}: {ip} is the subnet's gateway, which HNS reserves"),
                    ));
                }
                if config.prefix_length == 0 {
                    config.prefix_length = subnet.ip_address_prefix.map_or(0, |p| p.prefix_len());
                }
            }
            if let Some(other) = self.ips.get(&(net.id, remote, ip)) {
                return Err(HnsError::new(
                    HResult::HCN_E_ADDR_INVALID_OR_RESERVED,
                    format!(
                        "{at}: {ip} is already the address of endpoint {other} on this network"
                    ),
                ));
            }
            config.ip_address = Some(ip);
            taken.push(ip);
        }
        Ok(())
    }

    /// HNS IPAM for an endpoint created without addresses: one address from the first subnet
    /// of each address family the network has, IPv4 first (a dual-stack network's endpoint gets
    /// both, as kube-proxy winkernel's dual-stack mode expects). Dual-stack came with HNS 11.10
    /// (hcsshim `hcnglobals.go` IPv6DualStackVersion); an older profile fills one address, from
    /// the first subnet. A network without subnets yields one empty configuration, which the
    /// caller refuses with a message naming the field.
    fn one_address_per_family(&self, net: &Network) -> Result<Vec<IpConfig>, HnsError> {
        if !self.profile.features().ipv6_dual_stack {
            return Ok(vec![IpConfig::default()]);
        }
        let v4 = net
            .subnets()
            .find(|s| s.ip_address_prefix.is_some_and(|p| p.addr().is_ipv4()));
        let v6 = net
            .subnets()
            .find(|s| s.ip_address_prefix.is_some_and(|p| p.addr().is_ipv6()));
        let mut configs = Vec::new();
        for subnet in [v4, v6].into_iter().flatten() {
            let ip = self.free_ip(net.id, subnet, &[]).ok_or_else(|| {
                HnsError::new(
                    HResult::HCN_E_ADDR_INVALID_OR_RESERVED,
                    format!(
                        "IpConfigurations[{}].IpAddress: no free address left in {:?}",
                        configs.len(),
                        subnet.ip_address_prefix
                    ),
                )
            })?;
            configs.push(IpConfig {
                ip_address: Some(ip),
                ..IpConfig::default()
            });
        }
        if configs.is_empty() {
            configs.push(IpConfig::default());
        }
        Ok(configs)
    }

    /// A local endpoint's `PortMapping` may not claim a host port (protocol + external port,
    /// on the same VIP or on every address) that another local endpoint already maps: HNS
    /// answers `HCN_E_PORT_ALREADY_EXISTS` (0x803B0013).
    fn check_host_ports(&self, ep: &Endpoint) -> Result<(), HnsError> {
        if ep.is_remote() {
            return Ok(());
        }
        for (i, mine) in port_mappings(ep).enumerate() {
            let clash = self
                .endpoints
                .values()
                .filter(|o| o.id != ep.id && !o.is_remote())
                .find(|o| port_mappings(o).any(|theirs| same_host_port(mine, theirs)));
            if let Some(other) = clash {
                return Err(HnsError::new(
                    HResult::HCN_E_PORT_ALREADY_EXISTS,
                    format!(
                        "Policies: PortMapping {i} (protocol {}, host port {}) is already mapped by endpoint {}; pick another ExternalPort",
                        mine.protocol, mine.external_port, other.id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The first free host address of `subnet`, skipping the network address, the gateway, the
    /// broadcast address and addresses in use.
    fn free_ip(&self, net: Guid, subnet: &Subnet, also_taken: &[IpAddr]) -> Option<IpAddr> {
        let prefix = subnet.ip_address_prefix?;
        if let Some(pool) = self.ip_pools.get(&net).filter(|p| p.prefix == prefix) {
            return pool.lowest_except(net, also_taken, &self.ips);
        }
        let reserved = reserved(subnet);
        hosts(prefix).find(|ip| {
            !reserved.contains(ip)
                && !also_taken.contains(ip)
                && !self.ips.contains_key(&(net, false, *ip))
        })
    }

    /// Gives the endpoint a MAC from the network's pool when it has none; refuses a local MAC
    /// already in use on the network.
    fn assign_mac(&self, net: &Network, ep: &mut Endpoint) -> Result<(), HnsError> {
        if let Some(mac) = ep.mac_address {
            if !ep.is_remote()
                && let Some(other) = self.macs.get(&(net.id, mac))
            {
                return Err(HnsError::new(
                    HResult::HCN_E_ADDR_INVALID_OR_RESERVED,
                    format!(
                        "MacAddress: {mac} is already the MAC of endpoint {other} on this network"
                    ),
                ));
            }
            return Ok(());
        }
        let in_use = |m: u128| self.macs.contains_key(&(net.id, mac_of(m)));
        let free = match self.mac_pools.get(&net.id) {
            Some(pools) => pools
                .iter()
                .find_map(|p| p.lowest_except(&[], in_use))
                .map(mac_of),
            None => mac_ranges(net)
                .into_iter()
                .flat_map(|(lo, hi)| lo..=hi)
                .map(MacAddress::from_u64)
                .find(|m| !self.macs.contains_key(&(net.id, *m))),
        };
        ep.mac_address = Some(free.ok_or_else(|| {
            HnsError::new(
                HResult::HCN_E_ADDR_INVALID_OR_RESERVED,
                format!(
                    "MacAddress: the MAC pool of network \"{}\" is exhausted",
                    net.name
                ),
            )
        })?);
        Ok(())
    }
}

/// What the vNIC of an endpoint is made from, checked as Windows and Linux would: a unicast
/// MAC, a name Linux takes for an interface, and an MTU an interface can have. Refused with
/// HNS's invalid-parameter HRESULT naming the field, before anything is stored or made.
fn check_endpoint(ep: &Endpoint) -> Result<(), HnsError> {
    if let Some(mac) = ep.mac_address {
        check_mac("MacAddress", mac)?;
    }
    let name = &ep.linux_interface_name;
    if !name.is_empty() && !is_link_name(name) {
        return Err(HnsError::new(
            HResult::E_INVALIDARG,
            format!(
                "LinuxInterfaceName: {name:?} is not a Linux interface name: 1 to {MAX_LINK_NAME} bytes, not . or .., without /, :, NUL or whitespace (e.g. \"eth0\")"
            ),
        ));
    }
    for (i, p) in ep.policies.iter().enumerate() {
        if let EndpointPolicy::EncapOverhead(o) = p
            && o.mtu().is_none()
        {
            let base = hcn::policy::EncapOverheadPolicySetting::BASE_MTU;
            let min = hcn::policy::EncapOverheadPolicySetting::MIN_MTU;
            return Err(HnsError::new(
                HResult::E_INVALIDARG,
                format!(
                    "Policies[{i}].Settings.Overhead: {} leaves the vNIC an MTU of {} (of {base}); it must leave at least {min} (VXLAN's is 50)",
                    o.overhead,
                    base.saturating_sub(o.overhead)
                ),
            ));
        }
    }
    Ok(())
}

/// A MAC an interface can have (`field` names it in the error).
pub(super) fn check_mac(field: &str, mac: MacAddress) -> Result<(), HnsError> {
    match mac.not_unicast() {
        None => Ok(()),
        Some(why) => Err(HnsError::new(
            HResult::E_INVALIDARG,
            format!(
                "{field}: {mac} is {why}; give a unicast MAC such as 00-15-5D-00-00-01, or leave it out for one from the network's pool"
            ),
        )),
    }
}

/// The longest interface name Linux takes (`IFNAMSIZ` less its NUL).
const MAX_LINK_NAME: usize = 15;

/// A name Linux takes for an interface (the kernel's `dev_valid_name`).
fn is_link_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_LINK_NAME
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
}

/// The `PortMapping` policies of an endpoint.
fn port_mappings(ep: &Endpoint) -> impl Iterator<Item = &PortMappingPolicySetting> {
    ep.policies.iter().filter_map(|p| match p {
        EndpointPolicy::PortMapping(pm) => Some(pm),
        _ => None,
    })
}

/// Two mappings claim the same host port: same protocol and external port, and either maps
/// every host address or both name the same VIP.
fn same_host_port(a: &PortMappingPolicySetting, b: &PortMappingPolicySetting) -> bool {
    let vips_overlap = match (a.vip, b.vip) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    };
    a.protocol == b.protocol && a.external_port == b.external_port && vips_overlap
}

/// Addresses of a subnet that endpoints may not take: the gateway, unless the subnet says not
/// to reserve it.
fn reserved(subnet: &Subnet) -> Vec<IpAddr> {
    if subnet.flags & SubnetFlags::DO_NOT_RESERVE_GATEWAY_ADDRESS != 0 {
        return Vec::new();
    }
    subnet.routes.iter().filter_map(|r| r.next_hop).collect()
}

/// The host addresses of a prefix, in order (all of them for /31, /32, /127, /128).
fn hosts(prefix: IpNet) -> Box<dyn Iterator<Item = IpAddr>> {
    match prefix {
        IpNet::V4(p) => Box::new(p.hosts().map(IpAddr::V4)),
        IpNet::V6(p) => Box::new(p.hosts().skip(1).map(IpAddr::V6)),
    }
}

/// A network without a MAC pool draws from Hyper-V's prefix 00-15-5D with 16 bits of the
/// network ID, so two networks' endpoints do not collide.
fn default_pool(net: Guid) -> (u64, u64) {
    let b = net.0.as_bytes();
    let base = MacAddress([0x00, 0x15, 0x5D, b[0], 0, 0]).to_u64();
    (base + 1, base + 0xFFFF)
}

/// The MAC ranges endpoints of `net` draw from: its MacPool, else the default pool.
fn mac_ranges(net: &Network) -> Vec<(u64, u64)> {
    if net.mac_pool.ranges.is_empty() {
        vec![default_pool(net.id)]
    } else {
        net.mac_pool
            .ranges
            .iter()
            .map(|r| (r.start_mac_address.to_u64(), r.end_mac_address.to_u64()))
            .collect()
    }
}

/// One lowest-free allocator per MAC range of `net`.
pub(super) fn mac_pools(
    net: &Network,
    macs: &HashMap<(Guid, MacAddress), Guid>,
) -> Vec<LowestFree> {
    mac_ranges(net)
        .into_iter()
        .map(|(lo, hi)| {
            LowestFree::new(u128::from(lo), u128::from(hi), |m| {
                macs.contains_key(&(net.id, mac_of(m)))
            })
        })
        .collect()
}

pub(super) fn mac_of(n: u128) -> MacAddress {
    // Pool numbers come from 48-bit MACs, so the truncation loses nothing.
    MacAddress::from_u64(n as u64)
}

/// HNS IPAM for one network: its first subnet's host addresses, lowest free first.
#[derive(Clone, Debug)]
pub(super) struct IpPool {
    prefix: IpNet,
    reserved: Vec<IpAddr>,
    free: LowestFree,
}

type IpIndex = HashMap<(Guid, bool, IpAddr), Guid>;

impl IpPool {
    pub(super) fn new(net: &Network, ips: &IpIndex) -> Option<IpPool> {
        let subnet = net.subnets().find(|s| s.ip_address_prefix.is_some())?;
        let prefix = subnet.ip_address_prefix?;
        let (first, last) = host_range(prefix);
        let reserved = reserved(subnet);
        let free = LowestFree::new(first, last, |n| {
            let ip = ip_of(prefix, n);
            reserved.contains(&ip) || ips.contains_key(&(net.id, false, ip))
        });
        Some(IpPool {
            prefix,
            reserved,
            free,
        })
    }

    fn lowest_except(&self, net: Guid, also_taken: &[IpAddr], ips: &IpIndex) -> Option<IpAddr> {
        let also: Vec<u128> = also_taken.iter().map(|ip| number(*ip)).collect();
        let (prefix, reserved) = (self.prefix, &self.reserved);
        self.free
            .lowest_except(&also, |n| {
                let ip = ip_of(prefix, n);
                reserved.contains(&ip) || ips.contains_key(&(net, false, ip))
            })
            .map(|n| ip_of(self.prefix, n))
    }

    pub(super) fn taken(&mut self, net: Guid, ip: IpAddr, ips: &IpIndex) {
        if self.prefix.contains(&ip) {
            let (prefix, reserved) = (self.prefix, &self.reserved);
            self.free.taken(number(ip), |n| {
                let ip = ip_of(prefix, n);
                reserved.contains(&ip) || ips.contains_key(&(net, false, ip))
            });
        }
    }

    pub(super) fn freed(&mut self, ip: IpAddr) {
        if self.prefix.contains(&ip) {
            self.free.freed(number(ip));
        }
    }
}

/// The first and last host address of a prefix as numbers, as [`hosts`] yields them.
fn host_range(prefix: IpNet) -> (u128, u128) {
    let (net, last) = (number(prefix.network()), number(prefix.broadcast()));
    match prefix {
        IpNet::V4(p) if p.prefix_len() >= 31 => (net, last),
        IpNet::V4(_) => (net + 1, last.saturating_sub(1)),
        IpNet::V6(_) => (net + 1, last),
    }
}

fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn ip_of(prefix: IpNet, n: u128) -> IpAddr {
    match prefix {
        // Numbers of a v4 prefix fit in 32 bits.
        IpNet::V4(_) => IpAddr::V4(Ipv4Addr::from(n as u32)),
        IpNet::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
    }
}
