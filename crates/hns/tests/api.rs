//! hnsd's API through its socket: the HCN functions, HNS's rules, and its errors.

mod common;

use common::{Hnsd, dump, l2bridge};
use hcn::error::HResult;
use hcn::{Endpoint, LoadBalancer, Network};
use hns::{Kind, Profile};
use hns_client::Method;
use serde_json::{Value, json};

const EP: &str = "5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D";
const EP2: &str = "6B4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D";

async fn post(h: &Hnsd, kind: Kind, doc: &Value) -> Result<Value, hns_client::ClientError> {
    h.client()
        .call(
            Method::POST,
            &format!("/{kind}"),
            Some(doc.to_string().into_bytes()),
        )
        .await
}

async fn patch(
    h: &Hnsd,
    kind: Kind,
    id: &str,
    doc: &Value,
) -> Result<Value, hns_client::ClientError> {
    h.client()
        .call(
            Method::PATCH,
            &format!("/{kind}/{id}"),
            Some(doc.to_string().into_bytes()),
        )
        .await
}

async fn network(h: &Hnsd) -> String {
    let n = post(
        h,
        Kind::Network,
        &l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1"),
    )
    .await
    .unwrap();
    n["ID"].as_str().unwrap().to_string()
}

async fn endpoint(h: &Hnsd, net: &str, extra: Value) -> Value {
    let mut doc = json!({"HostComputeNetwork": net});
    for (k, v) in extra.as_object().unwrap() {
        doc[k] = v.clone();
    }
    post(h, Kind::Endpoint, &doc).await.unwrap()
}

fn code(r: Result<Value, hns_client::ClientError>) -> HResult {
    r.expect_err("hnsd must refuse this")
        .code()
        .expect("an HNS error record")
}

/// Drops what hnsd adds (ID; the fields Go always marshals) for comparing with a posted doc.
fn without(mut v: Value, keys: &[&str]) -> Value {
    for k in keys {
        v.as_object_mut().unwrap().remove(*k);
    }
    v
}

#[tokio::test]
async fn reference_examples_come_back_as_posted() {
    let h = Hnsd::start(Profile::Unrestricted).await;
    // CreateTestOverlayNetwork
    let overlay = json!({"Name":"overlay","Type":"Overlay","MacPool":{"Ranges":[{"StartMacAddress":"00-15-5D-52-C0-00","EndMacAddress":"00-15-5D-52-CF-FF"}]},
        "Dns":{},"Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"192.168.100.0/24",
        "Policies":[{"Type":"VSID","Settings":{"IsolationId":5000}}],
        "Routes":[{"NextHop":"192.168.100.1","DestinationPrefix":"0.0.0.0/0"}]}]}],
        "Flags":8,"Health":{"Extra":{}},"SchemaVersion":{"Major":2,"Minor":0}});
    let net = post(&h, Kind::Network, &overlay).await.unwrap();
    let net_id = net["ID"].as_str().unwrap().to_string();
    // HNS generates the Overlay network's DR MAC and reports it as a policy.
    assert_eq!(without(net.clone(), &["ID", "Policies"]), overlay);
    assert_eq!(net["Policies"].as_array().map(Vec::len), Some(1));
    assert_eq!(net["Policies"][0]["Type"], "DrMacAddress");
    assert!(
        net["Policies"][0]["Settings"]["Address"]
            .as_str()
            .is_some_and(|m| m.starts_with("00-15-5D-D0-")),
        "{net}"
    );
    let got = h
        .client()
        .call(Method::GET, &format!("/networks/{net_id}"), None)
        .await
        .unwrap();
    assert_eq!(got, net, "query returns what create returned");

    // RemoteSubnetRoute through AddPolicy
    let rsr = json!({"ResourceType":"Policy","RequestType":"Add","Settings":{"Policies":[{"Type":"RemoteSubnetRoute",
        "Settings":{"DestinationPrefix":"192.168.2.0/24","IsolationId":5000,"ProviderAddress":"1.1.1.1",
        "DistributedRouterMacAddress":"00-12-34-56-78-9a"}}]}});
    let net = patch(&h, Kind::Network, &net_id, &rsr).await.unwrap();
    assert_eq!(net["Policies"][1]["Settings"]["ProviderAddress"], "1.1.1.1");
    assert_eq!(
        net["Policies"][1]["Settings"]["DistributedRouterMacAddress"],
        "00-12-34-56-78-9A"
    );

    // winkernel's remote endpoint; and two local endpoints with the IDs the LB examples name
    let remote = json!({"HostComputeNetwork":net_id,"Policies":[{"Type":"ProviderAddress","Settings":{"ProviderAddress":"10.0.0.5"}}],
        "IpConfigurations":[{"IpAddress":"10.244.2.7"}],"Dns":{},"MacAddress":"02-11-0A-F4-02-07","Flags":1,
        "Health":{"Extra":{}},"SchemaVersion":{"Major":2,"Minor":0}});
    let back = post(&h, Kind::Endpoint, &remote).await.unwrap();
    assert_eq!(without(back, &["ID"]), remote);
    for (id, ip) in [(EP, "192.168.100.10"), (EP2, "192.168.100.11")] {
        let ep =
            json!({"ID": id, "HostComputeNetwork": net_id, "IpConfigurations":[{"IpAddress": ip}]});
        assert_eq!(post(&h, Kind::Endpoint, &ep).await.unwrap()["ID"], id);
    }

    let lbs = [
        json!({"HostComputeEndpoints":[EP],"SourceVIP":"10.0.0.1","FrontendVIPs":["1.1.1.2","1.1.1.3"],
            "PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":8090}],"SchemaVersion":{"Major":2,"Minor":0}}),
        json!({"HostComputeEndpoints":[EP],"SourceVIP":"10.0.0.1","FrontendVIPs":["1.1.1.2","1.1.1.3"],
            "PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":80,"Flags":8}],"SchemaVersion":{"Major":2,"Minor":0},"Flags":1}),
        json!({"HostComputeEndpoints":[EP,EP2],"FrontendVIPs":["10.96.0.10"],
            "PortMappings":[{"Protocol":17,"InternalPort":53,"ExternalPort":53,"DistributionType":2}],"SchemaVersion":{"Major":2,"Minor":0},"Flags":1}),
        json!({"HostComputeEndpoints":[EP],"SourceVIP":"10.244.1.2",
            "PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":30080,"Flags":18}],"SchemaVersion":{"Major":2,"Minor":0}}),
    ];
    for lb in &lbs {
        let back = post(&h, Kind::LoadBalancer, lb).await.unwrap();
        assert_eq!(&without(back, &["ID"]), lb);
    }

    let route = json!({"HostComputeEndpoints":[EP],"Setting":[{"DestinationPrefix":"169.254.169.254/24","NextHop":"127.10.0.34"}],
        "SchemaVersion":{"Major":2,"Minor":0}});
    assert_eq!(
        without(post(&h, Kind::Route, &route).await.unwrap(), &["ID"]),
        route
    );

    // HcnCreateAcls, applied to an endpoint
    let acl = json!({"ResourceType":"Policy","RequestType":"Add","Settings":{"Policies":[{"Type":"ACL","Settings":{"Protocols":"6","Action":"Allow","Direction":"In","LocalAddresses":"192.168.100.0/24,10.0.0.21",
        "RemoteAddresses":"192.168.100.0/24,10.0.0.21","LocalPorts":"80,8080","RemotePorts":"80,8080","RuleType":"Switch","Priority":200}}]}});
    let ep = patch(&h, Kind::Endpoint, EP, &acl).await.unwrap();
    assert_eq!(ep["Policies"][0], acl["Settings"]["Policies"][0]);
}

