//! Endpoint policies from configs: the `policies` (win-*) or `AdditionalArgs` (sdn*) entries in
//! either HNS v1 (`{"Type":"OutBoundNAT","ExceptionList":[..]}`) or v2 (`{"Type":..,"Settings":..}`)
//! shape, and the policies the plugins generate (pkg/hns `Apply*Policy`).

use std::net::IpAddr;

use hcn::policy::{
    OutboundNatPolicySetting, PortMappingPolicySetting, ProviderAddressPolicySetting,
};
use hcn::{EndpointPolicy, NetworkPolicy, Protocol};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::config::Obj;
use crate::error::CniError;

/// `{"Policies": [...]}`: lets hcn's decoder (spellings, v1 shapes, validation) read a list.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PolicyList<P> {
    policies: Vec<P>,
}

impl<P> hcn::Validate for PolicyList<P> {
    fn validate(&self) -> Result<(), hcn::DecodeError> {
        Ok(())
    }
}

/// The `value`s of the entries of `key` whose `name` is `wanted` (case-insensitive, as
/// `strings.EqualFold`), decoded as HNS policies. An entry HNS would refuse is code 7 naming
/// its path, e.g. `policies[1].value.Settings.Exceptions[0]`.
fn named_policies<P: DeserializeOwned>(
    root: &Obj<'_>,
    key: &str,
    wanted: &str,
) -> Result<Vec<P>, CniError> {
    let mut out = Vec::new();
    for entry in root.objects(key)? {
        if !entry.string("name")?.eq_ignore_ascii_case(wanted) {
            continue;
        }
        let Some(value) = entry.get("value") else {
            return Err(CniError::config(
                &entry.field("value"),
                format!(
                    "missing; an {wanted} entry needs a value such as {{\"Type\":\"OutBoundNAT\",\"Settings\":{{\"Exceptions\":[\"10.244.0.0/16\"]}}}}"
                ),
            ));
        };
        let decoded: PolicyList<P> =
            hcn::decode_value(json!({ "Policies": [value] })).map_err(|e| {
                let inner = e.path.strip_prefix("Policies[0]").unwrap_or(&e.path);
                let inner = inner.strip_prefix('.').unwrap_or(inner);
                let at = if inner.is_empty() {
                    entry.field("value")
                } else {
                    format!("{}.{inner}", entry.field("value"))
                };
                CniError::config(&at, &e.message)
            })?;
        out.extend(decoded.policies);
    }
    Ok(out)
}

/// The endpoint policies of `key` (`policies` or `AdditionalArgs`).
pub fn endpoint_policies(root: &Obj<'_>, key: &str) -> Result<Vec<EndpointPolicy>, CniError> {
    named_policies(root, key, "EndpointPolicy")
}

/// The network policies of `key` (sdn* create networks with them).
pub fn network_policies(root: &Obj<'_>, key: &str) -> Result<Vec<NetworkPolicy>, CniError> {
    named_policies(root, key, "NetworkPolicy")
}

/// `ApplyOutboundNatPolicy`: SNAT everything but `cidr`, unless an OutBoundNAT policy already
/// excepts it. A new policy is appended; existing lists are not merged (as upstream).
pub fn apply_outbound_nat(policies: &mut Vec<EndpointPolicy>, cidr: &str) {
    if cidr.is_empty() {
        return;
    }
    let present = policies.iter().any(|p| match p {
        EndpointPolicy::OutBoundNat(s) => s.exceptions.iter().any(|e| e == cidr),
        _ => false,
    });
    if !present {
        policies.push(EndpointPolicy::OutBoundNat(OutboundNatPolicySetting {
            exceptions: vec![cidr.to_string()],
            ..OutboundNatPolicySetting::default()
        }));
    }
}

/// `ApplyDefaultPAPolicy`: the network's provider address, unless a policy already gives that
/// same address. A config's PA for another address does not stop it: upstream appends a second
/// policy (pkg/hns `netconf_windows_test.go`, ApplyDefaultPAPolicy "append different IP").
pub fn apply_provider_address(policies: &mut Vec<EndpointPolicy>, pa: Option<IpAddr>) {
    let Some(pa) = pa else { return };
    if policies
        .iter()
        .any(|p| matches!(p, EndpointPolicy::ProviderAddress(s) if s.provider_address == pa))
    {
        return;
    }
    policies.push(EndpointPolicy::ProviderAddress(
        ProviderAddressPolicySetting {
            provider_address: pa,
        },
    ));
}

