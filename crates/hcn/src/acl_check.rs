//! What HNS refuses in an ACL when it is applied, with its error: the literal `"Any"` as an
//! address (`0x803B000D`, "The provided policy configuration is invalid or missing
//! parameters", hcsshim#1059: leave the field out instead), and IPv4 beside IPv6 in one rule
//! (a VFP rule is of one address family: `ACL_ENDPOINT_GROUP_IPV4_*` or `_IPV6_*`). Set IDs are
//! checked against the network's sets by hnsd, which knows them.

use crate::acl::{AclAddress, AclAddresses};
use crate::decode::DecodeError;
use crate::error::HResult;
use crate::policy::{AclPolicySetting, SetPolicySetting, SetPolicyType, TierAclRule};

/// The addresses of one rule, by field name.
fn addresses<'a>(
    local: &'a AclAddresses,
    remote: &'a AclAddresses,
) -> [(&'static str, &'a AclAddresses); 2] {
    [("LocalAddresses", local), ("RemoteAddresses", remote)]
}

/// Checks one rule's addresses; `at` is where the rule is (`Policies[2].Settings`).
fn check_addresses(
    at: &str,
    local: &AclAddresses,
    remote: &AclAddresses,
) -> Result<(), DecodeError> {
    let mut family: Option<(&str, ipnet::IpNet)> = None;
    for (field, list) in addresses(local, remote) {
        for entry in list.entries() {
            match entry {
                AclAddress::Set(id) if id.eq_ignore_ascii_case("any") => {
                    return Err(invalid(
                        format!("{at}.{field}"),
                        format!(
                            "\"{id}\" is not an address; HNS refuses it: leave {field} out (or empty) to match any address"
                        ),
                    ));
                }
                AclAddress::Set(_) => {}
                AclAddress::Prefix(p) => match family {
                    Some((first_field, first)) if first.addr().is_ipv4() != p.addr().is_ipv4() => {
                        return Err(invalid(
                            format!("{at}.{field}"),
                            format!(
                                "{p} is not of the address family of {first} ({first_field}); one ACL holds IPv4 or IPv6 addresses, not both: write one rule per family"
                            ),
                        ));
                    }
                    Some(_) => {}
                    None => family = Some((field, *p)),
                },
            }
        }
    }
    Ok(())
}

fn named_sets<'a>(
    local: &'a AclAddresses,
    remote: &'a AclAddresses,
) -> impl Iterator<Item = (&'static str, &'a str)> {
    addresses(local, remote)
        .into_iter()
        .flat_map(|(field, list)| list.sets().map(move |id| (field, id)))
}

fn invalid(path: String, message: String) -> DecodeError {
    DecodeError::new(HResult::HCN_E_INVALID_POLICY, path, message)
}

impl AclPolicySetting {
    /// What HNS checks of an `ACL` / `NetworkACL` on its own; `at` names where it is.
    pub fn check(&self, at: &str) -> Result<(), DecodeError> {
        check_addresses(at, &self.local_addresses, &self.remote_addresses)
    }

    /// The set IDs its addresses name, with the field naming each.
    pub fn sets(&self) -> impl Iterator<Item = (&'static str, &str)> {
        named_sets(&self.local_addresses, &self.remote_addresses)
    }
}

impl TierAclRule {
    /// As [`AclPolicySetting::check`], for a rule of a `TierAcl`.
    pub fn check(&self, at: &str) -> Result<(), DecodeError> {
        check_addresses(at, &self.local_addresses, &self.remote_addresses)
    }

    /// The set IDs its addresses name, with the field naming each.
    pub fn sets(&self) -> impl Iterator<Item = (&'static str, &str)> {
        named_sets(&self.local_addresses, &self.remote_addresses)
    }
}

impl SetPolicySetting {
    /// A set has an `Id`; an `IPSET` holds addresses, a `NESTEDIPSET` set IDs, not itself.
    pub fn check(&self, at: &str) -> Result<(), DecodeError> {
        if self.id.trim().is_empty() {
            return Err(invalid(
                format!("{at}.Id"),
                "a set needs an Id, which ACL addresses name it by (e.g. \"azure-npm-3216600258\")"
                    .into(),
            ));
        }
        for entry in self.values.entries() {
            let wrong = match (self.policy_type, entry) {
                (SetPolicyType::IpSet, AclAddress::Set(id)) => Some(format!(
                    "\"{id}\" is not an address; an IPSET holds addresses and prefixes (a NESTEDIPSET holds set IDs)"
                )),
                (SetPolicyType::NestedIpSet, AclAddress::Prefix(p)) => Some(format!(
                    "{p} is an address; a NESTEDIPSET holds the IDs of other sets (put addresses in an IPSET)"
                )),
                (SetPolicyType::NestedIpSet, AclAddress::Set(id)) if *id == self.id => Some(
                    format!("\"{id}\" is this set itself; a NESTEDIPSET holds other sets"),
                ),
                _ => None,
            };
            if let Some(message) = wrong {
                return Err(invalid(format!("{at}.Values"), message));
            }
        }
        Ok(())
    }
}