#[tokio::test]
async fn hns_assigns_ids_macs_and_addresses() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    let a: Endpoint = serde_json::from_value(endpoint(&h, &net, json!({})).await).unwrap();
    let b: Endpoint = serde_json::from_value(endpoint(&h, &net, json!({})).await).unwrap();
    assert!(!a.id.is_nil() && a.id != b.id);
    // .1 is the gateway, which HNS reserves.
    assert_eq!(a.ips().next().unwrap().to_string(), "10.244.1.2");
    assert_eq!(b.ips().next().unwrap().to_string(), "10.244.1.3");
    assert_eq!(a.ip_configurations[0].prefix_length, 24);
    let (ma, mb) = (a.mac_address.unwrap(), b.mac_address.unwrap());
    assert_ne!(ma, mb);
    assert_eq!(&ma.0[..3], &[0x00, 0x15, 0x5D], "from Hyper-V's MAC prefix");
}

#[tokio::test]
async fn mac_comes_from_the_networks_pool() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let mut doc = l2bridge("pool", "10.0.0.0/24", "10.0.0.1");
    doc["MacPool"] = json!({"Ranges":[{"StartMacAddress":"00-15-5D-AA-00-00","EndMacAddress":"00-15-5D-AA-00-01"}]});
    let net = post(&h, Kind::Network, &doc).await.unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        endpoint(&h, &net, json!({})).await["MacAddress"],
        "00-15-5D-AA-00-00"
    );
    assert_eq!(
        endpoint(&h, &net, json!({})).await["MacAddress"],
        "00-15-5D-AA-00-01"
    );
    let before = dump(&h.client()).await;
    let r = post(&h, Kind::Endpoint, &json!({"HostComputeNetwork": net})).await;
    assert_eq!(
        code(r),
        HResult::HCN_E_ADDR_INVALID_OR_RESERVED,
        "pool exhausted"
    );
    assert_eq!(dump(&h.client()).await, before);
}

