//! Input normalisation: HNS matches keys case-insensitively and accepts the v1 spellings that
//! real CNI configs still carry. Everything is rewritten to hcsshim's canonical v2 form before
//! typed decoding, so the typed model only ever sees one spelling.

use serde_json::{Map, Value};

/// Every key of the HCN schema, in its canonical spelling. Input keys are matched against these
/// case-insensitively. `Id` (set policies, tier ACL rules) folds to `ID`; those structs alias it.
const KEYS: &[&str] = &[
    // objects
    "ID",
    "Name",
    "Type",
    "Policies",
    "Settings",
    "Flags",
    "SchemaVersion",
    "Major",
    "Minor",
    "Health",
    "Data",
    "Extra",
    "Resources",
    "SharedContainers",
    "LayeredOn",
    "SwitchGuid",
    "UtilityVM",
    "VirtualMachine",
    "MacPool",
    "Ranges",
    "StartMacAddress",
    "EndMacAddress",
    "Dns",
    "Domain",
    "Search",
    "ServerList",
    "Options",
    "Ipams",
    "Subnets",
    "IpAddressPrefix",
    "Routes",
    "NextHop",
    "DestinationPrefix",
    "Metric",
    "HostComputeNetwork",
    "HostComputeNamespace",
    "IpConfigurations",
    "IpAddress",
    "PrefixLength",
    "MacAddress",
    "NamespaceId",
    "NamespaceGuid",
    "Owner",
    "HostComputeEndpoints",
    "SourceVIP",
    "FrontendVIPs",
    "PortMappings",
    "Protocol",
    "InternalPort",
    "ExternalPort",
    "DistributionType",
    "Setting",
    "NeedEncap",
    // policy settings
    "VIP",
    "Protocols",
    "Action",
    "Direction",
    "LocalAddresses",
    "RemoteAddresses",
    "LocalPorts",
    "RemotePorts",
    "RuleType",
    "Priority",
    "LocalPort",
    "RemotePort",
    "ServiceName",
    "Scope",
    "MaximumOutgoingBandwidthInBytes",
    "VirtualIP",
    "Exceptions",
    "Destinations",
    "MaxPortPoolUsage",
    "IP",
    "Port",
    "Destination",
    "OutboundNAT",
    "InboundProxyPort",
    "OutboundProxyPort",
    "FilterTuple",
    "UserSID",
    "InboundExceptions",
    "OutboundExceptions",
    "IpAddressExceptions",
    "PortExceptions",
    "Overhead",
    "IovOffloadWeight",
    "QueuePairsRequested",
    "InterruptModeration",
    "ProviderAddress",
    "InterfaceGuid",
    "InterfaceLuid",
    "InterfaceIndex",
    "InterfaceMediaType",
    "InterfaceAlias",
    "InterfaceDescription",
    "Order",
    "TierAclRules",
    "TierAclRuleAction",
    "SourceMacAddress",
    "NetworkAdapterName",
    "ExtensionID",
    "Enable",
    "Address",
    "IsolationId",
    "DistributedRouterMacAddress",
    "PolicyType",
    "Values",
    "LayerId",
    "TargetIpPrefix",
    "SenderIpAddress",
    "SenderMacAddress",
    "AutomaticEndpointMonitor",
    // modify requests, queries, errors
    "ResourceType",
    "RequestType",
    "EndpointId",
    "PortId",
    "VirtualNicName",
    "VirtualMachineId",
    "Filter",
    "VirtualNetwork",
    "Success",
    "Error",
    "ErrorCode",
    // v1 spellings, renamed per policy type below
    "ExceptionList",
    "PA",
    "VSID",
    "VLAN",
    "IsDSR",
    "ILB",
    "VIPs",
    // winnet extensions
    "LinuxNetns",
    "LinuxInterfaceName",
    "LinuxAclGeneration",
    "LinuxService",
];

/// The canonical spelling of `key`, or `key` itself when it is not part of the schema.
fn canonical_key(key: &str) -> &str {
    KEYS.iter()
        .copied()
        .find(|k| k.eq_ignore_ascii_case(key))
        .unwrap_or(key)
}

