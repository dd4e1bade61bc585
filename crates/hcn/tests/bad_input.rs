//! Bad input is refused with the HRESULT HNS uses and a message naming the field.

use hcn::{DecodeError, Endpoint, HResult, LoadBalancer, Network, decode};

fn err<T: serde::de::DeserializeOwned + hcn::Validate + std::fmt::Debug>(doc: &str) -> DecodeError {
    decode::<T>(doc.as_bytes()).expect_err("bad input must be refused")
}

#[test]
fn bad_cidr_names_the_field() {
    let e = err::<Network>(r#"{"Ipams":[{"Subnets":[{"IpAddressPrefix":"10.0.0.0/33"}]}]}"#);
    assert_eq!(e.path, "Ipams[0].Subnets[0].IpAddressPrefix");
    assert_eq!(e.code, HResult::E_INVALIDARG);
    assert!(e.message.contains("10.0.0.0/33"), "{e}");
}

#[test]
fn bad_ip_names_the_field() {
    let e = err::<Endpoint>(r#"{"IpConfigurations":[{"IpAddress":"10.0.0.300"}]}"#);
    assert_eq!(e.path, "IpConfigurations[0].IpAddress");
}

#[test]
fn bad_mac_names_the_field() {
    let e = err::<Endpoint>(r#"{"MacAddress":"00-15-5D-52-C0"}"#);
    assert_eq!(e.path, "MacAddress");
    assert!(
        e.message.contains("00-15-5D-52-C0-00"),
        "says how to write one: {e}"
    );
}

#[test]
fn bad_guid_names_the_field() {
    let e = err::<LoadBalancer>(r#"{"HostComputeEndpoints":["not-a-guid"]}"#);
    assert_eq!(e.path, "HostComputeEndpoints[0]");
}

#[test]
fn bad_port_names_the_field() {
    let e = err::<LoadBalancer>(
        r#"{"PortMappings":[{"Protocol":6,"InternalPort":70000,"ExternalPort":80}]}"#,
    );
    assert_eq!(e.path, "PortMappings[0].InternalPort");
    let e = err::<LoadBalancer>(r#"{"PortMappings":[{"Protocol":6,"ExternalPort":80}]}"#);
    assert_eq!(e.code, HResult::HCN_E_INVALID_INTERNAL_PORT);
}

#[test]
fn bad_network_type_names_the_field() {
    let e = err::<Network>(r#"{"Type":"Bridge"}"#);
    assert_eq!(e.path, "Type");
    assert!(e.message.contains("L2Bridge"), "lists the valid types: {e}");
}

#[test]
fn unknown_policy_type_is_refused_as_hns_does() {
    let e = err::<Endpoint>(r#"{"Policies":[{"Type":"Teleport","Settings":{}}]}"#);
    assert_eq!(e.code, HResult::HCN_E_INVALID_POLICY_TYPE);
    assert_eq!(e.path, "Policies[0].Type");
}

#[test]
fn bad_json_is_invalid_json() {
    assert_eq!(
        err::<Network>("{\"Name\":").code,
        HResult::HCN_E_INVALID_JSON
    );
}

#[test]
fn acl_fields_are_checked() {
    let e = err::<Endpoint>(
        r#"{"Policies":[{"Type":"ACL","Settings":{"Action":"Allow","Direction":"In","RemotePorts":"80-70"}}]}"#,
    );
    assert!(e.message.contains("80-70"), "{e}");
    let e = err::<Endpoint>(
        r#"{"Policies":[{"Type":"ACL","Settings":{"Action":"Deny","Direction":"In"}}]}"#,
    );
    assert!(e.message.contains("Allow"), "{e}");
}

#[test]
fn every_acl_list_is_checked_entry_by_entry_and_named() {
    for (field, value, bad) in [
        ("Protocols", "6,tcp", "tcp"),
        ("LocalAddresses", "10.0.0.0/8,10.1.0.0/33", "10.1.0.0/33"),
        (
            "RemoteAddresses",
            "10.244.2.0/24, 10.244.3.300",
            "10.244.3.300",
        ),
        ("LocalPorts", "80,90-85", "90-85"),
        ("RemotePorts", "53,65536", "65536"),
    ] {
        let doc = format!(
            r#"{{"Policies":[{{"Type":"ACL","Settings":{{"Action":"Block","Direction":"Out","{field}":"{value}"}}}}]}}"#
        );
        let e = err::<Endpoint>(&doc);
        assert_eq!(e.code, HResult::E_INVALIDARG, "{field}: {e}");
        assert_eq!(e.path, format!("Policies[0].Settings.{field}"), "{e}");
        assert!(e.message.contains(bad), "quotes the bad entry {bad}: {e}");
    }
}

#[test]
fn mixed_case_and_v1_spellings_are_accepted() {
    let ep: Endpoint = decode(
        br#"{"NAME":"ep","ipconfigurations":[{"IPAddress":"10.244.1.5","prefixLength":24}],
            "policies":[{"type":"OutBoundNAT","ExceptionList":["10.244.0.0/16","10.96.0.0/12"]},
                        {"Type":"ROUTE","DestinationPrefix":"10.96.0.0/12","NeedEncap":true},
                        {"Type":"PA","PA":"10.0.0.5"},
                        {"Type":"NAT","InternalPort":80,"ExternalPort":8080,"Protocol":"tcp"},
                        {"Type":"OutBoundNAT","VIP":"10.0.0.4"}]}"#,
    )
    .unwrap();
    let v = serde_json::to_value(&ep).unwrap();
    assert_eq!(v["Name"], "ep");
    assert_eq!(v["IpConfigurations"][0]["IpAddress"], "10.244.1.5");
    assert_eq!(
        v["Policies"][0]["Settings"]["Exceptions"][1],
        "10.96.0.0/12"
    );
    assert_eq!(v["Policies"][1]["Type"], "SDNRoute");
    assert_eq!(v["Policies"][1]["Settings"]["NeedEncap"], true);
    assert_eq!(v["Policies"][2]["Settings"]["ProviderAddress"], "10.0.0.5");
    assert_eq!(v["Policies"][3]["Type"], "PortMapping");
    assert_eq!(v["Policies"][3]["Settings"]["Protocol"], 6);
    assert_eq!(v["Policies"][4]["Settings"]["VirtualIP"], "10.0.0.4");
}