#[tokio::test]
async fn duplicate_ips_are_refused_but_local_and_remote_may_share() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    let ip = json!({"IpConfigurations":[{"IpAddress":"10.244.1.9"}]});
    endpoint(&h, &net, ip.clone()).await;
    let mut dup = ip.clone();
    dup["HostComputeNetwork"] = json!(net);
    let err = post(&h, Kind::Endpoint, &dup).await.unwrap_err();
    assert_eq!(err.code(), Some(HResult::HCN_E_ADDR_INVALID_OR_RESERVED));
    assert!(err.to_string().contains("10.244.1.9"), "{err}");
    // A remote endpoint with a local endpoint's IP exists on Windows (kubernetes#131138).
    let mut remote = dup.clone();
    remote["Flags"] = json!(1);
    post(&h, Kind::Endpoint, &remote)
        .await
        .expect("remote endpoint may share a local IP");
    assert_eq!(
        code(post(&h, Kind::Endpoint, &remote).await),
        HResult::HCN_E_ADDR_INVALID_OR_RESERVED
    );
    // Outside every subnet, or the gateway: refused.
    dup["IpConfigurations"] = json!([{"IpAddress":"10.9.9.9"}]);
    assert_eq!(
        code(post(&h, Kind::Endpoint, &dup).await),
        HResult::HCN_E_INVALID_IP
    );
    dup["IpConfigurations"] = json!([{"IpAddress":"10.244.1.1"}]);
    assert_eq!(
        code(post(&h, Kind::Endpoint, &dup).await),
        HResult::HCN_E_ADDR_INVALID_OR_RESERVED
    );
}

#[tokio::test]
async fn filters_by_id_name_and_network() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let c = h.client();
    let net1 = network(&h).await;
    let net2 = post(
        &h,
        Kind::Network,
        &l2bridge("other", "10.0.0.0/24", "10.0.0.1"),
    )
    .await
    .unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let e1 = endpoint(&h, &net1, json!({"Name":"a"})).await;
    endpoint(&h, &net1, json!({"Name":"b"})).await;
    endpoint(&h, &net2, json!({"Name":"c"})).await;
    assert_eq!(
        c.get_network_by_name("CBR0")
            .await
            .unwrap()
            .unwrap()
            .id
            .to_string(),
        net1
    );
    assert!(c.get_network_by_name("nope").await.unwrap().is_none());
    assert_eq!(
        c.list_endpoints_of_network(net1.parse().unwrap())
            .await
            .unwrap()
            .len(),
        2
    );
    let by_net = c
        .list_raw(Kind::Endpoint, Some(&json!({"HostComputeNetwork": net2})))
        .await
        .unwrap();
    assert_eq!(by_net.len(), 1);
    assert_eq!(by_net[0]["Name"], "c");
    let id = e1["ID"].as_str().unwrap().to_lowercase();
    let by_id = c
        .list_raw(Kind::Endpoint, Some(&json!({"id": id})))
        .await
        .unwrap();
    assert_eq!(by_id, vec![e1]);
    let bad = c.call(Method::GET, "/endpoints?filter=%7Bnope", None).await;
    assert_eq!(code(bad), HResult::E_INVALIDARG);
}

#[tokio::test]
async fn endpoint_policies_are_added_removed_and_updated() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    let id = endpoint(&h, &net, json!({})).await["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let nat = json!({"Type":"OutBoundNAT","Settings":{"Exceptions":["10.244.0.0/16"]}});
    let req = |rt: &str, p: &Value| json!({"ResourceType":"Policy","RequestType":rt,"Settings":{"Policies":[p]}});
    let ep = patch(&h, Kind::Endpoint, &id, &req("Add", &nat))
        .await
        .unwrap();
    assert_eq!(ep["Policies"], json!([nat]));
    assert_eq!(
        code(patch(&h, Kind::Endpoint, &id, &req("Add", &nat)).await),
        HResult::HCN_E_POLICY_ALREADY_EXISTS
    );
    let nat2 = json!({"Type":"OutBoundNAT","Settings":{"Exceptions":["10.0.0.0/8"]}});
    let ep = patch(&h, Kind::Endpoint, &id, &req("Update", &nat2))
        .await
        .unwrap();
    assert_eq!(ep["Policies"], json!([nat2]));
    let ep = patch(&h, Kind::Endpoint, &id, &req("Remove", &nat2))
        .await
        .unwrap();
    assert!(ep.get("Policies").is_none());
    assert_eq!(
        code(patch(&h, Kind::Endpoint, &id, &req("Remove", &nat2)).await),
        HResult::HCN_E_POLICY_NOT_FOUND
    );
}

