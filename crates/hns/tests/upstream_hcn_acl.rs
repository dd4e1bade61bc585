//! HNS ACLs, sets and tiers against a real hnsd through its socket: hcsshim's (hnslib's) `hcn`
//! tests of them, each named after its upstream file and test, and the errors HNS answers bad
//! ACLs with (named after the behaviour, with the source of the fact).

// Upstream-named tests are `<upstream test in snake case>__<upstream file>`.
#![allow(non_snake_case)]

mod common;

use common::Hnsd;
use hcn::error::HResult;
use hns::{Kind, Profile};
use hns_client::Method;
use serde_json::{Value, json};

async fn call(
    h: &Hnsd,
    m: Method,
    path: &str,
    doc: &Value,
) -> Result<Value, hns_client::ClientError> {
    h.client()
        .call(m, path, Some(doc.to_string().into_bytes()))
        .await
}

async fn get(h: &Hnsd, kind: Kind, id: &str) -> Value {
    h.client()
        .call(Method::GET, &format!("/{kind}/{id}"), None)
        .await
        .unwrap_or_else(|e| panic!("{kind} {id} reads back: {e}"))
}

fn id(v: &Value) -> String {
    v["ID"].as_str().expect("an ID").to_string()
}

fn code(r: Result<Value, hns_client::ClientError>) -> HResult {
    r.expect_err("hnsd must refuse this")
        .code()
        .expect("an HNS error record")
}

/// hcnutils_test.go HcnCreateTestL2BridgeNetwork.
async fn l2bridge_network(h: &Hnsd) -> String {
    let doc = json!({"Type": "L2Bridge", "Name": "wnt-acl-bridge", "Flags": 8,
        "MacPool": {"Ranges": [{"StartMacAddress": "00-15-5D-52-C0-00", "EndMacAddress": "00-15-5D-52-CF-FF"}]},
        "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": "192.168.100.0/24",
            "Routes": [{"NextHop": "192.168.100.1", "DestinationPrefix": "0.0.0.0/0"}]}]}],
        "SchemaVersion": {"Major": 2, "Minor": 0}});
    id(&call(h, Method::POST, "/networks", &doc)
        .await
        .expect("network created"))
}

/// hcnutils_test.go HcnCreateTestEndpoint.
async fn endpoint(h: &Hnsd, net: &str, policies: Value) -> String {
    let doc = json!({"Name": "wnt-acl-ep", "HostComputeNetwork": net, "Policies": policies,
        "SchemaVersion": {"Major": 2, "Minor": 0}});
    id(&call(h, Method::POST, "/endpoints", &doc)
        .await
        .expect("endpoint created"))
}

async fn modify(
    h: &Hnsd,
    kind: Kind,
    id: &str,
    verb: &str,
    policies: Value,
) -> Result<Value, hns_client::ClientError> {
    let req =
        json!({"ResourceType": "Policy", "RequestType": verb, "Settings": {"Policies": policies}});
    call(h, Method::PATCH, &format!("/{kind}/{id}"), &req).await
}

fn acl(settings: Value) -> Value {
    json!({"Type": "ACL", "Settings": settings})
}

fn policies(v: &Value) -> Vec<Value> {
    v["Policies"].as_array().cloned().unwrap_or_default()
}