/// Every policy `Type` HNS knows (endpoint, network and subnet policies), canonically spelled.
const POLICY_TYPES: &[&str] = &[
    "PortMapping",
    "ACL",
    "QOS",
    "L2Driver",
    "OutBoundNAT",
    "SDNRoute",
    "L4Proxy",
    "L4WFPPROXY",
    "PortName",
    "EncapOverhead",
    "Iov",
    "ProviderAddress",
    "InterfaceConstraint",
    "TierAcl",
    "SourceMacAddress",
    "NetAdapterName",
    "VSwitchExtension",
    "DrMacAddress",
    "AutomaticDNS",
    "RemoteSubnetRoute",
    "VxlanPort",
    "HostRoute",
    "SetPolicy",
    "LayerConstraint",
    "NetworkACL",
    "NeighborDiscovery",
    "VLAN",
    "VSID",
];

/// v1 policy type names and the v2 type they became.
const V1_POLICY_TYPES: &[(&str, &str)] = &[
    ("ROUTE", "SDNRoute"),
    ("PA", "ProviderAddress"),
    ("NAT", "PortMapping"),
];

/// v1 settings keys renamed in v2, per policy type.
const V1_SETTING_KEYS: &[(&str, &str, &str)] = &[
    ("OutBoundNAT", "ExceptionList", "Exceptions"),
    ("OutBoundNAT", "VIP", "VirtualIP"),
    ("ProviderAddress", "PA", "ProviderAddress"),
    ("VSID", "VSID", "IsolationId"),
    ("VLAN", "VLAN", "IsolationId"),
];

/// Rewrites every object key to its canonical spelling, and every policy (an element of a
/// `Policies` array) to the v2 `{Type, Settings}` shape with a canonical `Type`.
pub fn normalise(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(normalise_object(map)),
        Value::Array(items) => Value::Array(items.into_iter().map(normalise).collect()),
        other => other,
    }
}

fn normalise_object(map: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        let key = canonical_key(&key).to_string();
        let value = match (key.as_str(), value) {
            ("Policies", Value::Array(items)) => {
                Value::Array(items.into_iter().map(normalise_policy).collect())
            }
            (_, value) => normalise(value),
        };
        out.insert(key, value);
    }
    out
}

/// One policy to `{Type, Settings}`: canonical type name; v1 flat policies (no `Settings`) have
/// their other keys moved into `Settings` with the v1 key names renamed.
fn normalise_policy(policy: Value) -> Value {
    let id_spelling = raw_id_key(&policy);
    let mut map = match normalise(policy) {
        Value::Object(map) => map,
        other => return other,
    };
    let ty = match map.get("Type") {
        Some(Value::String(t)) => canonical_policy_type(t),
        _ => None,
    };
    let Some(ty) = ty else {
        return Value::Object(map);
    };
    map.insert("Type".into(), Value::String(ty.to_string()));
    if !map.contains_key("Settings") {
        let mut settings = Map::new();
        let keys: Vec<String> = map.keys().filter(|k| *k != "Type").cloned().collect();
        for k in keys {
            if let Some(v) = map.remove(&k) {
                settings.insert(v1_setting_key(ty, &k).to_string(), v);
            }
        }
        if ty == "ACL" {
            v1_acl(&mut settings);
        }
        map.insert("Settings".into(), Value::Object(settings));
    }
    if ACL_TYPES.contains(&ty)
        && id_spelling.as_deref() != Some("ID")
        && let Some(Value::Object(settings)) = map.get_mut("Settings")
        && let Some(id) = settings.remove("ID")
    {
        settings.insert("Id".into(), id);
    }
    Value::Object(map)
}

/// The policy types whose rule name must be spelled `Id`.
const ACL_TYPES: [&str; 2] = ["ACL", "NetworkACL"];

/// How a policy spells its settings' ID key, as given (before keys fold to `ID`).
fn raw_id_key(policy: &Value) -> Option<String> {
    let map = policy.as_object()?;
    let holder = match map.iter().find(|(k, _)| k.eq_ignore_ascii_case("Settings")) {
        Some((_, Value::Object(settings))) => settings,
        Some(_) => return None,
        None => map,
    };
    holder
        .keys()
        .find(|k| k.eq_ignore_ascii_case("id"))
        .cloned()
}

