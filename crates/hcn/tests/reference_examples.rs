//! The JSON examples of the reference (§4 d and e) decode and marshal back to the same content,
//! in hcsshim's shape.

use hcn::modify::{ModifyRequest, PolicyRequest};
use hcn::policy::PortRange;
use hcn::{Endpoint, EndpointPolicy, LoadBalancer, Network, NetworkPolicy, SdnRoute, decode};
use serde_json::{Value, json};

const EP: &str = "5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D";
const EP2: &str = "6B4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D";

fn roundtrip<T>(doc: Value) -> Value
where
    T: serde::de::DeserializeOwned + serde::Serialize + hcn::Validate,
{
    let typed: T = decode(doc.to_string().as_bytes()).expect("reference example decodes");
    serde_json::to_value(&typed).unwrap()
}

/// hcsshim always marshals the struct-typed fields; the reference examples leave some out.
fn with(mut v: Value, extra: Value) -> Value {
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[test]
fn test_load_balancer() {
    let doc = json!({"HostComputeEndpoints":[EP],"SourceVIP":"10.0.0.1","FrontendVIPs":["1.1.1.2","1.1.1.3"],
        "PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":8090}],"SchemaVersion":{"Major":2,"Minor":0}});
    assert_eq!(roundtrip::<LoadBalancer>(doc.clone()), doc);
}

#[test]
fn dsr_load_balancer() {
    let doc = json!({"HostComputeEndpoints":[EP],"SourceVIP":"10.0.0.1","FrontendVIPs":["1.1.1.2","1.1.1.3"],
        "PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":80,"Flags":8}],
        "SchemaVersion":{"Major":2,"Minor":0},"Flags":1});
    let back = roundtrip::<LoadBalancer>(doc.clone());
    assert_eq!(back, doc);
    assert_eq!(back["Flags"], 1);
}

#[test]
fn overlay_network() {
    let doc = json!({"Name":"overlay","Type":"Overlay","MacPool":{"Ranges":[{"StartMacAddress":"00-15-5D-52-C0-00","EndMacAddress":"00-15-5D-52-CF-FF"}]},
        "Dns":{},"Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"192.168.100.0/24",
        "Policies":[{"Type":"VSID","Settings":{"IsolationId":5000}}],
        "Routes":[{"NextHop":"192.168.100.1","DestinationPrefix":"0.0.0.0/0"}]}]}],
        "Flags":8,"Health":{"Extra":{}},"SchemaVersion":{"Major":2,"Minor":0}});
    assert_eq!(roundtrip::<Network>(doc.clone()), doc);
}

#[test]
fn remote_subnet_route_modify() {
    let doc = json!({"ResourceType":"Policy","RequestType":"Add","Settings":{"Policies":[{"Type":"RemoteSubnetRoute",
        "Settings":{"DestinationPrefix":"192.168.2.0/24","IsolationId":5000,"ProviderAddress":"1.1.1.1",
        "DistributedRouterMacAddress":"00-12-34-56-78-9a"}}]}});
    let req: ModifyRequest = decode(doc.to_string().as_bytes()).unwrap();
    let policies: PolicyRequest<NetworkPolicy> = hcn::decode_value(req.settings).unwrap();
    let NetworkPolicy::RemoteSubnetRoute(r) = &policies.policies[0] else {
        panic!("not a RemoteSubnetRoute: {:?}", policies.policies[0]);
    };
    assert_eq!(r.isolation_id, 5000);
    assert_eq!(r.provider_address.to_string(), "1.1.1.1");
    // MACs come back as HNS writes them: upper case.
    assert_eq!(
        serde_json::to_value(&policies).unwrap()["Policies"][0]["Settings"]["DistributedRouterMacAddress"],
        "00-12-34-56-78-9A"
    );
}

#[test]
fn sdn_route() {
    let doc = json!({"HostComputeEndpoints":[EP],"Setting":[{"DestinationPrefix":"169.254.169.254/24","NextHop":"127.10.0.34"}],
        "SchemaVersion":{"Major":2,"Minor":0}});
    assert_eq!(roundtrip::<SdnRoute>(doc.clone()), doc);
}

#[test]
fn acl_policy() {
    let doc = json!({"Policies":[{"Type":"ACL","Settings":{"Protocols":"6","Action":"Allow","Direction":"In","LocalAddresses":"192.168.100.0/24,10.0.0.21",
        "RemoteAddresses":"192.168.100.0/24,10.0.0.21","LocalPorts":"80,8080","RemotePorts":"80,8080","RuleType":"Switch","Priority":200}}]});
    let req: PolicyRequest<EndpointPolicy> = hcn::decode_value(doc.clone()).unwrap();
    assert_eq!(serde_json::to_value(&req).unwrap(), doc);
}