#[tokio::test]
async fn namespaces_list_their_endpoints() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let c = h.client();
    let net = network(&h).await;
    let ep: Endpoint = serde_json::from_value(endpoint(&h, &net, json!({})).await).unwrap();
    let ns = c.create_namespace(&Default::default()).await.unwrap();
    assert!(!ns.id.is_nil() && ns.namespace_id > 0);
    let ns = c.add_namespace_endpoint(ns.id, ep.id).await.unwrap();
    assert_eq!(ns.endpoint_ids().collect::<Vec<_>>(), vec![ep.id]);
    assert_eq!(
        c.get_endpoint_by_id(ep.id)
            .await
            .unwrap()
            .host_compute_namespace,
        ns.id
    );
    let again = c.add_namespace_endpoint(ns.id, ep.id).await.unwrap_err();
    assert_eq!(
        again.code(),
        Some(HResult::HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS)
    );

    // In use: neither the endpoint nor the namespace nor the network can go, and nothing changes.
    let before = dump(&c).await;
    assert_eq!(
        c.delete_endpoint(ep.id).await.unwrap_err().code(),
        Some(HResult::HCN_E_ENTITY_HAS_REFERENCES)
    );
    assert_eq!(
        c.delete_namespace(ns.id).await.unwrap_err().code(),
        Some(HResult::HCN_E_ENTITY_HAS_REFERENCES)
    );
    assert_eq!(
        c.delete_network(ep.host_compute_network)
            .await
            .unwrap_err()
            .code(),
        Some(HResult::HCN_E_ENTITY_HAS_REFERENCES)
    );
    assert_eq!(dump(&c).await, before);

    c.remove_namespace_endpoint(ns.id, ep.id).await.unwrap();
    c.delete_endpoint(ep.id).await.unwrap();
    c.delete_namespace(ns.id).await.unwrap();
    c.delete_network(ep.host_compute_network).await.unwrap();
    assert!(dump(&c).await.iter().all(Vec::is_empty));
    assert!(
        c.get_endpoint_by_id(ep.id)
            .await
            .unwrap_err()
            .is_not_found()
    );
}

#[tokio::test]
async fn remote_endpoints_cannot_join_a_namespace() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let c = h.client();
    let net = network(&h).await;
    let ep = endpoint(
        &h,
        &net,
        json!({"Flags":1,"IpConfigurations":[{"IpAddress":"10.244.2.5"}]}),
    )
    .await;
    let ns = c.create_namespace(&Default::default()).await.unwrap();
    let err = c
        .add_namespace_endpoint(ns.id, ep["ID"].as_str().unwrap().parse().unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(HResult::HCN_E_INVALID_REMOTE_ENDPOINT_OPERATION)
    );
}

async fn backends(h: &Hnsd, n: usize) -> Vec<String> {
    let mut doc = l2bridge("big", "10.1.0.0/16", "10.1.0.1");
    doc["Name"] = json!(format!("big{n}"));
    let net = post(h, Kind::Network, &doc).await.unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(
            endpoint(h, &net, json!({})).await["ID"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    ids
}

fn lb(vip: &str, port: u16, eps: &[String]) -> Value {
    json!({"HostComputeEndpoints": eps, "FrontendVIPs": [vip],
        "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": port}]})
}

#[tokio::test]
async fn load_balancer_backend_limit_follows_the_profile() {
    for (profile, refused) in [(Profile::Ws2022, true), (Profile::Unrestricted, false)] {
        let h = Hnsd::start(profile).await;
        let eps = backends(&h, 65).await;
        post(&h, Kind::LoadBalancer, &lb("10.96.0.1", 80, &eps[..64]))
            .await
            .expect("64 backends work everywhere");
        let r = post(&h, Kind::LoadBalancer, &lb("10.96.0.2", 80, &eps)).await;
        if refused {
            let err = r.unwrap_err();
            assert_eq!(err.code(), Some(HResult::E_INVALIDARG));
            assert!(
                err.to_string().contains("invalid number of destinations"),
                "{err}"
            );
        } else {
            r.expect("unrestricted lifts the limit");
        }
    }
}

