//! microsoft/windows-container-networking (at `b96345f`): its plugin tests
//! (`plugins/{sdnbridge,sdnoverlay,nat}/*_windows_test.go`) run containers on a Windows host, so
//! what carries over is its example configs (`example/*.conf`) and the code they exercise:
//! `cni/cni.go` `GetEndpointInfo` and `network/policy.go` `GetPortEnumValue`, stated through
//! winnet's sdn* config (`cni::plugins::sdn::Sdn`).

// Test names are `<upstream test or function>__<case>`, as the issue asks.
#![allow(non_snake_case)]

use cni::config::NetConf;
use cni::plugins::sdn::Sdn;
use hcn::{EndpointPolicy, NetworkType};
use serde_json::{Value, json};

fn sdn(doc: Value) -> Result<Sdn, cni::CniError> {
    Sdn::parse(&NetConf::parse(doc.to_string().as_bytes())?)
}

fn wire(policies: &[EndpointPolicy]) -> Vec<Value> {
    policies
        .iter()
        .map(|p| serde_json::to_value(p).unwrap())
        .collect()
}

/// `example/l2bridge.conf`, as shipped (the three AdditionalArgs policies, `type: l2bridge`).
fn l2bridge_example() -> Value {
    json!({
        "cniVersion": "0.2.0", "name": "l2bridgeNetwork", "type": "l2bridge", "master": "Ethernet",
        "capabilities": {"portMappings": true, "dnsCapabilities": true},
        "optionalFlags": {"loopbackDSR": false},
        "ipam": {"subnet": "192.168.1.0/24", "routes": [{"GW": "192.168.1.2"}]},
        "dns": {"Nameservers": ["11.0.0.10"], "Search": ["svc.cluster.local"]},
        "AdditionalArgs": [
            {"Name": "EndpointPolicy", "Value": {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.0.0/16", "11.0.0.0/8", "10.124.24.0/23"]}}},
            {"Name": "EndpointPolicy", "Value": {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "11.0.0.0/8", "NeedEncap": true}}},
            {"Name": "EndpointPolicy", "Value": {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.124.24.196/32", "NeedEncap": true}}}
        ]
    })
}

// example/l2bridge.conf: an L2Bridge network, gateway from `ipam.routes[0].GW`, the
// AdditionalArgs passed to HNS in order and unchanged.
#[test]
fn example_l2bridge_conf__policies_pass_through_in_order() {
    let s = sdn(l2bridge_example()).unwrap();
    assert_eq!(s.network_type, NetworkType::L2Bridge);
    assert_eq!(s.subnet, Some("192.168.1.0/24".parse().unwrap()));
    assert_eq!(
        s.ipam_routes,
        [(None, Some("192.168.1.2".parse().unwrap()))]
    );
    assert_eq!(
        wire(&s.endpoint_policies),
        [
            json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.0.0/16", "11.0.0.0/8", "10.124.24.0/23"]}}),
            json!({"Type": "SDNRoute", "Settings": {"DestinationPrefix": "11.0.0.0/8", "NeedEncap": true}}),
            json!({"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.124.24.196/32", "NeedEncap": true}}),
        ]
    );
    assert_eq!(s.dns.server_list, ["11.0.0.10"]);
}

fn with_mappings(flags: Value, mappings: Value) -> Sdn {
    let mut doc = l2bridge_example();
    doc["optionalFlags"] = flags;
    doc["runtimeConfig"] = json!({"portMappings": mappings});
    sdn(doc).unwrap()
}

// cni.go GetEndpointInfo (no upstream unit test; the code is unambiguous): one PortMapping per
// mapping, `LocalRoutedVip` (1) with localRoutedPortMapping, the host IP as VIP.
#[test]
fn get_endpoint_info__port_mapping_with_local_routed_vip__code() {
    let s = with_mappings(
        json!({"localRoutedPortMapping": true}),
        json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "10.0.0.4"}]),
    );
    assert_eq!(
        wire(&s.port_mapping_policies()),
        [
            json!({"Type": "PortMapping", "Settings": {"Protocol": 6, "InternalPort": 80, "ExternalPort": 8080, "VIP": "10.0.0.4", "Flags": 1}})
        ]
    );
}