#[test]
fn acl_lists_come_back_as_written_and_are_read_entry_by_entry() {
    let doc = json!({"Policies":[{"Type":"ACL","Settings":{"Protocols":"6, 17","Action":"Block","Direction":"Out",
        "LocalAddresses":" 10.0.0.21 ,10.1.0.0/16","RemotePorts":"80, 8000-8080","Priority":300}}]});
    let req: PolicyRequest<EndpointPolicy> = hcn::decode_value(doc.clone()).unwrap();
    assert_eq!(serde_json::to_value(&req).unwrap(), doc);
    let EndpointPolicy::Acl(acl) = &req.policies[0] else {
        panic!("an ACL: {req:?}")
    };
    assert_eq!(acl.protocols.entries(), [6, 17]);
    assert_eq!(
        acl.local_addresses.prefixes().collect::<Vec<_>>(),
        [
            "10.0.0.21/32".parse::<ipnet::IpNet>().unwrap(),
            "10.1.0.0/16".parse().unwrap()
        ]
    );
    assert!(acl.remote_addresses.is_any() && acl.local_ports.is_any());
    assert_eq!(
        acl.remote_ports.entries(),
        [
            PortRange::one(80),
            PortRange {
                first: 8000,
                last: 8080
            }
        ]
    );
}

#[test]
fn winkernel_remote_endpoint() {
    let net = "7C4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D";
    let doc = json!({"HostComputeNetwork":net,"Policies":[{"Type":"ProviderAddress","Settings":{"ProviderAddress":"10.0.0.5"}}],
        "IpConfigurations":[{"IpAddress":"10.244.2.7"}],"Dns":{},"MacAddress":"02-11-0a-f4-02-07","Flags":1,
        "Health":{"Extra":{}},"SchemaVersion":{"Major":2,"Minor":0}});
    let back = roundtrip::<Endpoint>(doc.clone());
    // Same content; the MAC in HNS's upper-case spelling.
    assert_eq!(back, with(doc, json!({"MacAddress":"02-11-0A-F4-02-07"})));
}

#[test]
fn winkernel_cluster_ip_and_node_port_lbs() {
    let cluster_ip = json!({"HostComputeEndpoints":[EP,EP2],"FrontendVIPs":["10.96.0.10"],
        "PortMappings":[{"Protocol":17,"InternalPort":53,"ExternalPort":53,"DistributionType":2}],
        "SchemaVersion":{"Major":2,"Minor":0},"Flags":1});
    assert_eq!(roundtrip::<LoadBalancer>(cluster_ip.clone()), cluster_ip);
    let node_port = json!({"HostComputeEndpoints":[EP],"SourceVIP":"10.244.1.2",
        "PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":30080,"Flags":18}],"SchemaVersion":{"Major":2,"Minor":0}});
    assert_eq!(roundtrip::<LoadBalancer>(node_port.clone()), node_port);
}

#[test]
fn empty_values_are_left_out_and_struct_fields_kept() {
    let ep: Endpoint = decode(br#"{"name":"e","SourceVIP":"","flags":0}"#).unwrap();
    let v = serde_json::to_value(&ep).unwrap();
    assert_eq!(
        v,
        json!({"Name":"e","Dns":{},"Health":{"Extra":{}},"SchemaVersion":{"Major":2,"Minor":0}})
    );
    let net: Network = decode(br#"{"Name":"n","Type":"L2Bridge"}"#).unwrap();
    let v = serde_json::to_value(&net).unwrap();
    assert_eq!(v["MacPool"], json!({}));
    assert_eq!(v["Health"], json!({"Extra":{}}));
}

/// A NAT network is written with `"Type": "NAT"` (hcsshim's `Type` is a string with
/// omitempty, so "NAT" is kept; hcsshim `hcn/hcnutils_test.go` HcnGenerateNATNetwork sets it
/// and clients compare `Type == "NAT"`). This test used to assert the reference's claim that
/// HNS omits it; upstream's code wins. An absent `Type` still reads as NAT.
#[test]
fn nat_network_type_is_written_and_absent_type_reads_as_nat() {
    let net: Network = decode(br#"{"Name":"nat","Type":"nat"}"#).unwrap();
    assert_eq!(net.network_type, hcn::NetworkType::Nat);
    assert_eq!(serde_json::to_value(&net).unwrap()["Type"], "NAT");
    let untyped: Network = decode(br#"{"Name":"nat"}"#).unwrap();
    assert_eq!(untyped.network_type, hcn::NetworkType::Nat);
}