/// `ApplyLoopbackDSRPolicy`: the pod reaches itself through a Service VIP (DSR).
pub fn apply_loopback_dsr(policies: &mut Vec<EndpointPolicy>, ip: IpAddr) {
    let ip = ip.to_string();
    let present = policies.iter().any(|p| match p {
        EndpointPolicy::OutBoundNat(s) => s.destinations.contains(&ip),
        _ => false,
    });
    if !present {
        policies.push(EndpointPolicy::OutBoundNat(OutboundNatPolicySetting {
            destinations: vec![ip],
            ..OutboundNatPolicySetting::default()
        }));
    }
}

/// One entry of `runtimeConfig.portMappings`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    /// IP protocol number.
    pub protocol: u32,
    pub host_ip: Option<IpAddr>,
}

impl PortMapping {
    /// The HNS policy: `PortMapping` with the host IP as VIP.
    pub fn policy(&self, flags: u32) -> EndpointPolicy {
        EndpointPolicy::PortMapping(PortMappingPolicySetting {
            protocol: self.protocol,
            internal_port: self.container_port,
            external_port: self.host_port,
            vip: self.host_ip,
            flags,
        })
    }
}

/// What a port mapping whose protocol HNS has no number for (e.g. containerd's `sctp`) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownProtocol {
    /// Refused naming the field: windows-container-networking `GetPortEnumValue` fails the ADD.
    Refuse,
    /// Left out, the other mappings kept: pkg/hns `ApplyPortMappingPolicy` skips it ("skip the
    /// invalid protocol mapping"), so the pod still starts.
    Skip,
}

