//! Decoding HCN documents from clients: parse, normalise spellings, decode into the typed
//! model, validate. Every failure names the field and says what to write instead.

use serde::de::DeserializeOwned;

use crate::error::{HResult, HnsError};
use crate::loadbalancer::{LoadBalancer, LoadBalancerDistribution};
use crate::network::Network;
use crate::{Endpoint, EndpointPolicy, Namespace, NetworkPolicy, SdnRoute};

/// A document that could not be decoded: where, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct DecodeError {
    /// The HRESULT HNS gives for this kind of failure.
    pub code: HResult,
    /// Where in the document, e.g. `Ipams[0].Subnets[0].IpAddressPrefix`.
    pub path: String,
    pub message: String,
}

impl DecodeError {
    pub fn new(code: HResult, path: impl Into<String>, message: impl Into<String>) -> Self {
        DecodeError {
            code,
            path: path.into(),
            message: message.into(),
        }
    }
}

impl From<DecodeError> for HnsError {
    fn from(e: DecodeError) -> Self {
        HnsError::new(e.code, e.to_string())
    }
}

/// Semantic checks beyond what the types enforce.
pub trait Validate {
    fn validate(&self) -> Result<(), DecodeError>;
}

/// Decodes a client document into `T`: JSON syntax, then key spellings, then types, then
/// [`Validate`].
pub fn decode<T: DeserializeOwned + Validate>(bytes: &[u8]) -> Result<T, DecodeError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        DecodeError::new(
            HResult::HCN_E_INVALID_JSON,
            "(document)",
            format!("not valid JSON: {e}"),
        )
    })?;
    if !value.is_object() {
        // serde would read an array as a struct's fields in order: `[]` as an object with none.
        return Err(DecodeError::new(
            HResult::E_INVALIDARG,
            "(document)",
            format!(
                "must be a JSON object ({{\"Name\": ...}}), not {}",
                json_kind(&value)
            ),
        ));
    }
    decode_value(value)
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The longest `Name` of a network or an endpoint, in UTF-16 code units (Windows' characters).
/// HNS documents no limit of its own; a network's name is its vSwitch's and its host vNIC's
/// (`vEthernet (<name>)`), an endpoint's its port's, and Windows keeps interface names and
/// aliases in `IF_MAX_STRING_SIZE` (256) characters.
pub const MAX_NAME: usize = 256;

/// Refuses a name longer than [`MAX_NAME`].
fn check_name(name: &str) -> Result<(), DecodeError> {
    let length = name.encode_utf16().count();
    if length > MAX_NAME {
        return Err(DecodeError::new(
            HResult::E_INVALIDARG,
            "Name",
            format!("is {length} characters long; HNS takes names of at most {MAX_NAME}"),
        ));
    }
    Ok(())
}

/// As [`decode`], from a parsed value.
pub fn decode_value<T: DeserializeOwned + Validate>(
    value: serde_json::Value,
) -> Result<T, DecodeError> {
    let mut value = crate::keys::normalise(value);
    crate::v1::to_v2(&mut value);
    if let Some(path) = crate::keys::acl_id_spelled_id(&value, String::new()) {
        return Err(DecodeError::new(
            HResult::HCN_E_INVALID_POLICY,
            path,
            "HNS refuses the key \"ID\" in an ACL (Azure NPM: \"HNS is not happy with 'ID'\"); spell it \"Id\"",
        ));
    }
    let typed: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        if message.starts_with("unknown variant") {
            let path = if path.ends_with("Type") {
                path
            } else {
                format!("{path}.Type")
            };
            DecodeError::new(
                HResult::HCN_E_INVALID_POLICY_TYPE,
                path,
                format!("{message}; HNS refuses policy types it does not know"),
            )
        } else {
            DecodeError::new(HResult::E_INVALIDARG, path, message)
        }
    })?;
    typed.validate()?;
    Ok(typed)
}

