//! ACLs and the sets they name, where HNS checks them against the network and the version:
//! an ACL's set IDs must be `SetPolicy` sets of the endpoint's network (HNS answers
//! `0x803B000D` otherwise); a `NESTEDIPSET` holds sets that exist, so plain sets are added
//! before the nested sets that name them, and a set that a nested set or an ACL names cannot
//! be removed (Azure NPM adds IPSETs before NESTEDIPSETs and removes them in reverse for this
//! reason). `SetPolicy` needs HNS 13.0, `TierAcl` 14.0, `NetworkACL` and `NESTEDIPSET` 15.0
//! (hnslib's version ranges); an older profile refuses them as its HNS does not know them.

use std::collections::BTreeMap;

use hcn::error::{HResult, HnsError};
use hcn::policy::{SetPolicySetting, SetPolicyType};
use hcn::{Endpoint, EndpointPolicy, Network, NetworkPolicy};

use super::State;

/// The sets of a network by ID.
pub(super) fn sets(net: &Network) -> BTreeMap<&str, &SetPolicySetting> {
    net.policies
        .iter()
        .filter_map(|p| match p {
            NetworkPolicy::SetPolicy(s) => Some((s.id.as_str(), s)),
            _ => None,
        })
        .collect()
}

impl State {
    /// The policy type `name` needs HNS `major.minor`; refused below it.
    fn needs(&self, has: bool, name: &str, major: u32, minor: u32) -> Result<(), HnsError> {
        if has {
            return Ok(());
        }
        let v = self.profile.version();
        Err(HnsError::new(
            HResult::HCN_E_INVALID_POLICY_TYPE,
            format!(
                "{name} needs HNS {major}.{minor} or later; profile {} is HNS {}.{}",
                self.profile, v.major, v.minor
            ),
        ))
    }

    /// An endpoint's ACLs against its network and the profile's version.
    pub(super) fn check_endpoint_acls(&self, ep: &Endpoint, net: &Network) -> Result<(), HnsError> {
        let f = self.profile.features();
        let known = sets(net);
        for (i, p) in ep.policies.iter().enumerate() {
            let named: Vec<(String, &str)> = match p {
                EndpointPolicy::Acl(a) => a.sets().map(|(f, id)| (f.to_string(), id)).collect(),
                EndpointPolicy::TierAcl(t) => {
                    self.needs(f.tier_acl, "TierAcl", 14, 0)?;
                    let rules = t.tier_acl_rules.iter().enumerate();
                    rules
                        .flat_map(|(j, r)| {
                            r.sets()
                                .map(move |(f, id)| (format!("TierAclRules[{j}].{f}"), id))
                        })
                        .collect()
                }
                _ => continue,
            };
            if let Some((field, id)) = named.into_iter().find(|(_, id)| !known.contains_key(id)) {
                return Err(HnsError::new(
                    HResult::HCN_E_INVALID_POLICY,
                    format!(
                        "Policies[{i}].Settings.{field}: \"{id}\" is neither an address nor a SetPolicy of network \"{}\"; add the set to the network first (ModifyNetwork, ResourceType Policy, RequestType Add)",
                        net.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A network's sets and network ACLs against the version, each other and the ACLs of its
    /// endpoints.
    pub(super) fn check_network_sets(&self, net: &Network) -> Result<(), HnsError> {
        let f = self.profile.features();
        let known = sets(net);
        let mut seen = BTreeMap::new();
        for (i, p) in net.policies.iter().enumerate() {
            match p {
                NetworkPolicy::NetworkAcl(_) => self.needs(f.network_acl, "NetworkACL", 15, 0)?,
                NetworkPolicy::SetPolicy(s) => {
                    self.needs(f.set_policy, "SetPolicy", 13, 0)?;
                    if s.policy_type == SetPolicyType::NestedIpSet {
                        self.needs(f.nested_ip_set, "a NESTEDIPSET SetPolicy", 15, 0)?;
                    }
                    if seen.insert(s.id.as_str(), i).is_some() {
                        return Err(HnsError::new(
                            HResult::HCN_E_POLICY_ALREADY_EXISTS,
                            format!(
                                "Policies[{i}]: a set with Id \"{}\" is already on the network; change it with RequestType Update",
                                s.id
                            ),
                        ));
                    }
                    for member in s.values.sets() {
                        if !known.contains_key(member) {
                            return Err(HnsError::new(
                                HResult::HCN_E_INVALID_POLICY,
                                format!(
                                    "Policies[{i}].Settings.Values: set \"{member}\" of NESTEDIPSET \"{}\" is not on the network; add the IPSET first",
                                    s.id
                                ),
                            ));
                        }
                        if known
                            .get(member)
                            .is_some_and(|m| m.policy_type == SetPolicyType::NestedIpSet)
                        {
                            return Err(HnsError::new(
                                HResult::HCN_E_INVALID_POLICY,
                                format!(
                                    "Policies[{i}].Settings.Values: \"{member}\" is a NESTEDIPSET; a nested set holds IPSETs only"
                                ),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        for ep in self
            .endpoints
            .values()
            .filter(|e| e.host_compute_network == net.id)
        {
            self.check_endpoint_acls(ep, net).map_err(|e| {
                HnsError::new(
                    HResult::HCN_E_ENTITY_HAS_REFERENCES,
                    format!(
                        "a set is still named by an ACL of endpoint {} ({}); remove or update that ACL first",
                        ep.id, e.detail
                    ),
                )
            })?;
        }
        Ok(())
    }
}