// cni.go GetEndpointInfo with enableDualStack: each mapping also gets an IPv6 PortMapping
// (flags | NatFlagsIPv6 = 2) without the host IP. (winnet made only the IPv4 one; fixed.)
#[test]
fn get_endpoint_info__dual_stack_adds_an_ipv6_port_mapping__code() {
    let s = with_mappings(
        json!({"enableDualStack": true}),
        json!([{"hostPort": 8080, "containerPort": 80, "protocol": "udp", "hostIP": "10.0.0.4"}]),
    );
    assert_eq!(
        wire(&s.port_mapping_policies()),
        [
            json!({"Type": "PortMapping", "Settings": {"Protocol": 17, "InternalPort": 80, "ExternalPort": 8080, "VIP": "10.0.0.4"}}),
            json!({"Type": "PortMapping", "Settings": {"Protocol": 17, "InternalPort": 80, "ExternalPort": 8080, "Flags": 2}}),
        ]
    );
}

// cni.go GetEndpointInfo + getInACLRule with allowAclPortMapping: after each mapping, an
// inbound allow ACL for the container port and protocol at priority 1000 (`aclPriority`).
// (winnet used priority 200; fixed.)
#[test]
fn get_endpoint_info__allow_acl_port_mapping__code() {
    let s = with_mappings(
        json!({"allowAclPortMapping": true}),
        json!([{"hostPort": 8080, "containerPort": 80, "protocol": "TCP"}]),
    );
    let p = wire(&s.port_mapping_policies());
    assert_eq!(p.len(), 2);
    assert_eq!(p[0]["Type"], "PortMapping");
    assert_eq!(p[1]["Type"], "ACL");
    let acl = &p[1]["Settings"];
    assert_eq!(acl["Protocols"], "6");
    assert_eq!(acl["Action"], "Allow");
    assert_eq!(acl["Direction"], "In");
    assert_eq!(acl["LocalPorts"], "80");
    assert_eq!(acl["Priority"], 1000);
}

// network/policy.go GetPortEnumValue: names tcp/udp/icmpv4/icmpv6/igmp (any case) and numbers;
// anything else fails the ADD (unlike pkg/hns, which skips it).
#[test]
fn get_port_enum_value__names_numbers_and_refusal__code() {
    for (name, number) in [
        ("TCP", 6),
        ("udp", 17),
        ("icmpv4", 1),
        ("ICMPv6", 58),
        ("igmp", 2),
        ("6", 6),
    ] {
        let s = with_mappings(
            json!({}),
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": name}]),
        );
        assert_eq!(s.port_mappings[0].protocol, number, "{name}");
    }
    let mut doc = l2bridge_example();
    doc["runtimeConfig"] =
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "sctp"}]});
    let e = sdn(doc).unwrap_err();
    assert!(
        e.msg.starts_with("runtimeConfig.portMappings[0].protocol"),
        "{}",
        e.msg
    );
}

/// test/utilities/connectivity_testing.go `CreateDualStackNetworkConf`: enableDualStack with
/// the gateways from `additionalRoutes` (0.0.0.0/0 and ::/0), here with host-local's two
/// ranges as IPAM; the network of `GetDefaultIpams` + `GetDefaultIpv6Ipams`.
fn dual_stack_conf() -> Sdn {
    sdn(json!({
        "cniVersion": "1.0.0", "name": "wnt-sdnds", "type": "sdnbridge",
        "optionalFlags": {"enableDualStack": true, "gatewayFromAdditionalRoutes": true},
        "additionalRoutes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}, {"dst": "::/0", "gw": "fd00::1"}],
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.0.0.0/16"}], [{"subnet": "fd00::/64"}]]}
    }))
    .unwrap()
}

fn dual_stack_network() -> hcn::Network {
    serde_json::from_value(json!({
        "Name": "wnt-sdnds", "Type": "L2Bridge",
        "Ipams": [{"Subnets": [
            {"IpAddressPrefix": "10.0.0.0/16", "Routes": [{"NextHop": "10.0.0.1", "DestinationPrefix": "0.0.0.0/0"}]},
            {"IpAddressPrefix": "fd00::/64", "Routes": [{"NextHop": "fd00::1", "DestinationPrefix": "::/0"}]}
        ]}]
    }))
    .unwrap()
}