/// `runtimeConfig.portMappings`, as the runtime injects it for the `portMappings` capability.
pub fn port_mappings(
    runtime: Option<&Obj<'_>>,
    unknown: UnknownProtocol,
) -> Result<Vec<PortMapping>, CniError> {
    let Some(rc) = runtime else {
        return Ok(Vec::new());
    };
    let skipped = |m: &Obj<'_>| {
        unknown == UnknownProtocol::Skip
            && matches!(m.get("protocol"), Some(Value::String(s)) if !s.is_empty() && Protocol::parse(s).is_none())
    };
    rc.objects("portMappings")?
        .into_iter()
        .filter(|m| !skipped(m))
        .map(|m| {
            let port = |k: &str| -> Result<u16, CniError> {
                match m.uint(k)? {
                    Some(p @ 1..=65535) => Ok(p as u16),
                    Some(p) => Err(CniError::config(&m.field(k), format!("{p} is not a port (1-65535)"))),
                    None => Err(CniError::config(&m.field(k), "missing; give the port number")),
                }
            };
            let protocol = match m.get("protocol") {
                None => Protocol::TCP,
                Some(Value::Number(n)) => n
                    .as_u64()
                    .filter(|n| *n <= 255)
                    .map(|n| n as u32)
                    .ok_or_else(|| CniError::config(&m.field("protocol"), format!("{n} is not an IP protocol number")))?,
                Some(Value::String(s)) if s.is_empty() => Protocol::TCP,
                Some(Value::String(s)) => Protocol::parse(s).ok_or_else(|| {
                    CniError::config(&m.field("protocol"), format!("\"{s}\" is not a protocol; use tcp, udp, icmpv4, igmp, icmpv6 or a number"))
                })?,
                Some(_) => return Err(CniError::decode(&m.field("protocol"), "must be a string or a number")),
            };
            Ok(PortMapping {
                host_port: port("hostPort")?,
                container_port: port("containerPort")?,
                protocol,
                host_ip: m.parse("hostIP")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_object;

    fn policies(doc: &str) -> Result<Vec<EndpointPolicy>, CniError> {
        let map = parse_object(doc.as_bytes()).unwrap();
        endpoint_policies(&Obj::root(&map), "policies")
    }

    #[test]
    fn v1_and_v2_shapes_decode_to_the_same_policies() {
        let v1 = policies(r#"{"Policies":[
            {"Name":"EndpointPolicy","Value":{"Type":"OutBoundNAT","ExceptionList":["10.244.0.0/16","10.96.0.0/12"]}},
            {"Name":"EndpointPolicy","Value":{"Type":"ROUTE","DestinationPrefix":"10.96.0.0/12","NeedEncap":true}},
            {"Name":"EndpointPolicy","Value":{"Type":"PA","PA":"10.0.0.5"}}]}"#)
        .unwrap();
        let v2 = policies(r#"{"policies":[
            {"name":"EndpointPolicy","value":{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/16","10.96.0.0/12"]}}},
            {"name":"EndpointPolicy","value":{"Type":"SDNRoute","Settings":{"DestinationPrefix":"10.96.0.0/12","NeedEncap":true}}},
            {"name":"EndpointPolicy","value":{"Type":"ProviderAddress","Settings":{"ProviderAddress":"10.0.0.5"}}}]}"#)
        .unwrap();
        assert_eq!(v1, v2);
        assert_eq!(v1.len(), 3);
    }

    #[test]
    fn entries_not_named_endpoint_policy_are_ignored() {
        let p = policies(r#"{"policies":[{"name":"NetworkPolicy","value":{"Type":"Bogus"}},{"name":"endpointpolicy","value":{"Type":"OutBoundNAT"}}]}"#).unwrap();
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn a_bad_policy_names_its_path() {
        let e = policies(r#"{"policies":[{"name":"EndpointPolicy","value":{"Type":"OutBoundNAT"}},{"name":"EndpointPolicy","value":{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/33"]}}}]}"#)
            .unwrap_err();
        assert_eq!(e.code, crate::error::Code::INVALID_NETWORK_CONFIG);
        assert!(
            e.msg.starts_with("policies[1].value.Settings.Exceptions"),
            "{}",
            e.msg
        );
        let e = policies(r#"{"policies":[{"name":"EndpointPolicy","value":{"Type":"Bogus"}}]}"#)
            .unwrap_err();
        assert!(e.msg.starts_with("policies[0].value"), "{}", e.msg);
    }

    #[test]
    fn generated_policies_are_not_duplicated() {
        let mut p = Vec::new();
        apply_outbound_nat(&mut p, "10.244.0.0/16");
        apply_outbound_nat(&mut p, "10.244.0.0/16");
        apply_outbound_nat(&mut p, "");
        assert_eq!(p.len(), 1);
        apply_loopback_dsr(&mut p, "10.244.1.5".parse().unwrap());
        apply_loopback_dsr(&mut p, "10.244.1.5".parse().unwrap());
        assert_eq!(p.len(), 2);
        apply_provider_address(&mut p, Some("10.0.0.1".parse().unwrap()));
        apply_provider_address(&mut p, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(p.len(), 3);
        // Another address is a second policy, as upstream (it used to be refused here).
        apply_provider_address(&mut p, Some("10.0.0.2".parse().unwrap()));
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn port_mappings_take_names_and_numbers() {
        let map = parse_object(
            br#"{"runtimeConfig":{"portMappings":[
            {"hostPort":8080,"containerPort":80,"protocol":"TCP"},
            {"hostPort":53,"containerPort":53,"protocol":17,"hostIP":"10.0.0.4"}]}}"#,
        )
        .unwrap();
        let root = Obj::root(&map);
        let rc = root.obj("runtimeConfig").unwrap();
        let m = port_mappings(rc.as_ref(), UnknownProtocol::Refuse).unwrap();
        assert_eq!(m[0].protocol, 6);
        assert_eq!(m[1].host_ip, Some("10.0.0.4".parse().unwrap()));
        let map = parse_object(
            br#"{"runtimeConfig":{"portMappings":[{"hostPort":0,"containerPort":80}]}}"#,
        )
        .unwrap();
        let root = Obj::root(&map);
        let e = port_mappings(
            root.obj("runtimeConfig").unwrap().as_ref(),
            UnknownProtocol::Refuse,
        )
        .unwrap_err();
        assert!(
            e.msg.starts_with("runtimeConfig.portMappings[0].hostPort"),
            "{}",
            e.msg
        );
    }
}