/// hcnutils_test.go HcnCreateTierAcls: three inbound and three outbound tiers, each ending in
/// a Block, with Pass rules handing on to the next tier.
fn tier_acls() -> Value {
    let rule = |id: &str, action: &str, priority: u16, extra: Value| {
        let mut r = json!({"Id": id, "TierAclRuleAction": action, "Priority": priority});
        if let (Value::Object(r), Value::Object(e)) = (&mut r, extra) {
            r.extend(e);
        }
        r
    };
    let tier = |name: &str, dir: &str, order: u16, rules: Vec<Value>| json!({"Type": "TierAcl", "Settings": {"Name": name, "Direction": dir, "Order": order, "TierAclRules": rules}});
    let pair = json!({"Protocols": "6", "LocalAddresses": "192.168.100.0/24,10.0.0.21",
        "RemoteAddresses": "192.168.100.0/24,10.0.0.22"});
    let with_ports = |p: &str| {
        let mut v = pair.clone();
        v["LocalPorts"] = json!(p);
        v["RemotePorts"] = json!(p);
        v
    };
    let subnet =
        json!({"LocalAddresses": "192.168.100.0/24", "RemoteAddresses": "192.168.100.0/24"});
    let host = json!({"LocalAddresses": "10.0.0.21", "RemoteAddresses": "10.0.0.21"});
    json!([
        tier(
            "TierIn1",
            "In",
            1001,
            vec![
                rule("TierIn1Rule1", "Pass", 2001, with_ports("80")),
                rule("TierIn1Rule2", "Block", 2100, json!({}))
            ]
        ),
        tier(
            "TierIn2",
            "In",
            1002,
            vec![
                rule("TierIn2Rule1", "Pass", 3000, subnet.clone()),
                rule("TierIn2Rule2", "Pass", 3010, host.clone()),
                rule("TierIn2Rule3", "Block", 3100, json!({}))
            ]
        ),
        tier(
            "TierIn3",
            "In",
            1013,
            vec![
                rule(
                    "TierIn3Rule1",
                    "Allow",
                    3000,
                    json!({"Protocols": "17", "LocalPorts": "8080", "RemotePorts": "8080"})
                ),
                rule("TierIn3Rule2", "Block", 3010, json!({}))
            ]
        ),
        tier(
            "TierOut1",
            "Out",
            1001,
            vec![
                rule("TierOut1Rule1", "Pass", 2000, with_ports("81")),
                rule("TierOut1Rule2", "Block", 2100, json!({}))
            ]
        ),
        tier(
            "TierOut2",
            "Out",
            1002,
            vec![
                rule("TierOut2Rule1", "Pass", 3000, subnet),
                rule(
                    "TierOut2Rule2",
                    "Pass",
                    3010,
                    json!({"Protocols": "6", "LocalAddresses": "10.0.0.21", "RemoteAddresses": "10.0.0.21", "LocalPorts": "8082", "RemotePorts": "8082"})
                ),
                rule("TierOut2Rule3", "Block", 3100, json!({}))
            ]
        ),
        tier(
            "TierOut3",
            "Out",
            1013,
            vec![
                rule(
                    "TierOut3Rule1",
                    "Allow",
                    3000,
                    json!({"Protocols": "6", "LocalPorts": "90", "RemotePorts": "90"})
                ),
                rule("TierOut3Rule2", "Block", 3010, json!({}))
            ]
        ),
    ])
}

/// hcnendpoint_test.go TestApplyTierAclPolicyOnEndpoint: the six tiers applied with
/// RequestType Update to an endpoint of an L2Bridge network read back with the endpoint. Beyond
/// upstream: TierAcl came with HNS 14.0, so ws2022 (HNS 12.1) refuses it as an unknown policy
/// type and keeps the endpoint as it was.
#[tokio::test]
async fn apply_tier_acl_policy_on_endpoint__hcnendpoint() {
    for (profile, takes) in [(Profile::Ws2025, true), (Profile::Ws2022, false)] {
        let h = Hnsd::start(profile).await;
        let net = l2bridge_network(&h).await;
        let ep = endpoint(&h, &net, json!([])).await;
        let r = modify(&h, Kind::Endpoint, &ep, "Update", tier_acls()).await;
        let back = get(&h, Kind::Endpoint, &ep).await;
        if takes {
            r.unwrap_or_else(|e| panic!("{profile}: {e}"));
            let tiers = policies(&back);
            assert_eq!(tiers.len(), 6, "{back}");
            assert_eq!(
                tiers[0]["Settings"]["TierAclRules"][0]["TierAclRuleAction"],
                "Pass"
            );
            assert_eq!(
                tiers[5]["Settings"]["TierAclRules"][1]["Id"],
                "TierOut3Rule2"
            );
        } else {
            assert_eq!(code(r), HResult::HCN_E_INVALID_POLICY_TYPE, "{profile}");
            assert!(policies(&back).is_empty(), "{back}");
        }
    }
}

