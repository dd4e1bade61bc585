//! HNS v1 network and endpoint documents (hcsshim `internal/hns` `HNSNetwork`, `HNSEndpoint`:
//! what Calico's felix, dockershim-era CNI plugins and the SDN PowerShell module send) in v2
//! terms, as HNS takes both: a network's `Subnets` (`AddressPrefix`, `GatewayAddress`) become a
//! static IPAM with a default route through the gateway, `MacPools` the `MacPool`,
//! `NetworkAdapterName` a `NetAdapterName` policy; an endpoint's `VirtualNetwork` is its
//! network, `IPAddress` / `IPv6Address` with their prefix lengths its IP configurations,
//! `GatewayAddress` its default route, `IsRemoteEndpoint` the remote flag; `DNSSuffix` and
//! `DNSServerList` either's DNS. Keys have already been folded to their canonical spelling
//! where the schema has one; the v1-only ones are matched here in any case.

use serde_json::{Map, Value, json};

/// Rewrites a v1 document (a JSON object) to its v2 form; a v2 document is left as it is.
pub(crate) fn to_v2(value: &mut Value) {
    let Value::Object(map) = value else {
        return;
    };
    if let Some(subnets) = take(map, "Subnets") {
        network_subnets(map, subnets);
    }
    if let Some(Value::Array(pools)) = take(map, "MacPools") {
        map.entry("MacPool")
            .or_insert_with(|| json!({ "Ranges": pools }));
    }
    if let Some(Value::String(nic)) = take(map, "NetworkAdapterName") {
        push_policy(
            map,
            json!({"Type": "NetAdapterName", "Settings": {"NetworkAdapterName": nic}}),
        );
    }
    if let Some(net) = take(map, "VirtualNetwork") {
        map.entry("HostComputeNetwork").or_insert(net);
    }
    endpoint_addresses(map);
    if let Some(Value::Bool(true)) = take(map, "IsRemoteEndpoint") {
        let flags = map.get("Flags").and_then(Value::as_u64).unwrap_or(0);
        map.insert("Flags".into(), json!(flags | 1));
    }
    dns(map);
}

/// Removes `key` (in any case) and returns its value.
fn take(map: &mut Map<String, Value>, key: &str) -> Option<Value> {
    let k = map.keys().find(|k| k.eq_ignore_ascii_case(key))?.clone();
    map.remove(&k)
}

fn push_policy(map: &mut Map<String, Value>, policy: Value) {
    if let Value::Array(list) = map.entry("Policies").or_insert_with(|| json!([])) {
        list.push(policy);
    }
}

/// The default route's destination for the family of `gateway`.
fn default_route(gateway: &str) -> &'static str {
    if gateway.contains(':') {
        "::/0"
    } else {
        "0.0.0.0/0"
    }
}

fn network_subnets(map: &mut Map<String, Value>, subnets: Value) {
    let Value::Array(subnets) = subnets else {
        // Not v1's list: left for the decoder to name.
        map.insert("Subnets".into(), subnets);
        return;
    };
    let v2: Vec<Value> = subnets
        .into_iter()
        .map(|s| {
            let Value::Object(mut s) = s else { return s };
            let mut out = Map::new();
            if let Some(prefix) = take(&mut s, "AddressPrefix") {
                out.insert("IpAddressPrefix".into(), prefix);
            }
            if let Some(Value::String(gw)) = take(&mut s, "GatewayAddress") {
                let dest = default_route(&gw);
                out.insert(
                    "Routes".into(),
                    json!([{"NextHop": gw, "DestinationPrefix": dest}]),
                );
            }
            if let Some(p) = take(&mut s, "Policies") {
                out.insert("Policies".into(), p);
            }
            Value::Object(out)
        })
        .collect();
    if !map.contains_key("Ipams") {
        map.insert("Ipams".into(), json!([{"Type": "Static", "Subnets": v2}]));
    }
}

fn endpoint_addresses(map: &mut Map<String, Value>) {
    let mut configs = Vec::new();
    for (addr, len) in [
        ("IpAddress", "PrefixLength"),
        ("IPv6Address", "IPv6PrefixLength"),
    ] {
        let length = take(map, len);
        if let Some(ip) = take(map, addr).filter(|ip| ip.as_str().is_some_and(|s| !s.is_empty())) {
            let mut c = json!({ "IpAddress": ip });
            if let Some(l) = length {
                c["PrefixLength"] = l;
            }
            configs.push(c);
        }
    }
    if !configs.is_empty() && !map.contains_key("IpConfigurations") {
        map.insert("IpConfigurations".into(), Value::Array(configs));
    }
    let mut routes = Vec::new();
    for key in ["GatewayAddress", "GatewayAddressV6"] {
        if let Some(Value::String(gw)) =
            take(map, key).filter(|g| g.as_str().is_some_and(|s| !s.is_empty()))
        {
            let dest = default_route(&gw);
            routes.push(json!({"NextHop": gw, "DestinationPrefix": dest}));
        }
    }
    if !routes.is_empty() && !map.contains_key("Routes") {
        map.insert("Routes".into(), Value::Array(routes));
    }
}

fn dns(map: &mut Map<String, Value>) {
    let suffix = take(map, "DNSSuffix");
    let servers = take(map, "DNSServerList");
    if suffix.is_none() && servers.is_none() || map.contains_key("Dns") {
        return;
    }
    let mut d = Map::new();
    if let Some(Value::String(s)) = suffix {
        d.insert("Domain".into(), Value::String(s));
    }
    if let Some(Value::String(list)) = servers {
        let list: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        d.insert("ServerList".into(), json!(list));
    }
    map.insert("Dns".into(), Value::Object(d));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_network_is_its_v2_self() {
        let mut v = json!({"Name": "cbr0", "Type": "L2Bridge", "NetworkAdapterName": "Ethernet",
            "Subnets": [{"AddressPrefix": "10.244.1.0/24", "GatewayAddress": "10.244.1.1"}],
            "MacPools": [{"StartMacAddress": "00-15-5D-52-C0-00", "EndMacAddress": "00-15-5D-52-CF-FF"}]});
        to_v2(&mut v);
        assert_eq!(
            v,
            json!({"Name": "cbr0", "Type": "L2Bridge",
            "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": "10.244.1.0/24",
                "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}]}]}],
            "MacPool": {"Ranges": [{"StartMacAddress": "00-15-5D-52-C0-00", "EndMacAddress": "00-15-5D-52-CF-FF"}]},
            "Policies": [{"Type": "NetAdapterName", "Settings": {"NetworkAdapterName": "Ethernet"}}]})
        );
    }

    #[test]
    fn a_v1_endpoint_is_its_v2_self() {
        let mut v = json!({"Name": "ep", "VirtualNetwork": "N", "IpAddress": "10.244.1.7",
            "PrefixLength": 24, "GatewayAddress": "10.244.1.1", "IsRemoteEndpoint": true,
            "DNSServerList": "10.96.0.10, 10.96.0.11", "DNSSuffix": "svc.cluster.local"});
        to_v2(&mut v);
        assert_eq!(
            v,
            json!({"Name": "ep", "HostComputeNetwork": "N",
            "IpConfigurations": [{"IpAddress": "10.244.1.7", "PrefixLength": 24}],
            "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}], "Flags": 1,
            "Dns": {"Domain": "svc.cluster.local", "ServerList": ["10.96.0.10", "10.96.0.11"]}})
        );
    }
}