#[tokio::test]
async fn load_balancer_rules() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let eps = backends(&h, 2).await;
    post(&h, Kind::LoadBalancer, &lb("10.96.0.1", 80, &eps))
        .await
        .unwrap();
    let before = dump(&h.client()).await;
    assert_eq!(
        code(post(&h, Kind::LoadBalancer, &lb("10.96.0.1", 80, &eps[..1])).await),
        HResult::HCN_E_PORT_ALREADY_EXISTS
    );
    assert_eq!(
        code(post(&h, Kind::LoadBalancer, &lb("10.96.0.3", 80, &[])).await),
        HResult::E_INVALIDARG,
        "no backends"
    );
    let ghost = vec!["0D4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D".to_string()];
    assert_eq!(
        code(post(&h, Kind::LoadBalancer, &lb("10.96.0.4", 80, &ghost)).await),
        HResult::HCN_E_ENDPOINT_NOT_FOUND
    );
    assert_eq!(dump(&h.client()).await, before);
    // Same VIP, other port or protocol: fine. NodePort style (no VIP) claims every address.
    post(&h, Kind::LoadBalancer, &lb("10.96.0.1", 81, &eps))
        .await
        .unwrap();
    let node_port = json!({"HostComputeEndpoints": eps, "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 30080, "Flags": 18}]});
    post(&h, Kind::LoadBalancer, &node_port).await.unwrap();
    assert_eq!(
        code(post(&h, Kind::LoadBalancer, &node_port).await),
        HResult::HCN_E_PORT_ALREADY_EXISTS
    );
}

/// hnslib's gate (15.5 to 15.x, or 16.0 and later): refused on WS2025's HNS 15.4 as on older
/// builds, with the E_NOTIMPL kube-proxy falls back on; done under `unrestricted`.
#[tokio::test]
async fn modify_load_balancer_follows_hnslibs_gate() {
    for (profile, works) in [
        (Profile::Ws2022, false),
        (Profile::Ws2025, false),
        (Profile::Unrestricted, true),
    ] {
        let h = Hnsd::start(profile).await;
        let c = h.client();
        let eps = backends(&h, 3).await;
        let created: LoadBalancer = serde_json::from_value(
            post(&h, Kind::LoadBalancer, &lb("10.96.0.1", 80, &eps[..1]))
                .await
                .unwrap(),
        )
        .unwrap();
        let mut wanted = created.clone();
        wanted.host_compute_endpoints = eps.iter().map(|e| e.parse().unwrap()).collect();
        let r = c.update_load_balancer(created.id, &wanted).await;
        if works {
            assert_eq!(r.unwrap().host_compute_endpoints.len(), 3);
            assert_eq!(c.get_load_balancer_by_id(created.id).await.unwrap(), wanted);
        } else {
            assert_eq!(
                r.unwrap_err().code(),
                Some(HResult::E_NOTIMPL),
                "kube-proxy's IsNotImplemented"
            );
        }
    }
}

#[tokio::test]
async fn deleting_an_endpoint_takes_it_out_of_load_balancers() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let c = h.client();
    let eps = backends(&h, 2).await;
    let created = post(&h, Kind::LoadBalancer, &lb("10.96.0.1", 80, &eps))
        .await
        .unwrap();
    c.delete_endpoint(eps[0].parse().unwrap()).await.unwrap();
    let lb = c
        .get_load_balancer_by_id(created["ID"].as_str().unwrap().parse().unwrap())
        .await
        .unwrap();
    assert_eq!(lb.host_compute_endpoints, vec![eps[1].parse().unwrap()]);
}