impl Validate for Network {
    fn validate(&self) -> Result<(), DecodeError> {
        check_name(&self.name)?;
        check_policies(&self.policies, "")?;
        for (i, range) in self.mac_pool.ranges.iter().enumerate() {
            if range.start_mac_address.to_u64() > range.end_mac_address.to_u64() {
                return Err(DecodeError::new(
                    HResult::HCN_E_INVALID_NETWORK,
                    format!("MacPool.Ranges[{i}]"),
                    "StartMacAddress is after EndMacAddress; swap them",
                ));
            }
        }
        for (i, ipam) in self.ipams.iter().enumerate() {
            for (j, subnet) in ipam.subnets.iter().enumerate() {
                let at = format!("Ipams[{i}].Subnets[{j}]");
                let Some(prefix) = subnet.ip_address_prefix else {
                    return Err(DecodeError::new(
                        HResult::HCN_E_INVALID_SUBNET,
                        format!("{at}.IpAddressPrefix"),
                        "a subnet needs a prefix, e.g. \"10.244.1.0/24\"",
                    ));
                };
                for (k, route) in subnet.routes.iter().enumerate() {
                    match route.next_hop {
                        None => {
                            return Err(DecodeError::new(
                                HResult::HCN_E_INVALID_SUBNET,
                                format!("{at}.Routes[{k}].NextHop"),
                                "every route of a subnet needs a NextHop",
                            ));
                        }
                        Some(hop) if hop.is_ipv4() != prefix.addr().is_ipv4() => {
                            return Err(DecodeError::new(
                                HResult::HCN_E_INVALID_SUBNET,
                                format!("{at}.Routes[{k}].NextHop"),
                                format!("{hop} is not of the address family of {prefix}"),
                            ));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
        Ok(())
    }
}

/// The checks a policy gets on its own, wherever it is sent (an object's `Policies`, a modify
/// request's `Settings.Policies`); `at` names where it is.
pub trait PolicyCheck {
    fn check(&self, at: &str) -> Result<(), DecodeError>;
}

impl PolicyCheck for EndpointPolicy {
    fn check(&self, at: &str) -> Result<(), DecodeError> {
        match self {
            EndpointPolicy::Acl(a) => a.check(at),
            EndpointPolicy::TierAcl(t) => t
                .tier_acl_rules
                .iter()
                .enumerate()
                .try_for_each(|(i, r)| r.check(&format!("{at}.TierAclRules[{i}]"))),
            _ => Ok(()),
        }
    }
}

impl PolicyCheck for NetworkPolicy {
    fn check(&self, at: &str) -> Result<(), DecodeError> {
        match self {
            NetworkPolicy::NetworkAcl(a) => a.check(at),
            NetworkPolicy::SetPolicy(s) => s.check(at),
            _ => Ok(()),
        }
    }
}

fn check_policies<P: PolicyCheck>(policies: &[P], at: &str) -> Result<(), DecodeError> {
    policies
        .iter()
        .enumerate()
        .try_for_each(|(i, p)| p.check(&format!("{at}Policies[{i}].Settings")))
}

impl Validate for Endpoint {
    fn validate(&self) -> Result<(), DecodeError> {
        check_name(&self.name)?;
        check_policies(&self.policies, "")?;
        for (i, config) in self.ip_configurations.iter().enumerate() {
            let max = match config.ip_address {
                Some(std::net::IpAddr::V6(_)) => 128,
                _ => 32,
            };
            if config.prefix_length > max {
                return Err(DecodeError::new(
                    HResult::HCN_E_INVALID_PREFIX,
                    format!("IpConfigurations[{i}].PrefixLength"),
                    format!("{} is longer than {max}", config.prefix_length),
                ));
            }
        }
        Ok(())
    }
}

impl Validate for LoadBalancer {
    fn validate(&self) -> Result<(), DecodeError> {
        for (i, pm) in self.port_mappings.iter().enumerate() {
            let at = format!("PortMappings[{i}]");
            if pm.protocol != 6 && pm.protocol != 17 {
                return Err(DecodeError::new(
                    HResult::E_INVALIDARG,
                    format!("{at}.Protocol"),
                    format!(
                        "{} is not supported by the load balancer; use 6 (TCP) or 17 (UDP)",
                        pm.protocol
                    ),
                ));
            }
            if pm.internal_port == 0 {
                return Err(DecodeError::new(
                    HResult::HCN_E_INVALID_INTERNAL_PORT,
                    format!("{at}.InternalPort"),
                    "the backend port must be set (1-65535)",
                ));
            }
            if pm.distribution_type > LoadBalancerDistribution::SOURCE_IP {
                return Err(DecodeError::new(
                    HResult::E_INVALIDARG,
                    format!("{at}.DistributionType"),
                    format!(
                        "{} is not a distribution; use 0 (None), 1 (SourceIPProtocol) or 2 (SourceIP)",
                        pm.distribution_type
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Validate for Namespace {
    fn validate(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}

impl Validate for SdnRoute {
    fn validate(&self) -> Result<(), DecodeError> {
        for (i, s) in self.setting.iter().enumerate() {
            if s.destination_prefix.is_none() {
                return Err(DecodeError::new(
                    HResult::E_INVALIDARG,
                    format!("Setting[{i}].DestinationPrefix"),
                    "an SDN route needs a destination prefix, e.g. \"10.96.0.0/12\"",
                ));
            }
        }
        Ok(())
    }
}

impl Validate for crate::modify::ModifyRequest {
    fn validate(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}

impl Validate for crate::query::Query {
    fn validate(&self) -> Result<(), DecodeError> {
        crate::query::Filter::parse(&self.filter)
            .map(|_| ())
            .map_err(|m| DecodeError::new(HResult::E_INVALIDARG, "Filter", m))
    }
}

impl<P: DeserializeOwned + PolicyCheck> Validate for crate::modify::PolicyRequest<P> {
    fn validate(&self) -> Result<(), DecodeError> {
        check_policies(&self.policies, "")
    }
}

impl Validate for crate::modify::NamespaceEndpointRequest {
    fn validate(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}

impl Validate for crate::types::Dns {
    fn validate(&self) -> Result<(), DecodeError> {
        Ok(())
    }
}