/// hcnendpoint_test.go TestApplyPolicyOnEndpoint / TestModifyEndpointSettings, as Azure NPM
/// relies on them: an `Update` replaces the endpoint's whole policy list (NPM re-sends the
/// other policies first for this reason), `Add` appends, `Remove` takes an identical ACL away.
#[tokio::test]
async fn update_replaces_the_whole_policy_list_and_add_and_remove_edit_it() {
    let h = Hnsd::start(Profile::Ws2025).await;
    let net = l2bridge_network(&h).await;
    let nat = json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.0.0/16"]}});
    let ep = endpoint(&h, &net, json!([nat])).await;
    let allow = acl(
        json!({"Id": "allow-80", "Protocols": "6", "Action": "Allow", "Direction": "In", "LocalPorts": "80", "Priority": 222}),
    );
    let block =
        acl(json!({"Id": "block-all", "Action": "Block", "Direction": "In", "Priority": 3000}));
    modify(&h, Kind::Endpoint, &ep, "Update", json!([allow]))
        .await
        .unwrap();
    let back = get(&h, Kind::Endpoint, &ep).await;
    let types: Vec<&str> = policies(&back)
        .iter()
        .filter_map(|p| p["Type"].as_str())
        .map(|_| "")
        .collect();
    assert_eq!(types.len(), 1, "Update dropped the OutBoundNAT: {back}");
    assert_eq!(policies(&back)[0]["Settings"]["Id"], "allow-80");
    modify(&h, Kind::Endpoint, &ep, "Add", json!([block.clone()]))
        .await
        .unwrap();
    assert_eq!(policies(&get(&h, Kind::Endpoint, &ep).await).len(), 2);
    modify(&h, Kind::Endpoint, &ep, "Remove", json!([block]))
        .await
        .unwrap();
    assert_eq!(policies(&get(&h, Kind::Endpoint, &ep).await), vec![allow]);
}