/// Where an `ACL` or `NetworkACL` policy in `value` keeps its name under the key `ID`, which
/// HNS refuses (Azure NPM: "HNS is not happy with 'ID'"); `at` is the path so far.
pub(crate) fn acl_id_spelled_id(value: &Value, at: String) -> Option<String> {
    match value {
        Value::Object(map) => {
            let is_acl = matches!(map.get("Type"), Some(Value::String(t)) if ACL_TYPES.contains(&t.as_str()));
            if is_acl
                && let Some(Value::Object(settings)) = map.get("Settings")
                && settings.contains_key("ID")
            {
                return Some(format!("{at}Settings.ID"));
            }
            map.iter()
                .find_map(|(k, v)| acl_id_spelled_id(v, format!("{at}{k}.")))
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            let at = at.strip_suffix('.').unwrap_or(&at);
            acl_id_spelled_id(v, format!("{at}[{i}]."))
        }),
        _ => None,
    }
}

/// A v1 `ACL` (hcsshim `internal/hns` `ACLPolicy`, what Calico's felix sends) in v2 terms:
/// the number `Protocol` (256 any) becomes `Protocols`, the single `LocalPort` / `RemotePort`
/// (0 none) the lists; the v1 fields v2 has no use for when empty (`InternalPort` 0,
/// `ServiceName` "", the read-back `Scope`) are dropped.
fn v1_acl(settings: &mut Map<String, Value>) {
    if let Some(p) = settings.remove("Protocol")
        && !settings.contains_key("Protocols")
    {
        let text = match p {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s,
            other => other.to_string(),
        };
        settings.insert("Protocols".into(), Value::String(text));
    }
    for (one, list) in [("LocalPort", "LocalPorts"), ("RemotePort", "RemotePorts")] {
        let Some(port) = settings.remove(one) else {
            continue;
        };
        let empty = settings
            .get(list)
            .is_none_or(|v| v.as_str().is_some_and(|s| s.trim().is_empty()));
        if port.as_u64() != Some(0) && empty {
            let text = port
                .as_u64()
                .map_or_else(|| port.to_string(), |n| n.to_string());
            settings.insert(list.into(), Value::String(text));
        }
    }
    if settings.get("InternalPort").and_then(Value::as_u64) == Some(0) {
        settings.remove("InternalPort");
    }
    if settings.get("ServiceName").and_then(Value::as_str) == Some("") {
        settings.remove("ServiceName");
    }
    settings.remove("Scope");
}

fn canonical_policy_type(t: &str) -> Option<&'static str> {
    if let Some((_, v2)) = V1_POLICY_TYPES
        .iter()
        .find(|(v1, _)| v1.eq_ignore_ascii_case(t))
    {
        return Some(v2);
    }
    POLICY_TYPES
        .iter()
        .copied()
        .find(|p| p.eq_ignore_ascii_case(t))
}

fn v1_setting_key<'a>(ty: &str, key: &'a str) -> &'a str {
    V1_SETTING_KEYS
        .iter()
        .find(|(t, from, _)| *t == ty && *from == key)
        .map(|(_, _, to)| *to)
        .unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_fold_to_canonical_spelling() {
        let v = normalise(json!({"id": "x", "IPCONFIGURATIONS": [{"ipaddress": "10.0.0.1"}]}));
        assert_eq!(
            v,
            json!({"ID": "x", "IpConfigurations": [{"IpAddress": "10.0.0.1"}]})
        );
    }

    #[test]
    fn v1_policies_become_v2() {
        let v = normalise(json!({"Policies": [
            {"Type": "OutBoundNAT", "ExceptionList": ["10.244.0.0/16"]},
            {"type": "ROUTE", "DestinationPrefix": "10.96.0.0/12", "NeedEncap": true},
            {"Type": "PA", "PA": "10.0.0.5"},
            {"Type": "SDNROUTE", "Settings": {"destinationprefix": "10.0.0.0/8"}},
        ]}));
        assert_eq!(
            v,
            json!({"Policies": [
                {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16"]}},
                {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}},
                {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "10.0.0.5"}},
                {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.0.0.0/8"}},
            ]})
        );
    }

    #[test]
    fn unknown_policy_type_is_left_for_the_decoder_to_refuse() {
        let v = normalise(json!({"Policies": [{"Type": "Bogus"}]}));
        assert_eq!(v, json!({"Policies": [{"Type": "Bogus"}]}));
    }
}