/// host-local's answer for two ranges (IPv6 first, to show the order is the family's).
fn host_local_dual_stack() -> Vec<cni::result::IpConfig> {
    cni::CniResult::parse(&json!({"cniVersion": "1.0.0", "ips": [
        {"address": "fd00::5/64", "gateway": "fd00::1"},
        {"address": "10.0.0.5/16", "gateway": "10.0.0.1"}
    ]}))
    .unwrap()
    .ips
}

// common/core/network.go allocateIpam (dual stack: IPAM's IP4 and IP6) + network/endpoint.go
// GetHostComputeEndpoint: one IpConfiguration per family, IPv4 first, and a default route per
// family via that family's gateway (0.0.0.0/0 via Gateway, ::/0 via Gateway6).
// (winnet gave the endpoint only the first address; fixed.)
#[test]
fn allocate_ipam__dual_stack_endpoint_has_both_addresses_and_routes__code() {
    let s = dual_stack_conf();
    let doc = s.endpoint_doc(
        &dual_stack_network(),
        "c1_wnt-sdnds",
        &host_local_dual_stack(),
        None,
    );
    let doc = serde_json::to_value(&doc).unwrap();
    assert_eq!(
        doc["IpConfigurations"],
        json!([
            {"IpAddress": "10.0.0.5", "PrefixLength": 16},
            {"IpAddress": "fd00::5", "PrefixLength": 64}
        ])
    );
    // Exactly these two: `additionalRoutes` only pick the gateways (cni/network.go
    // `addEndpointGatewaysFromConfig`); they are not endpoint routes of their own.
    assert_eq!(
        doc["Routes"],
        json!([
            {"NextHop": "10.0.0.1", "DestinationPrefix": "0.0.0.0/0"},
            {"NextHop": "fd00::1", "DestinationPrefix": "::/0"}
        ])
    );
}

// allocateIpam without enableDualStack reads IPAM's result as 0.2.0 `ip4`: the endpoint gets
// the IPv4 address only, whatever else IPAM returned.
#[test]
fn allocate_ipam__without_dual_stack_only_ipv4__code() {
    let mut s = dual_stack_conf();
    s.flags.enable_dual_stack = false;
    let doc = s.endpoint_doc(&dual_stack_network(), "c1", &host_local_dual_stack(), None);
    let doc = serde_json::to_value(&doc).unwrap();
    assert_eq!(
        doc["IpConfigurations"],
        json!([{"IpAddress": "10.0.0.5", "PrefixLength": 16}])
    );
    assert_eq!(
        doc["Routes"][0],
        json!({"NextHop": "10.0.0.1", "DestinationPrefix": "0.0.0.0/0"})
    );
}

// common/core/network.go `allocateIpam`: the endpoint's gateway is the one IPAM returned
// (`endpointInfo.Gateway = resultImpl.IP4.Gateway`), which overwrites the gateway
// `GetNetworkInfo` took from `ipam.routes[0].gw`. (winnet preferred `ipam.routes`; fixed.)
#[test]
fn allocate_ipam__the_ipam_gateway_wins_over_ipam_routes__code() {
    let s = sdn(json!({
        "cniVersion": "1.0.0", "name": "wnt-sdngw", "type": "sdnbridge",
        "ipam": {"type": "host-local", "subnet": "10.0.0.0/16",
                 "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.254"}]}
    }))
    .unwrap();
    let ips = cni::CniResult::parse(&json!({"cniVersion": "1.0.0", "ips": [
        {"address": "10.0.0.5/16", "gateway": "10.0.0.1"}
    ]}))
    .unwrap()
    .ips;
    let doc = s.endpoint_doc(&dual_stack_network(), "c1_wnt-sdngw", &ips, None);
    let doc = serde_json::to_value(&doc).unwrap();
    assert_eq!(
        doc["Routes"],
        json!([{"NextHop": "10.0.0.1", "DestinationPrefix": "0.0.0.0/0"}])
    );
}