/// HNS's errors for bad ACLs, each `0x803B000D` (HCN_E_INVALID_POLICY, "The provided policy
/// configuration is invalid or missing parameters"): the key `ID` (Azure NPM: "HNS is not
/// happy with 'ID'"), the literal `"Any"` as an address (hcsshim#1059), IPv4 beside IPv6 in one
/// rule, a set ID the network does not have. A refused ACL leaves the endpoint as it was; the
/// same rule written right is taken.
#[tokio::test]
async fn bad_acls_are_refused_with_hns_errors_and_change_nothing() {
    let h = Hnsd::start(Profile::Ws2025).await;
    let net = l2bridge_network(&h).await;
    let ep = endpoint(&h, &net, json!([])).await;
    let base = json!({"Protocols": "6", "Action": "Block", "Direction": "In", "Priority": 300});
    let with = |k: &str, v: &str| {
        let mut s = base.clone();
        s[k] = json!(v);
        acl(s)
    };
    for (bad, says) in [
        (with("ID", "r1"), "Id"),
        (with("RemoteAddresses", "Any"), "Any"),
        (with("RemoteAddresses", "10.0.0.0/8,fd00::/64"), "family"),
        (with("RemoteAddresses", "azure-npm-404"), "azure-npm-404"),
    ] {
        let e = modify(&h, Kind::Endpoint, &ep, "Add", json!([bad]))
            .await
            .expect_err("refused");
        assert_eq!(e.code(), Some(HResult::HCN_E_INVALID_POLICY), "{bad}: {e}");
        assert!(e.to_string().contains(says), "{bad}: {e}");
        assert!(policies(&get(&h, Kind::Endpoint, &ep).await).is_empty());
    }
    for good in [with("Id", "r1"), with("RemoteAddresses", "10.0.0.0/8")] {
        modify(&h, Kind::Endpoint, &ep, "Update", json!([good]))
            .await
            .unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    let e = call(
        &h,
        Method::POST,
        "/endpoints",
        &json!({"HostComputeNetwork": net, "Policies": [with("LocalAddresses", "ANY")]}),
    )
    .await;
    assert_eq!(code(e), HResult::HCN_E_INVALID_POLICY, "on create too");
}

fn set(id: &str, kind: &str, values: &str) -> Value {
    json!({"Type": "SetPolicy", "Settings": {"Id": id, "Name": id, "PolicyType": kind, "Values": values}})
}

/// Network `SetPolicy` as Azure NPM drives it (npm `ipsetmanager_windows.go`): IPSETs added
/// before the NESTEDIPSETs that hold them, members changed by `Update` of one set, an ACL naming
/// a set; a nested set naming a set the network lacks is refused, and a set still held by a
/// nested set or named by an ACL cannot be removed; nested first, then plain, goes.
#[tokio::test]
async fn set_policies_plain_before_nested_and_held_ones_stay() {
    let h = Hnsd::start(Profile::Ws2025).await;
    let net = l2bridge_network(&h).await;
    let c = h.client();
    let nested = set("ns-x", "NESTEDIPSET", "pods-a");
    let e = modify(&h, Kind::Network, &net, "Add", json!([nested])).await;
    assert_eq!(
        code(e),
        HResult::HCN_E_INVALID_POLICY,
        "nested before its member"
    );
    modify(
        &h,
        Kind::Network,
        &net,
        "Add",
        json!([
            set("pods-a", "IPSET", "192.168.100.5"),
            set("ns-x", "NESTEDIPSET", "pods-a")
        ]),
    )
    .await
    .expect("plain then nested in one request");
    modify(
        &h,
        Kind::Network,
        &net,
        "Update",
        json!([set("pods-a", "IPSET", "192.168.100.5,192.168.100.6")]),
    )
    .await
    .unwrap();
    let sets: Vec<Value> = policies(&get(&h, Kind::Network, &net).await)
        .into_iter()
        .filter(|p| p["Type"] == "SetPolicy")
        .collect();
    assert_eq!(
        sets.len(),
        2,
        "Update changed one set, kept the other: {sets:?}"
    );
    assert_eq!(
        sets.iter()
            .find(|s| s["Settings"]["Id"] == "pods-a")
            .unwrap()["Settings"]["Values"],
        "192.168.100.5,192.168.100.6"
    );
    let e = modify(
        &h,
        Kind::Network,
        &net,
        "Remove",
        json!([set("pods-a", "IPSET", "")]),
    )
    .await;
    assert_eq!(
        code(e),
        HResult::HCN_E_ENTITY_HAS_REFERENCES,
        "held by ns-x"
    );
    let ep = endpoint(&h, &net, json!([acl(json!({"Id": "azure-acl-x-deny", "Action": "Block", "Direction": "In", "RemoteAddresses": "ns-x", "Priority": 3000}))])).await;
    let e = modify(
        &h,
        Kind::Network,
        &net,
        "Remove",
        json!([set("ns-x", "NESTEDIPSET", "pods-a")]),
    )
    .await;
    assert_eq!(
        code(e),
        HResult::HCN_E_ENTITY_HAS_REFERENCES,
        "named by the endpoint's ACL"
    );
    c.delete_endpoint(ep.parse().unwrap()).await.unwrap();
    modify(
        &h,
        Kind::Network,
        &net,
        "Remove",
        json!([
            set("ns-x", "NESTEDIPSET", "pods-a"),
            set("pods-a", "IPSET", "")
        ]),
    )
    .await
    .expect("nested, then plain");
    assert!(
        policies(&get(&h, Kind::Network, &net).await)
            .iter()
            .all(|p| p["Type"] != "SetPolicy")
    );
}

/// SetPolicy came with HNS 13.0 and NESTEDIPSET with 15.0 (hnslib `hcnglobals.go`): ws2022
/// (HNS 12.1) refuses a set as a policy type it does not know.
#[tokio::test]
async fn set_policy_needs_hns_13() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = l2bridge_network(&h).await;
    let e = modify(
        &h,
        Kind::Network,
        &net,
        "Add",
        json!([set("s", "IPSET", "10.0.0.1")]),
    )
    .await;
    assert_eq!(code(e), HResult::HCN_E_INVALID_POLICY_TYPE);
}

