//! containernetworking/plugins `pkg/hns/netconf_windows_test.go` (at `3d27709f`), stated through
//! winnet's `cni::policy`: the policies win-bridge and win-overlay generate and read.
//!
//! Upstream builds each policy as JSON in the config's `apiVersion` spelling (v1 `HNSEndpoint`
//! or v2 `HostComputeEndpoint`). winnet sends every endpoint to hnsd's v2 API, so the byte-exact
//! checks here are on the v2 JSON (`{"Type":..,"Settings":..}`) the policy serializes to, and
//! the v1 cases assert that the v1 spelling upstream would send decodes to that same policy.

// Test names are `<upstream Describe>__<It>`, as the issue asks.
#![allow(non_snake_case)]

use std::net::IpAddr;

use cni::config::{Obj, parse_object};
use cni::policy::{
    PortMapping, UnknownProtocol, apply_loopback_dsr, apply_outbound_nat, apply_provider_address,
    endpoint_policies, port_mappings,
};
use hcn::EndpointPolicy;
use serde_json::{Value, json};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The policies as HNS receives them (v2 JSON).
fn wire(policies: &[EndpointPolicy]) -> Vec<Value> {
    policies
        .iter()
        .map(|p| serde_json::to_value(p).unwrap())
        .collect()
}

/// The `policies` of a config document, as win-* read them (`GetHostComputeEndpointPolicies`).
fn config_policies(doc: Value) -> Vec<EndpointPolicy> {
    let map = parse_object(doc.to_string().as_bytes()).unwrap();
    endpoint_policies(&Obj::root(&map), "policies").unwrap()
}

fn mappings(doc: Value, unknown: UnknownProtocol) -> Result<Vec<PortMapping>, cni::CniError> {
    let map = parse_object(json!({ "runtimeConfig": doc }).to_string().as_bytes()).unwrap();
    let root = Obj::root(&map);
    let rc = root.obj("runtimeConfig").unwrap();
    port_mappings(rc.as_ref(), unknown)
}

// Describe("ApplyLoopbackDSRPolicy") / Context("via v1 api" and "via v2 api") /
// It("filter out duplicated IP")
#[test]
fn apply_loopback_dsr_policy__filter_out_duplicated_ip() {
    let mut p = Vec::new();
    apply_loopback_dsr(&mut p, ip("172.16.0.12"));
    apply_loopback_dsr(&mut p, ip("172.16.0.12"));
    assert_eq!(
        wire(&p),
        [json!({"Type": "OutBoundNAT", "Settings": {"Destinations": ["172.16.0.12"]}})]
    );
    // v1: `{"Type": "OutBoundNAT", "Destinations": [..]}` is the same policy.
    let v1 = config_policies(json!({"policies": [{"name": "EndpointPolicy",
        "value": {"Type": "OutBoundNAT", "Destinations": ["172.16.0.12"]}}]}));
    assert_eq!(v1, p);
}

// Describe("ApplyLoopbackDSRPolicy") / It("append different IP"): a second policy, not a second
// destination in the first.
#[test]
fn apply_loopback_dsr_policy__append_different_ip() {
    let mut p = Vec::new();
    apply_loopback_dsr(&mut p, ip("172.16.0.12"));
    apply_loopback_dsr(&mut p, ip("172.16.0.13"));
    assert_eq!(
        wire(&p),
        [
            json!({"Type": "OutBoundNAT", "Settings": {"Destinations": ["172.16.0.12"]}}),
            json!({"Type": "OutBoundNAT", "Settings": {"Destinations": ["172.16.0.13"]}}),
        ]
    );
}

