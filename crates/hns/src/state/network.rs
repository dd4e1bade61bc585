//! Network rules: unique names, Overlay VSIDs, policy edits, no delete while endpoints remain.

use hcn::error::{HResult, HnsError};
use hcn::modify::{ModifyRequest, PolicyRequest};
use hcn::{Guid, Network, NetworkPolicy, NetworkType, ResourceType};

use super::endpoint::check_mac;
use super::{Change, Kind, Object, Plan, PolicyEdit, State, edit_policies, settings};

/// A network's `Update` replaces its policies of the given types, and a `SetPolicy` by its
/// `Id` (Azure NPM updates one set's members at a time); a `Remove` of a set names it by `Id`.
const NETWORK_POLICY_EDIT: PolicyEdit<NetworkPolicy> = PolicyEdit {
    type_name: NetworkPolicy::type_name,
    same: |c, g| match (set_id(c), set_id(g)) {
        (Some(a), Some(b)) => a == b,
        _ => c == g,
    },
    replaced: |c, given| match set_id(c) {
        Some(id) => given.iter().any(|g| set_id(g) == Some(id)),
        None => given.iter().any(|g| g.type_name() == c.type_name()),
    },
};

/// The `Id` of a `SetPolicy`.
fn set_id(p: &NetworkPolicy) -> Option<&str> {
    match p {
        NetworkPolicy::SetPolicy(s) => Some(&s.id),
        _ => None,
    }
}

/// VSIDs below 4096 are reserved on Windows (flannel refuses a VNI below 4096 for this reason).
const MIN_VSID: u32 = 4096;
const MAX_VSID: u32 = (1 << 24) - 1;

impl State {
    pub(super) fn plan_create_network(&self, mut net: Network) -> Result<Plan, HnsError> {
        net.id = self.new_id(Kind::Network, net.id)?;
        if !net.name.is_empty() && self.network_by_name(&net.name).is_some() {
            return Err(HnsError::new(
                HResult::HCN_E_NETWORK_ALREADY_EXISTS,
                format!("Name: a network named \"{}\" already exists", net.name),
            ));
        }
        check_network(&net)?;
        self.check_network_sets(&net)?;
        give_dr_mac(&mut net);
        Ok(put(net))
    }

    pub(super) fn plan_modify_network(
        &self,
        id: Guid,
        req: ModifyRequest,
    ) -> Result<Plan, HnsError> {
        let mut net = self
            .networks
            .get(&id)
            .cloned()
            .ok_or_else(|| Kind::Network.not_found(&id))?;
        match req.resource_type {
            ResourceType::Policy => {
                let given: PolicyRequest<NetworkPolicy> = settings(&req)?;
                if req.request_type == hcn::RequestType::Remove {
                    self.check_set_removal(&net, &given.policies)?;
                }
                edit_policies(
                    &mut net.policies,
                    req.request_type,
                    given.policies,
                    &NETWORK_POLICY_EDIT,
                )?;
            }
            ResourceType::Dns => net.dns = settings(&req)?,
            other => {
                return Err(HnsError::new(
                    HResult::HCN_E_REQUEST_UNSUPPORTED,
                    format!(
                        "ResourceType {other} cannot be modified on a network; use Policy or DNS"
                    ),
                ));
            }
        }
        check_network(&net)?;
        self.check_network_sets(&net)?;
        Ok(put(net))
    }