/// hcsshim `internal/hns` `HNSEndpoint.ApplyACLPolicy` as Calico's felix calls it: v1 `ACL`
/// policies (numeric `Protocol`, 256 any, `LocalPort` 0 for none, empty address strings) in
/// the endpoint document posted to `/endpoints/{id}`, which replaces the endpoint's ACLs.
#[tokio::test]
async fn felix_applies_v1_acls_through_the_v1_endpoint_update() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = l2bridge_network(&h).await;
    let ep = endpoint(
        &h,
        &net,
        json!([acl(
            json!({"Action": "Allow", "Direction": "Out", "Priority": 1})
        )]),
    )
    .await;
    let v1 = |id: &str, action: &str, priority: u16| {
        json!({"Type": "ACL", "Id": id, "Protocol": 256, "InternalPort": 0, "Action": action,
            "Direction": "In", "LocalAddresses": "", "RemoteAddresses": "", "LocalPorts": "",
            "LocalPort": 0, "RemotePorts": "", "RemotePort": 0, "RuleType": "Switch",
            "Priority": priority, "ServiceName": ""})
    };
    let mut doc = get(&h, Kind::Endpoint, &ep).await;
    doc["Policies"] = json!([
        v1("allow-host-to-endpoint", "Allow", 900),
        v1("policy-default-deny", "Block", 1000)
    ]);
    let back = h
        .client()
        .apply_v1_endpoint(ep.parse().unwrap(), &doc)
        .await
        .expect("v1 update");
    let p = policies(&back);
    assert_eq!(p.len(), 2, "the v1 list replaced the v2 ACL: {back}");
    assert_eq!(p[0]["Settings"]["Id"], "allow-host-to-endpoint");
    assert_eq!(p[0]["Settings"]["Protocols"], "256");
    assert!(p[1]["Settings"].get("LocalPorts").is_none(), "{back}");
    let e = call(&h, Method::POST, &format!("/networks/{net}"), &json!({})).await;
    assert_eq!(code(e), HResult::HCN_E_REQUEST_UNSUPPORTED);
}

/// hnsv1_test.go TestNetwork and TestEndpoint (CreateTestNetwork): a v1 NAT network, its
/// `Subnets` with `AddressPrefix` and `GatewayAddress`, and a v1 endpoint on it named by
/// `VirtualNetwork`, make the objects their v2 forms do. Beyond upstream: `MacPools` and the
/// endpoint's `IPAddress` with `PrefixLength`.
#[tokio::test]
async fn network_and_endpoint__hnsv1() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let v1 = json!({"Type": "NAT", "Name": "GoTestNat",
        "Subnets": [{"AddressPrefix": "192.168.100.0/24", "GatewayAddress": "192.168.100.1"}],
        "MacPools": [{"StartMacAddress": "00-15-5D-52-C0-00", "EndMacAddress": "00-15-5D-52-CF-FF"}]});
    let net = id(&call(&h, Method::POST, "/networks", &v1)
        .await
        .expect("v1 network"));
    let n = get(&h, Kind::Network, &net).await;
    assert_eq!(
        n["Ipams"][0]["Subnets"][0]["IpAddressPrefix"], "192.168.100.0/24",
        "{n}"
    );
    assert_eq!(
        n["Ipams"][0]["Subnets"][0]["Routes"][0]["NextHop"], "192.168.100.1",
        "{n}"
    );
    assert_eq!(
        n["MacPool"]["Ranges"][0]["StartMacAddress"], "00-15-5D-52-C0-00",
        "{n}"
    );
    let ep = json!({"Name": "GoTestNatEndpoint", "VirtualNetwork": net, "IPAddress": "192.168.100.7",
        "PrefixLength": 24});
    let ep = id(&call(&h, Method::POST, "/endpoints", &ep)
        .await
        .expect("v1 endpoint"));
    let e = get(&h, Kind::Endpoint, &ep).await;
    assert_eq!(e["HostComputeNetwork"], net.as_str(), "{e}");
    assert_eq!(
        e["IpConfigurations"][0]["IpAddress"], "192.168.100.7",
        "{e}"
    );
}