// Describe("ApplyOutBoundNATPolicy") / It("append different IP"): two policies, one exception each.
#[test]
fn apply_outbound_nat_policy__append_different_ip() {
    let mut p = Vec::new();
    apply_outbound_nat(&mut p, "192.168.0.0/16");
    apply_outbound_nat(&mut p, "10.244.0.0/16");
    assert_eq!(
        wire(&p),
        [
            json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.0.0/16"]}}),
            json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16"]}}),
        ]
    );
    // The same CIDR again (already excepted): nothing added (upstream code, "return if found").
    apply_outbound_nat(&mut p, "10.244.0.0/16");
    assert_eq!(p.len(), 2);
}

// Describe("ApplyOutBoundNATPolicy") / It("append a new one if there is not an exception
// OutBoundNAT policy"): a config's OutBoundNAT without exceptions is kept and a new one appended.
#[test]
fn apply_outbound_nat_policy__append_a_new_one_if_there_is_not_an_exception_outbound_nat_policy() {
    for value in [
        json!({"Type": "OutBoundNAT", "Settings": {"Destinations": ["10.0.0.9"]}}),
        json!({"Type": "OutBoundNAT", "Destinations": ["10.0.0.9"]}),
    ] {
        let mut p =
            config_policies(json!({"policies": [{"name": "EndpointPolicy", "value": value}]}));
        apply_outbound_nat(&mut p, "10.244.0.0/16");
        assert_eq!(
            wire(&p),
            [
                json!({"Type": "OutBoundNAT", "Settings": {"Destinations": ["10.0.0.9"]}}),
                json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16"]}}),
            ],
            "{value}"
        );
    }
}

// Describe("ApplyOutBoundNATPolicy") / It("nothing to do if CIDR is blank"): with v1
// `ExceptionList: []` and v2 `Settings.Exceptions: []`.
#[test]
fn apply_outbound_nat_policy__nothing_to_do_if_cidr_is_blank() {
    for value in [
        json!({"Type": "OutBoundNAT", "ExceptionList": []}),
        json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": []}}),
    ] {
        let mut p =
            config_policies(json!({"policies": [{"name": "EndpointPolicy", "value": value}]}));
        let before = p.clone();
        apply_outbound_nat(&mut p, "");
        assert_eq!(p, before, "{value}");
        assert_eq!(p.len(), 1);
    }
}

// Describe("ApplyDefaultPAPolicy") / It("append different IP"): a second PA for another address.
// (winnet kept the first and dropped the second; fixed in `cni::policy`.)
#[test]
fn apply_default_pa_policy__append_different_ip() {
    let mut p = Vec::new();
    apply_provider_address(&mut p, Some(ip("192.168.0.1")));
    apply_provider_address(&mut p, Some(ip("192.168.0.2")));
    assert_eq!(
        wire(&p),
        [
            json!({"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.0.1"}}),
            json!({"Type": "ProviderAddress", "Settings": {"ProviderAddress": "192.168.0.2"}}),
        ]
    );
    // The same address again: nothing added (upstream code, "return if found").
    apply_provider_address(&mut p, Some(ip("192.168.0.2")));
    assert_eq!(p.len(), 2);
    // A config's v1 `{"Type":"PA","PA":..}` is the same policy, so the network's PA is not doubled.
    let mut v1 = config_policies(json!({"policies": [{"name": "EndpointPolicy",
        "value": {"Type": "PA", "PA": "192.168.0.1"}}]}));
    apply_provider_address(&mut v1, Some(ip("192.168.0.1")));
    assert_eq!(v1, p[..1]);
}