    /// A set that a nested set of the network still holds (one not removed with it) cannot be
    /// removed.
    fn check_set_removal(&self, net: &Network, removed: &[NetworkPolicy]) -> Result<(), HnsError> {
        let sets = super::acl::sets(net);
        let gone: Vec<&str> = removed.iter().filter_map(set_id).collect();
        for id in &gone {
            let holder = sets
                .values()
                .filter(|s| !gone.contains(&s.id.as_str()))
                .find(|s| s.values.sets().any(|m| m == *id));
            if let Some(holder) = holder {
                return Err(HnsError::new(
                    HResult::HCN_E_ENTITY_HAS_REFERENCES,
                    format!(
                        "set \"{id}\" is a member of NESTEDIPSET \"{}\"; remove it from that set (or remove that set) first",
                        holder.id
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn plan_delete_network(&self, id: Guid) -> Result<Plan, HnsError> {
        if !self.networks.contains_key(&id) {
            return Err(Kind::Network.not_found(&id));
        }
        let in_use = self
            .endpoints
            .values()
            .filter(|e| e.host_compute_network == id)
            .count();
        if in_use > 0 {
            return Err(HnsError::new(
                HResult::HCN_E_ENTITY_HAS_REFERENCES,
                format!("{in_use} endpoint(s) are still on network {id}; delete them first"),
            ));
        }
        Ok(Plan {
            changes: vec![Change::Delete(Kind::Network, id)],
            result: None,
        })
    }

    /// The network called `name` (case-insensitive, as HNS compares names).
    pub fn network_by_name(&self, name: &str) -> Option<&Network> {
        self.network_names
            .get(&name.to_ascii_lowercase())
            .and_then(|id| self.networks.get(id))
    }
}

/// HNS generates a distributed-router MAC for each Overlay network and reports it as the
/// network's `DrMacAddress` policy (flanneld reads it into its lease as the VtepMAC); one in
/// the Hyper-V range, from the network's ID, unless the caller gave one.
fn give_dr_mac(net: &mut Network) {
    let given = net
        .policies
        .iter()
        .any(|p| matches!(p, NetworkPolicy::DrMacAddress(_)));
    if net.network_type != NetworkType::Overlay || given {
        return;
    }
    let b = net.id.0.as_bytes();
    net.policies.push(NetworkPolicy::DrMacAddress(
        hcn::policy::DrMacAddressPolicySetting {
            address: hcn::MacAddress([0x00, 0x15, 0x5d, 0xd0, b[14], b[15]]),
        },
    ));
}

fn put(net: Network) -> Plan {
    let obj = Object::Network(net);
    Plan {
        changes: vec![Change::Put(obj.clone())],
        result: Some(obj),
    }
}

/// Rules that depend on the network mode, and MACs that interfaces can have.
fn check_network(net: &Network) -> Result<(), HnsError> {
    let overlay = net.network_type == NetworkType::Overlay;
    for (i, r) in net.mac_pool.ranges.iter().enumerate() {
        let at = format!("MacPool.Ranges[{i}]");
        check_mac(&format!("{at}.StartMacAddress"), r.start_mac_address)?;
        check_mac(&format!("{at}.EndMacAddress"), r.end_mac_address)?;
        // Both ends are unicast (an even first byte), so a range over more than one first
        // byte holds an odd one: multicast addresses it would hand out.
        if r.start_mac_address.0[0] != r.end_mac_address.0[0] {
            return Err(HnsError::new(
                HResult::E_INVALIDARG,
                format!(
                    "{at}: {} to {} holds multicast addresses (first byte {:02X}); keep a range within one first byte",
                    r.start_mac_address,
                    r.end_mac_address,
                    r.start_mac_address.0[0] | 1
                ),
            ));
        }
    }
    for (i, p) in net.policies.iter().enumerate() {
        if let NetworkPolicy::DrMacAddress(d) = p {
            check_mac(&format!("Policies[{i}].Settings.Address"), d.address)?;
        }
    }
    for (i, subnet) in net.subnets().enumerate() {
        check_subnet_routes(i, subnet)?;
        match subnet.vsid() {
            Some(v) if !(MIN_VSID..=MAX_VSID).contains(&v) => {
                return Err(HnsError::new(
                    HResult::HCN_E_INVALID_SUBNET,
                    format!(
                        "subnet {i}: VSID {v} is out of range; use {MIN_VSID}-{MAX_VSID} (e.g. 4096)"
                    ),
                ));
            }
            None if overlay => {
                return Err(HnsError::new(
                    HResult::HCN_E_INVALID_SUBNET,
                    format!(
                        "subnet {i}: an Overlay subnet needs a VSID policy, e.g. {{\"Type\":\"VSID\",\"Settings\":{{\"IsolationId\":4096}}}}"
                    ),
                ));
            }
            _ => {}
        }
    }
    for p in &net.policies {
        let overlay_only = matches!(
            p,
            NetworkPolicy::RemoteSubnetRoute(_) | NetworkPolicy::HostRoute(_)
        );
        if overlay_only && !overlay {
            return Err(HnsError::new(
                HResult::HCN_E_INVALID_POLICY,
                format!(
                    "{} policies apply to Overlay networks only; this one is {}",
                    p.type_name(),
                    net.network_type
                ),
            ));
        }
    }
    Ok(())
}

/// A subnet's routes name their next hop (the gateway HNS reserves) and a destination written
/// as a prefix, without host bits: HNS refuses `{"NextHop": "", "DestinationPrefix": ""}` and
/// `1.1.1.1/0` (hcsshim `hcn/hcnnetwork_test.go` TestCreateDeleteNetworks expects both to fail).
fn check_subnet_routes(i: usize, subnet: &hcn::Subnet) -> Result<(), HnsError> {
    for (j, route) in subnet.routes.iter().enumerate() {
        if route.next_hop.is_none() {
            return Err(HnsError::new(
                HResult::HCN_E_INVALID_SUBNET,
                format!(
                    "subnet {i}: Routes[{j}].NextHop is missing; give the subnet's gateway, e.g. the first host address"
                ),
            ));
        }
        if let Some(p) = route.destination_prefix
            && p != p.trunc()
        {
            return Err(HnsError::new(
                HResult::HCN_E_INVALID_PREFIX,
                format!(
                    "subnet {i}: Routes[{j}].DestinationPrefix {p} has host bits set; write it as {}",
                    p.trunc()
                ),
            ));
        }
    }
    Ok(())
}