async fn v1_update(h: &Hnsd, ep: &str, doc: &Value) -> Value {
    h.client()
        .apply_v1_endpoint(ep.parse().expect("an endpoint ID"), doc)
        .await
        .expect("v1 update")
}

/// felix posts a bare endpoint (`HNSEndpoint{Id}`) with its ACLs alone, and Calico's pods keep
/// the OutBoundNAT their CNI gave them: a v1 update of ACLs only replaces the ACLs. An endpoint
/// read whole, its ACLs appended (hcsshim `GetHNSEndpointByID` then `ApplyACLPolicy`), replaces
/// the whole list, which is the list it read plus the ACLs.
#[tokio::test]
async fn a_v1_update_of_acls_alone_keeps_the_endpoints_other_policies() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = l2bridge_network(&h).await;
    let nat = json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.0.0.0/8"]}});
    let ep = endpoint(&h, &net, json!([nat.clone()])).await;
    let v1 = |id: &str, action: &str| {
        json!({"Type": "ACL", "Id": id, "Protocol": 256, "Action": action, "Direction": "In",
            "RuleType": "Switch", "Priority": 1000})
    };
    let types = |v: &Value| -> Vec<String> {
        policies(v)
            .iter()
            .map(|p| p["Type"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let bare = json!({"Id": ep, "Policies": [v1("a", "Allow"), v1("b", "Block")]});
    let back = v1_update(&h, &ep, &bare).await;
    assert_eq!(types(&back), ["OutBoundNAT", "ACL", "ACL"], "{back}");
    let again = json!({"Id": ep, "Policies": [v1("c", "Block")]});
    let back = v1_update(&h, &ep, &again).await;
    assert_eq!(types(&back), ["OutBoundNAT", "ACL"], "{back}");
    assert_eq!(
        policies(&back)[1]["Settings"]["Id"],
        "c",
        "the old ACLs went"
    );
    let none = json!({"Id": ep, "Policies": []});
    let back = v1_update(&h, &ep, &none).await;
    assert_eq!(
        types(&back),
        ["OutBoundNAT"],
        "no rules: every ACL removed, the NAT kept"
    );
    let mut read = get(&h, Kind::Endpoint, &ep).await;
    let mut list = policies(&read);
    list.push(v1("d", "Allow"));
    read["Policies"] = Value::Array(list);
    let back = v1_update(&h, &ep, &read).await;
    assert_eq!(types(&back), ["OutBoundNAT", "ACL"], "{back}");
    let mut read = get(&h, Kind::Endpoint, &ep).await;
    read["Policies"] = json!([v1("e", "Allow")]);
    read["Policies"].as_array_mut().expect("a list").insert(
        0,
        json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.1.0.0/16"]}}),
    );
    let back = v1_update(&h, &ep, &read).await;
    assert_eq!(
        policies(&back)[0]["Settings"]["Exceptions"],
        json!(["10.1.0.0/16"]),
        "a list with other policies replaces the whole list: {back}"
    );
    assert_eq!(types(&back), ["OutBoundNAT", "ACL"], "{back}");
}