#[tokio::test]
async fn profile_gated_load_balancer_features_are_refused() {
    let h = Hnsd::start(Profile::Ws2019).await;
    let eps = backends(&h, 1).await;
    let mut affinity = lb("10.96.0.1", 80, &eps);
    affinity["PortMappings"][0]["DistributionType"] = json!(2);
    let err = post(&h, Kind::LoadBalancer, &affinity).await.unwrap_err();
    assert!(err.to_string().contains("session affinity"), "{err}");
    let v6 = json!({"HostComputeEndpoints": eps, "FrontendVIPs": ["fd00::10"], "Flags": 2,
        "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}]});
    assert_eq!(
        code(post(&h, Kind::LoadBalancer, &v6).await),
        HResult::E_INVALIDARG
    );
}

#[tokio::test]
async fn versions_and_features_per_profile() {
    for (profile, major, affinity, modify) in [
        (Profile::Ws2019, 9, false, false),
        (Profile::Ws2022, 12, true, false),
        (Profile::Ws2025, 15, true, false),
        (Profile::Unrestricted, 16, true, true),
    ] {
        let h = Hnsd::start(profile).await;
        let c = h.client();
        assert_eq!(c.get_version().await.unwrap().major, major);
        let f = c.get_supported_features().await.unwrap();
        assert!(f.api.v2 && f.dsr && f.remote_subnet, "{profile}: {f:?}");
        assert_eq!(f.session_affinity, affinity, "{profile}");
        assert_eq!(f.modify_loadbalancer, modify, "{profile}");
    }
}

#[tokio::test]
async fn overlay_rules() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let mut doc = json!({"Name":"vxlan0","Type":"Overlay","Ipams":[{"Subnets":[{"IpAddressPrefix":"10.244.1.0/24",
        "Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]}]}]});
    assert_eq!(
        code(post(&h, Kind::Network, &doc).await),
        HResult::HCN_E_INVALID_SUBNET,
        "no VSID"
    );
    doc["Ipams"][0]["Subnets"][0]["Policies"] =
        json!([{"Type":"VSID","Settings":{"IsolationId":4095}}]);
    assert_eq!(
        code(post(&h, Kind::Network, &doc).await),
        HResult::HCN_E_INVALID_SUBNET,
        "VSID < 4096"
    );
    doc["Ipams"][0]["Subnets"][0]["Policies"] =
        json!([{"Type":"VSID","Settings":{"IsolationId":4096}}]);
    post(&h, Kind::Network, &doc).await.unwrap();
    assert_eq!(
        code(post(&h, Kind::Network, &doc).await),
        HResult::HCN_E_NETWORK_ALREADY_EXISTS
    );
    let l2 = post(
        &h,
        Kind::Network,
        &l2bridge("cbr0", "10.0.0.0/24", "10.0.0.1"),
    )
    .await
    .unwrap();
    let rsr = json!({"ResourceType":"Policy","RequestType":"Add","Settings":{"Policies":[{"Type":"RemoteSubnetRoute",
        "Settings":{"DestinationPrefix":"10.244.2.0/24","IsolationId":4096,"ProviderAddress":"192.168.0.12","DistributedRouterMacAddress":"02-00-00-00-00-01"}}]}});
    assert_eq!(
        code(patch(&h, Kind::Network, l2["ID"].as_str().unwrap(), &rsr).await),
        HResult::HCN_E_INVALID_POLICY
    );
}

#[tokio::test]
async fn bad_input_gets_an_error_record_naming_the_field() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    let before = dump(&h.client()).await;
    let cases = [
        (
            Kind::Network,
            json!({"Name":"x","Ipams":[{"Subnets":[{"IpAddressPrefix":"10.0.0.0/40"}]}]}),
            "Ipams[0].Subnets[0].IpAddressPrefix",
        ),
        (Kind::Network, json!({"Name":"x","Type":"Bridge"}), "Type"),
        (
            Kind::Endpoint,
            json!({"HostComputeNetwork": net, "MacAddress": "zz"}),
            "MacAddress",
        ),
        (
            Kind::Endpoint,
            json!({"HostComputeNetwork": "nope"}),
            "HostComputeNetwork",
        ),
        (
            Kind::Endpoint,
            json!({"HostComputeNetwork": net, "Policies":[{"Type":"Warp","Settings":{}}]}),
            "Policies[0].Type",
        ),
        (
            Kind::LoadBalancer,
            json!({"PortMappings":[{"Protocol":6,"InternalPort":-1}]}),
            "PortMappings[0].InternalPort",
        ),
        (
            Kind::LoadBalancer,
            json!({"FrontendVIPs":["10.96.0.300"]}),
            "FrontendVIPs[0]",
        ),
    ];
    for (kind, doc, field) in cases {
        let err = post(&h, kind, &doc).await.unwrap_err();
        let hns_client::ClientError::Hns { status, error, .. } = &err else {
            panic!("{err}")
        };
        assert!((400..500).contains(status), "{field}: status {status}");
        assert!(error.contains(field), "error names {field}: {error}");
    }
    let raw = h
        .client()
        .call(Method::POST, "/networks", Some(b"{not json".to_vec()))
        .await;
    assert_eq!(code(raw), HResult::HCN_E_INVALID_JSON);
    let bad_id = h.client().call(Method::GET, "/networks/123", None).await;
    assert_eq!(code(bad_id), HResult::E_INVALIDARG);
    let bad_kind = h.client().call(Method::GET, "/widgets", None).await;
    assert_eq!(code(bad_kind), HResult::ERROR_NOT_FOUND);
    assert_eq!(
        dump(&h.client()).await,
        before,
        "refused calls change nothing"
    );
}

#[tokio::test]
async fn a_vnic_no_interface_could_have_is_refused_naming_the_field() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    let ep_id = endpoint(&h, &net, json!({}))
        .await
        .get("ID")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let before = dump(&h.client()).await;
    let overhead = |o: u64| json!([{"Type": "EncapOverhead", "Settings": {"Overhead": o}}]);
    let endpoints = [
        (
            json!({"MacAddress": "FF-FF-FF-FF-FF-FF"}),
            "MacAddress",
            "broadcast",
        ),
        (
            json!({"MacAddress": "01-00-5E-00-00-01"}),
            "MacAddress",
            "multicast",
        ),
        (
            json!({"MacAddress": "33-33-00-00-00-01"}),
            "MacAddress",
            "multicast",
        ),
        (
            json!({"MacAddress": "00-00-00-00-00-00"}),
            "MacAddress",
            "zero",
        ),
        (
            json!({"LinuxInterfaceName": "../x"}),
            "LinuxInterfaceName",
            "../x",
        ),
        (
            json!({"LinuxInterfaceName": "a b"}),
            "LinuxInterfaceName",
            "a b",
        ),
        (
            json!({"LinuxInterfaceName": "eth0:1"}),
            "LinuxInterfaceName",
            "eth0:1",
        ),
        (
            json!({"LinuxInterfaceName": ".."}),
            "LinuxInterfaceName",
            "..",
        ),
        (
            json!({"LinuxInterfaceName": "averyveryverylongname"}),
            "LinuxInterfaceName",
            "15",
        ),
        (
            json!({"Policies": overhead(1500)}),
            "Policies[0].Settings.Overhead",
            "MTU of 0",
        ),
        (
            json!({"Policies": overhead(1433)}),
            "Policies[0].Settings.Overhead",
            "at least 68",
        ),
        (
            json!({"Policies": overhead(65535)}),
            "Policies[0].Settings.Overhead",
            "MTU of 0",
        ),
    ];
    for (extra, field, says) in endpoints {
        let mut doc = json!({"HostComputeNetwork": net});
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        let err = post(&h, Kind::Endpoint, &doc).await.unwrap_err();
        assert_eq!(err.code(), Some(HResult::E_INVALIDARG), "{doc}: {err}");
        let text = err.to_string();
        assert!(text.contains(field) && text.contains(says), "{doc}: {text}");
    }
    // The same overhead added later, by ModifyEndpoint.
    let add = json!({"ResourceType": "Policy", "RequestType": "Add",
        "Settings": {"Policies": overhead(1500)}});
    let err = patch(&h, Kind::Endpoint, &ep_id, &add).await.unwrap_err();
    assert_eq!(err.code(), Some(HResult::E_INVALIDARG), "{err}");
    assert!(err.to_string().contains("Overhead"), "{err}");
    let networks = [
        (
            json!({"Name": "m1", "Type": "L2Bridge", "MacPool": {"Ranges": [{"StartMacAddress": "01-00-5E-00-00-00", "EndMacAddress": "01-00-5E-00-00-FF"}]}}),
            "MacPool.Ranges[0].StartMacAddress",
        ),
        (
            json!({"Name": "m2", "Type": "L2Bridge", "MacPool": {"Ranges": [{"StartMacAddress": "00-15-5D-00-00-00", "EndMacAddress": "FF-FF-FF-FF-FF-FF"}]}}),
            "MacPool.Ranges[0].EndMacAddress",
        ),
        (
            json!({"Name": "m3", "Type": "L2Bridge", "MacPool": {"Ranges": [{"StartMacAddress": "00-15-5D-00-00-00", "EndMacAddress": "02-15-5D-00-00-00"}]}}),
            "MacPool.Ranges[0]",
        ),
        (
            json!({"Name": "m5", "Type": "Overlay", "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": "10.9.0.0/24",
                "Routes": [{"NextHop": "10.9.0.1", "DestinationPrefix": "0.0.0.0/0"}],
                "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}]}]}],
                "Policies": [{"Type": "DrMacAddress", "Settings": {"Address": "FF-FF-FF-FF-FF-FF"}}]}),
            "Policies[0].Settings.Address",
        ),
    ];
    for (doc, field) in networks {
        let err = post(&h, Kind::Network, &doc).await.unwrap_err();
        assert_eq!(err.code(), Some(HResult::E_INVALIDARG), "{doc}: {err}");
        assert!(err.to_string().contains(field), "{doc}: {err}");
    }
    assert_eq!(
        dump(&h.client()).await,
        before,
        "refused calls change nothing"
    );
    // What Linux and Windows take still passes.
    let ok = endpoint(
        &h,
        &net,
        json!({"MacAddress": "02-11-0A-F4-01-07", "LinuxInterfaceName": "eth1",
            "Policies": overhead(50)}),
    )
    .await;
    assert_eq!(ok["LinuxInterfaceName"], "eth1");
}

#[tokio::test]
async fn an_acl_with_a_bad_list_is_refused_naming_the_field() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    let id = endpoint(&h, &net, json!({})).await["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let before = dump(&h.client()).await;
    for (field, value) in [
        ("RemoteAddresses", "10.244.2.0/24,10.244.3.0/33"),
        ("LocalAddresses", "10.244.1.5,not-an-address"),
        ("RemotePorts", "53,70000"),
        ("LocalPorts", "8080-80"),
    ] {
        let mut settings =
            json!({"Action":"Block","Direction":"Out","Protocols":"17","Priority":300});
        settings[field] = json!(value);
        let acl = json!({"Type":"ACL","Settings":settings});
        let created = post(
            &h,
            Kind::Endpoint,
            &json!({"HostComputeNetwork": net, "Policies":[acl]}),
        )
        .await;
        let added = patch(
            &h,
            Kind::Endpoint,
            &id,
            &json!({"ResourceType":"Policy","RequestType":"Add","Settings":{"Policies":[acl]}}),
        )
        .await;
        for (call, r) in [("create", created), ("add policy", added)] {
            let err = r.expect_err("a Block ACL with a bad list must be refused, not widened");
            let hns_client::ClientError::Hns { error, .. } = &err else {
                panic!("{call} {field}: {err}")
            };
            // A word is read as a set ID, which the network does not have: HNS's
            // invalid-policy error; a malformed number is a bad argument.
            let want = if value.contains("not-an-address") {
                HResult::HCN_E_INVALID_POLICY
            } else {
                HResult::E_INVALIDARG
            };
            assert_eq!(err.code(), Some(want), "{call} {field}: {err}");
            assert!(
                error.contains(&format!("Policies[0].Settings.{field}")),
                "{call}: the error names {field}: {error}"
            );
        }
    }
    assert_eq!(
        dump(&h.client()).await,
        before,
        "refused ACLs change nothing"
    );
}

#[tokio::test]
async fn objects_survive_a_restart() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    endpoint(&h, &net, json!({"Name": "kept"})).await;
    let before = dump(&h.client()).await;
    let dir = h.stop().await;
    let h = Hnsd::start_in(dir, Profile::Ws2022).await;
    assert_eq!(dump(&h.client()).await, before);
    // Indexes are rebuilt too: the next address is not a duplicate.
    let next = endpoint(&h, &net, json!({})).await;
    assert_eq!(next["IpConfigurations"][0]["IpAddress"], "10.244.1.3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_at_once_lose_and_duplicate_nothing() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net: Network = serde_json::from_value(
        post(
            &h,
            Kind::Network,
            &l2bridge("cbr0", "10.244.0.0/16", "10.244.0.1"),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    let mut tasks = Vec::new();
    for t in 0..16 {
        let client = h.client();
        let net = net.id;
        tasks.push(tokio::spawn(async move {
            let mut made = Vec::new();
            for i in 0..25 {
                let ep = Endpoint {
                    name: format!("t{t}-{i}"),
                    host_compute_network: net,
                    ..Default::default()
                };
                made.push(client.create_endpoint(&ep).await.expect("create"));
            }
            made
        }));
    }
    let mut made = Vec::new();
    for t in tasks {
        made.extend(t.await.unwrap());
    }
    let listed = h.client().list_endpoints().await.unwrap();
    assert_eq!(made.len(), 400);
    assert_eq!(listed.len(), 400, "nothing lost or duplicated");
    let mut ips: Vec<_> = listed.iter().flat_map(|e| e.ips()).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 400, "no address handed out twice");
    let mut macs: Vec<_> = listed.iter().filter_map(|e| e.mac_address).collect();
    macs.sort();
    macs.dedup();
    assert_eq!(macs.len(), 400, "no MAC handed out twice");
}

#[tokio::test]
async fn a_second_hnsd_on_a_live_socket_is_refused_and_a_stale_one_replaced() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let err = hns::server::bind(&h.socket()).unwrap_err();
    assert!(err.to_string().contains("already serving"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    hns::server::bind(&stale).expect("a stale socket is replaced");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&stale).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[tokio::test]
async fn resolve_names_the_endpoint_and_says_when_no_pod_has_a_dns_client() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    endpoint(&h, &net, json!({"Name": "pa_cbr0"})).await;
    let ask = |endpoint: &str| {
        hns_client::ResolveRequest::new(endpoint, "web", "A").expect("a valid request")
    };
    // Found (by the name the CNI plugin gives it), but this hnsd carries no packets.
    let e = h
        .client()
        .resolve(&ask("pa"))
        .await
        .expect_err("no data plane");
    assert!(e.to_string().contains("without a data plane"), "{e}");
    let e = h
        .client()
        .resolve(&ask("nobody"))
        .await
        .expect_err("no such endpoint");
    assert!(e.to_string().contains("Endpoint:"), "{e}");
    let e = h
        .client()
        .call(
            Method::POST,
            "/resolve",
            Some(br#"{"Endpoint":"pa","Name":"web","Type":"MX"}"#.to_vec()),
        )
        .await
        .expect_err("an unsupported type");
    assert_eq!(e.code(), Some(HResult::E_INVALIDARG), "{e}");
    assert!(e.to_string().contains("Type:"), "{e}");
}

#[tokio::test]
async fn a_body_that_is_not_a_json_object_is_refused() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    let before = dump(&h.client()).await;
    for kind in Kind::ALL {
        for body in ["[]", "[{\"Name\":\"x\"}]", "null", "7", "\"cbr0\"", "true"] {
            let err = h
                .client()
                .call(Method::POST, &format!("/{kind}"), Some(body.into()))
                .await
                .expect_err("a document that is not an object is refused");
            let hns_client::ClientError::Hns { status, error, .. } = &err else {
                panic!("{err}")
            };
            assert_eq!(*status, 400, "POST /{kind} {body}: {error}");
            assert_eq!(
                err.code(),
                Some(HResult::E_INVALIDARG),
                "POST /{kind} {body}"
            );
            assert!(error.contains("JSON object"), "says what to send: {error}");
        }
    }
    let patched = h
        .client()
        .call(
            Method::PATCH,
            &format!("/networks/{net}"),
            Some(b"[]".to_vec()),
        )
        .await;
    assert_eq!(code(patched), HResult::E_INVALIDARG);
    assert_eq!(dump(&h.client()).await, before, "nothing was made");
}

#[tokio::test]
async fn names_longer_than_windows_allows_are_refused() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = network(&h).await;
    let before = dump(&h.client()).await;
    // 256 UTF-16 units is the most an interface alias holds; a name of 2 MB (the most a body
    // may carry) is refused too.
    for name in ["n".repeat(257), "é".repeat(257), "x".repeat(2_000_000)] {
        let doc = json!({"Name": name, "Type": "NAT"});
        let err = post(&h, Kind::Network, &doc).await.unwrap_err();
        assert_eq!(err.code(), Some(HResult::E_INVALIDARG), "network name");
        assert!(err.to_string().contains("Name"), "names the field: {err}");
        let doc = json!({"Name": name, "HostComputeNetwork": net});
        let err = post(&h, Kind::Endpoint, &doc).await.unwrap_err();
        assert_eq!(err.code(), Some(HResult::E_INVALIDARG), "endpoint name");
    }
    assert_eq!(dump(&h.client()).await, before, "nothing was made");
    let longest = post(
        &h,
        Kind::Network,
        &json!({"Name": "n".repeat(256), "Type": "NAT"}),
    )
    .await
    .expect("a name of 256 characters is taken");
    assert_eq!(longest["Name"].as_str().map(str::len), Some(256));
}