// Describe("ApplyDefaultPAPolicy") / It("nothing to do if IP is blank"): no address (winnet:
// `None`, the network has no PA) adds nothing.
#[test]
fn apply_default_pa_policy__nothing_to_do_if_ip_is_blank() {
    let mut p = config_policies(json!({"policies": [{"name": "EndpointPolicy",
        "value": {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.0.0/16"]}}}]}));
    apply_provider_address(&mut p, None);
    assert_eq!(
        wire(&p),
        [json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.0.0/16"]}})]
    );
}

// Describe("ApplyPortMappingPolicy") / It("nothing to do if input is empty"): no runtimeConfig,
// no portMappings, and an empty list.
#[test]
fn apply_port_mapping_policy__nothing_to_do_if_input_is_empty() {
    assert_eq!(port_mappings(None, UnknownProtocol::Skip).unwrap(), []);
    assert_eq!(mappings(json!({}), UnknownProtocol::Skip).unwrap(), []);
    assert_eq!(
        mappings(json!({"portMappings": []}), UnknownProtocol::Skip).unwrap(),
        []
    );
}

// Describe("ApplyPortMappingPolicy") / Context("via v2 api") / It("creates one NAT policy"):
// byte-exact `{"Type":"PortMapping","Settings":{InternalPort, ExternalPort, Protocol: 6, VIP}}`
// (win-bridge's flags are 0, which HNS's JSON leaves out).
#[test]
fn apply_port_mapping_policy__creates_one_nat_policy() {
    let m = mappings(
        json!({"portMappings": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP", "hostIP": "192.168.1.2"}]}),
        UnknownProtocol::Skip,
    )
    .unwrap();
    let p: Vec<EndpointPolicy> = m.iter().map(|m| m.policy(0)).collect();
    assert_eq!(
        serde_json::to_string(&p[0]).unwrap(),
        r#"{"Type":"PortMapping","Settings":{"Protocol":6,"InternalPort":80,"ExternalPort":8080,"VIP":"192.168.1.2"}}"#
    );
    // Context("via v1 api"): `{"Type":"NAT","InternalPort":80,"ExternalPort":8080,"Protocol":"TCP"}`
    // is the same mapping without a VIP.
    let v1 = config_policies(json!({"policies": [{"name": "EndpointPolicy",
        "value": {"Type": "NAT", "InternalPort": 80, "ExternalPort": 8080, "Protocol": "TCP"}}]}));
    let without_vip = PortMapping {
        host_ip: None,
        ..m[0].clone()
    };
    assert_eq!(v1, [without_vip.policy(0)]);
}

// No upstream test; `ApplyPortMappingPolicy`'s code is unambiguous: a mapping whose protocol
// `GetProtocolEnum` does not know ("skip the invalid protocol mapping") is left out and the
// others kept, so a pod with an SCTP hostPort still starts on win-bridge. (winnet refused the
// whole ADD; fixed in `cni::policy` for win-*, sdn* keep refusing as windows-container-networking.)
#[test]
fn apply_port_mapping_policy__skips_an_invalid_protocol__code() {
    let doc = json!({"portMappings": [
        {"containerPort": 80, "hostPort": 8080, "protocol": "sctp"},
        {"containerPort": 53, "hostPort": 5353, "protocol": "udp"},
        {"containerPort": 81, "hostPort": 8081, "protocol": "17"}]});
    let m = mappings(doc.clone(), UnknownProtocol::Skip).unwrap();
    assert_eq!(
        m.iter()
            .map(|m| (m.host_port, m.protocol))
            .collect::<Vec<_>>(),
        [(5353, 17), (8081, 17)]
    );
    let e = mappings(doc, UnknownProtocol::Refuse).unwrap_err();
    assert!(
        e.msg.starts_with("runtimeConfig.portMappings[0].protocol"),
        "{}",
        e.msg
    );
}

// Describe("GetXEndpointPolicies") / It("GetHNSEndpointPolicies") and
// It("GetHostComputeEndpointPolicies"): only entries named EndpointPolicy are taken.
#[test]
fn get_host_compute_endpoint_policies() {
    for value in [
        json!({"Type": "OutBoundNAT", "ExceptionList": ["192.168.1.2"]}),
        json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.1.2"]}}),
    ] {
        let p = config_policies(json!({"policies": [
            {"name": "EndpointPolicy", "value": value},
            {"name": "someOtherType", "value": {"someOtherKey": "someOtherValue"}}]}));
        assert_eq!(
            wire(&p),
            [json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.1.2"]}})],
            "{value}"
        );
    }
}
