//! kube-proxy's own winkernel tests (`pkg/proxy/winkernel/proxier_test.go`, `hns_test.go`),
//! restated through winnet's interfaces: `proxy::Proxy` on manifests against a real hnsd over its
//! socket. Where upstream asserts on its fake's counters (`LBID-1`, `EPID-1`, refCounts), these
//! assert the observable equivalent: the same HNS ID kept, one remote endpoint per address.
#![allow(non_snake_case)]

mod common;

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hcn::{Endpoint, Guid, LoadBalancer};
use hns::Profile;
use hns_client::transport::Exchange;
use hns_client::{Client, Method, Transport, UnixSocket};
use proxy::{Config, FeatureGates, Proxy, Snapshot, SourceConfig};
use serde_json::{Value, json};

const NODE: &str = "test-hostname";
const LOCAL: &str = "10.244.1.10";
const REMOTE: &str = "10.244.2.5";

/// A node: hnsd with network `cbr0` (L2Bridge dual-stack, or Overlay with a RemoteSubnetRoute
/// to 10.244.2.0/24), the root endpoint `cbr0` (upstream's `EP-GW`), and one local pod
/// endpoint made as the CNI makes it.
struct Node {
    hnsd: testkit::hnsd::Hnsd,
    client: Client,
    local: Guid,
    root: Guid,
}

async fn node(overlay: bool) -> Node {
    node_on(Profile::Ws2022, overlay).await
}

async fn node_on(profile: Profile, overlay: bool) -> Node {
    let (hnsd, net) = common::hnsd_with_cbr0(profile, overlay).await;
    let client = hnsd.client();
    let local = common::endpoint(&client, &net, "pod-a", &[(LOCAL, 24)]).await;
    let mut gw = vec![("10.244.1.2", 24)];
    if !overlay {
        gw.push(("fd00:244:1::2", 64));
    }
    let root = common::endpoint(&client, &net, "cbr0", &gw).await;
    Node {
        hnsd,
        client,
        local,
        root,
    }
}

fn config(n: &Node, overlay: bool) -> Config {
    let source = SourceConfig::Manifests("/nonexistent".into());
    Config {
        hostname: NODE.into(),
        source_vip: overlay.then(|| "10.244.1.3".parse().unwrap()),
        feature_gates: FeatureGates {
            win_dsr: false,
            win_overlay: overlay,
        },
        node_ips: vec!["192.168.0.11".parse().unwrap(), "fd00::11".parse().unwrap()],
        retry_after: Duration::from_millis(50),
        host_mac: Some("00-11-22-33-44-55".parse().unwrap()),
        ..testkit::proxy::config(&n.hnsd.socket(), source)
    }
}

async fn proxy(n: &Node, overlay: bool) -> Proxy {
    Proxy::connect(config(n, overlay)).await.unwrap()
}

/// Service `ns1/<name>` port `p80` (80 -> 80/TCP) with `spec` merged in.
fn service(name: &str, spec: Value) -> Value {
    let mut s = json!({"clusterIP":"10.20.30.41","ports":[{"name":"p80","port":80,"targetPort":80,"protocol":"TCP"}]});
    for (k, v) in spec.as_object().unwrap() {
        s[k] = v.clone();
    }
    json!({"apiVersion":"v1","kind":"Service","metadata":{"name":name,"namespace":"ns1"},"spec":s})
}

/// An EndpointSlice of `svc` with endpoints (address, nodeName); upstream's slices mostly
/// carry no nodeName.
fn slice(svc: &str, family: &str, eps: &[(&str, Option<&str>)]) -> Value {
    let endpoints: Vec<Value> = eps
        .iter()
        .map(|(ip, node)| match node {
            Some(n) => json!({"addresses":[ip],"nodeName":n}),
            None => json!({"addresses":[ip]}),
        })
        .collect();
    json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":format!("{svc}-{family}"),"namespace":"ns1","labels":{"kubernetes.io/service-name":svc}},
        "addressType":family,"ports":[{"name":"p80","port":80,"protocol":"TCP"}],"endpoints":endpoints})
}

fn snapshot(objects: &[Value]) -> Snapshot {
    let mut snap = Snapshot::default();
    let text: Vec<String> = objects.iter().map(|o| format!("---\n{o}\n")).collect();
    proxy::source::manifests::load_text(&text.concat(), "test", &mut snap);
    assert!(snap.problems.is_empty(), "{:?}", snap.problems);
    snap
}

async fn lbs(n: &Node) -> Vec<LoadBalancer> {
    n.client.list_load_balancers().await.unwrap()
}

async fn remotes(n: &Node) -> Vec<Endpoint> {
    let eps = n.client.list_endpoints().await.unwrap();
    eps.into_iter().filter(Endpoint::is_remote).collect()
}

fn remote_for<'a>(eps: &'a [Endpoint], ip: &str) -> &'a Endpoint {
    let ip: IpAddr = ip.parse().unwrap();
    let found: Vec<&Endpoint> = eps.iter().filter(|e| e.ips().any(|i| i == ip)).collect();
    assert_eq!(found.len(), 1, "one remote endpoint for {ip}: {eps:#?}");
    found[0]
}

fn lb_for<'a>(lbs: &'a [LoadBalancer], vip: Option<&str>, port: u16) -> &'a LoadBalancer {
    let vip: Option<IpAddr> = vip.map(|v| v.parse().unwrap());
    lbs.iter()
        .find(|lb| {
            lb.frontend_vips.first().copied() == vip && lb.port_mappings[0].external_port == port
        })
        .unwrap_or_else(|| panic!("no LB {vip:?}:{port} in {lbs:#?}"))
}

/// proxier_test.go TestCreateServiceVip: on Overlay a NodePort Service's ClusterIP becomes a
/// remote endpoint (svcInfo.remoteEndpoint.ip == svcIP), even with no backends at all.
#[tokio::test]
async fn create_service_vip__winkernel() {
    let n = node(true).await;
    let mut p = proxy(&n, true).await;
    let svc = service(
        "svc1",
        json!({"type":"NodePort","externalIPs":["50.60.70.81"],"sessionAffinity":"ClientIP",
            "ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    p.sync(&snapshot(&[svc])).await;
    let r = remotes(&n).await;
    let vip = remote_for(&r, "10.20.30.41");
    assert_eq!(vip.mac_address.unwrap().to_string(), "00-11-22-33-44-55");
    assert!(lbs(&n).await.is_empty(), "no backends: no load balancer");
}

/// proxier_test.go TestCreateRemoteEndpointOverlay: an endpoint with no nodeName and no local
/// HNS endpoint is remote: Flags RemoteEndpoint, its address, and (Overlay) the PA of its
/// RemoteSubnetRoute.
#[tokio::test]
async fn create_remote_endpoint_overlay__winkernel() {
    let n = node(true).await;
    let mut p = proxy(&n, true).await;
    let svc = service(
        "svc1",
        json!({"type":"NodePort","ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    p.sync(&snapshot(&[svc, slice("svc1", "IPv4", &[(REMOTE, None)])]))
        .await;
    let r = remotes(&n).await;
    let ep = remote_for(&r, REMOTE);
    assert!(ep.is_remote());
    match &ep.policies[..] {
        [hcn::EndpointPolicy::ProviderAddress(pa)] => {
            assert_eq!(pa.provider_address.to_string(), "192.168.0.12")
        }
        other => panic!("policies {other:?}"),
    }
}

/// proxier_test.go TestCreateRemoteEndpointL2Bridge: the same on L2Bridge, without a PA.
#[tokio::test]
async fn create_remote_endpoint_l2bridge__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let svc = service(
        "svc1",
        json!({"type":"NodePort","ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    p.sync(&snapshot(&[svc, slice("svc1", "IPv4", &[(REMOTE, None)])]))
        .await;
    let r = remotes(&n).await;
    let ep = remote_for(&r, REMOTE);
    assert!(ep.policies.is_empty(), "no PA on L2Bridge");
    assert_eq!(r.len(), 1);
}

fn two_services() -> Vec<Value> {
    let np = |port: u16| json!([{"name":"p80","port":80,"protocol":"TCP","nodePort":port}]);
    vec![
        service("svc1", json!({"type":"NodePort","ports":np(3001)})),
        slice("svc1", "IPv4", &[(REMOTE, None)]),
        service(
            "svc2",
            json!({"type":"NodePort","clusterIP":"10.20.30.42","ports":np(3002)}),
        ),
        slice("svc2", "IPv4", &[(REMOTE, None)]),
    ]
}

/// proxier_test.go TestSharedRemoteEndpointDelete: two Services share one remote endpoint
/// (refCount 2); deleting one keeps it (refCount 1, same ID), deleting both removes it.
#[tokio::test]
async fn shared_remote_endpoint_delete__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let both = two_services();
    p.sync(&snapshot(&both)).await;
    let id = remote_for(&remotes(&n).await, REMOTE).id;
    p.sync(&snapshot(&both[..2])).await;
    assert_eq!(
        remote_for(&remotes(&n).await, REMOTE).id,
        id,
        "still used by svc1"
    );
    p.sync(&snapshot(&[])).await;
    assert!(remotes(&n).await.is_empty(), "no user left");
}

/// proxier_test.go TestSharedRemoteEndpointUpdate: changing one sharing Service's port keeps
/// the one remote endpoint (same ID) and moves only that Service's load balancers.
#[tokio::test]
async fn shared_remote_endpoint_update__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let mut objs = two_services();
    p.sync(&snapshot(&objs)).await;
    let id = remote_for(&remotes(&n).await, REMOTE).id;
    objs[2] = service(
        "svc2",
        json!({"type":"NodePort","clusterIP":"10.20.30.42",
            "ports":[{"name":"p80","port":8080,"targetPort":80,"protocol":"TCP","nodePort":3003}]}),
    );
    let report = p.sync(&snapshot(&objs)).await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(remote_for(&remotes(&n).await, REMOTE).id, id);
    let l = lbs(&n).await;
    assert_eq!(pm(lb_for(&l, Some("10.20.30.42"), 8080)), (80, 8080));
    assert_eq!(pm(lb_for(&l, None, 3003)), (80, 3003));
    assert!(l.iter().all(|lb| lb.port_mappings[0].external_port != 3002));
}

fn pm(lb: &LoadBalancer) -> (u16, u16) {
    (
        lb.port_mappings[0].internal_port,
        lb.port_mappings[0].external_port,
    )
}

/// proxier_test.go TestCreateLoadBalancer: a NodePort Service gets a ClusterIP LB and a NodePort
/// LB; upstream checks svcInfo.hnsID/nodePorthnsID == LBID-1; here: the IDs survive a resync
/// and a restarted proxy (no delete and recreate).
#[tokio::test]
async fn create_load_balancer__winkernel() {
    let n = node(false).await;
    let objs = two_services();
    let mut p = proxy(&n, false).await;
    p.sync(&snapshot(&objs[..2])).await;
    let before = lbs(&n).await;
    assert_eq!(before.len(), 2);
    let cluster = lb_for(&before, Some("10.20.30.41"), 80);
    assert_eq!(cluster.port_mappings[0].protocol, 6);
    assert_eq!(cluster.flags, 0);
    lb_for(&before, None, 3001);
    let again = p.sync(&snapshot(&objs[..2])).await;
    assert_eq!((again.created, again.deleted, again.updated), (0, 0, 0));
    let mut restarted = proxy(&n, false).await;
    let report = restarted.sync(&snapshot(&objs[..2])).await;
    assert_eq!((report.created, report.deleted, report.updated), (0, 0, 0));
    let mut ids: Vec<Guid> = lbs(&n).await.iter().map(|l| l.id).collect();
    let mut want: Vec<Guid> = before.iter().map(|l| l.id).collect();
    ids.sort();
    want.sort();
    assert_eq!(ids, want);
}

/// proxier_test.go TestCreateDsrLoadBalancer: `--enable-dsr`, ETP=Local, an ingress IP and a
/// backend with a local HNS endpoint: four LBs (upstream LBID-1..4): ClusterIP, NodePort and
/// ingress with the DSR flag (svcInfo.localTrafficDSR) and the local backend only, and the
/// health-check LB (`--forward-healthcheck-vip`) on the ingress IP onto the root endpoint.
#[tokio::test]
async fn create_dsr_load_balancer__winkernel() {
    let n = node(false).await;
    let mut cfg = config(&n, false);
    cfg.enable_dsr = true;
    cfg.feature_gates.win_dsr = true;
    cfg.forward_healthcheck_vip = true;
    let mut p = Proxy::connect(cfg).await.unwrap();
    let mut svc = service(
        "svc1",
        json!({"type":"NodePort","externalTrafficPolicy":"Local",
            "ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    svc["status"] = json!({"loadBalancer":{"ingress":[{"ip":"11.21.31.41"}]}});
    let report = p
        .sync(&snapshot(&[
            svc,
            slice("svc1", "IPv4", &[(LOCAL, Some(NODE)), (REMOTE, None)]),
        ]))
        .await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let l = lbs(&n).await;
    assert_eq!(l.len(), 4, "{l:#?}");
    let cluster = lb_for(&l, Some("10.20.30.41"), 80);
    assert_eq!(cluster.flags, 1, "--enable-dsr: the ClusterIP LB is DSR");
    assert_eq!(cluster.host_compute_endpoints.len(), 2);
    for lb in [lb_for(&l, None, 3001), lb_for(&l, Some("11.21.31.41"), 80)] {
        assert_eq!(lb.flags, 1, "DSR");
        assert_eq!(lb.host_compute_endpoints, vec![n.local]);
    }
    let health = lb_for(&l, Some("11.21.31.41"), 10256);
    assert_eq!(health.host_compute_endpoints, vec![n.root]);
}

/// proxier_test.go TestClusterIPLBInCreateDsrLoadBalancer: ETP=Local with only a remote
/// backend: the ClusterIP LB is still made (with the remote endpoint); no NodePort or ingress
/// LB, as there is no local backend.
#[tokio::test]
async fn cluster_ip_lb_in_create_dsr_load_balancer__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let mut svc = service(
        "svc1",
        json!({"type":"LoadBalancer","externalTrafficPolicy":"Local",
            "ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    svc["status"] = json!({"loadBalancer":{"ingress":[{"ip":"11.21.31.41"}]}});
    p.sync(&snapshot(&[svc, slice("svc1", "IPv4", &[(REMOTE, None)])]))
        .await;
    let l = lbs(&n).await;
    assert_eq!(l.len(), 1, "{l:#?}");
    let cluster = lb_for(&l, Some("10.20.30.41"), 80);
    assert_eq!(
        cluster.host_compute_endpoints,
        vec![remote_for(&remotes(&n).await, REMOTE).id]
    );
}

/// proxier.go (no upstream test): a backend is local when HNS has a local endpoint for its
/// address (`hnsLocalEndpoints`), and `internalTrafficPolicy: Local` takes those for the
/// ClusterIP LB (`clusterIPEndpoints = hnsLocalEndpoints`). Slices without nodeName still
/// give a ClusterIP LB on the local pod, and no remote endpoint for it.
#[tokio::test]
async fn internal_traffic_policy_local_by_hns_endpoint__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let svc = service("svc1", json!({"internalTrafficPolicy":"Local"}));
    let report = p
        .sync(&snapshot(&[
            svc,
            slice("svc1", "IPv4", &[(LOCAL, None), (REMOTE, None)]),
        ]))
        .await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let l = lbs(&n).await;
    assert_eq!(l.len(), 1);
    assert_eq!(
        lb_for(&l, Some("10.20.30.41"), 80).host_compute_endpoints,
        vec![n.local]
    );
    assert!(
        remotes(&n).await.is_empty(),
        "the local pod is no remote endpoint"
    );
}

/// proxier.go / hns.go (no upstream test for the pair): a dual-stack NodePort Service gets an
/// IPv4 and an IPv6 NodePort LB on the same port (flags 0 and 2, `isIPv6`); HNS tells them apart
/// by family, so both exist and a resync changes nothing.
#[tokio::test]
async fn dual_stack_node_port__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let svc = service(
        "svc1",
        json!({"type":"NodePort","clusterIPs":["10.20.30.41","fd00:96::41"],"ipFamilies":["IPv4","IPv6"],
            "ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    let objs = [
        svc,
        slice("svc1", "IPv4", &[(REMOTE, None)]),
        slice("svc1", "IPv6", &[("fd00:244:2::5", None)]),
    ];
    let report = p.sync(&snapshot(&objs)).await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let l = lbs(&n).await;
    let mut node_ports: Vec<u32> = l
        .iter()
        .filter(|lb| lb.frontend_vips.is_empty())
        .map(|lb| {
            assert_eq!(lb.port_mappings[0].external_port, 3001);
            lb.flags
        })
        .collect();
    node_ports.sort();
    assert_eq!(node_ports, vec![0, 2], "one NodePort LB per family");
    assert_eq!(l.len(), 4);
    let again = p.sync(&snapshot(&objs)).await;
    assert_eq!((again.created, again.deleted, again.updated), (0, 0, 0));
    assert!(again.retry.is_empty(), "{:?}", again.problems);
}

/// The HNS side of the same rule: NodePort LBs (no VIP) on one port conflict only within a
/// family; a second IPv4 one is refused with HCN_E_PORT_ALREADY_EXISTS (0x803B0013).
#[tokio::test]
async fn dual_stack_node_port_frontends_in_hns__winkernel() {
    let n = node(false).await;
    let lb = |flags: u32| LoadBalancer {
        host_compute_endpoints: vec![n.local],
        port_mappings: vec![hcn::LoadBalancerPortMapping {
            protocol: 6,
            internal_port: 80,
            external_port: 3001,
            distribution_type: 0,
            flags: 18,
        }],
        flags,
        ..LoadBalancer::default()
    };
    n.client.create_load_balancer(&lb(0)).await.unwrap();
    n.client.create_load_balancer(&lb(2)).await.unwrap();
    let err = n.client.create_load_balancer(&lb(0)).await.unwrap_err();
    assert_eq!(
        err.code(),
        Some(hcn::error::HResult::HCN_E_PORT_ALREADY_EXISTS),
        "{err}"
    );
    assert_eq!(hcn::error::HResult::HCN_E_PORT_ALREADY_EXISTS.0, 0x803B0013);
}

/// Makes a local pod endpoint as the CNI would (after the proxy started).
async fn add_local(n: &Node, name: &str, ip: &str) -> Guid {
    let net = n.client.get_network_by_name("cbr0").await.unwrap().unwrap();
    let ep = Endpoint {
        name: name.into(),
        host_compute_network: net.id,
        ip_configurations: vec![hcn::IpConfig {
            ip_address: Some(ip.parse().unwrap()),
            prefix_length: 24,
        }],
        ..Default::default()
    };
    n.client.create_endpoint(&ep).await.unwrap().id
}

/// proxier_test.go TestClusterIPSvcWithITPLocal: ITP=Local, slices without nodeName, local
/// endpoints known only to HNS. (1) one local endpoint: an LB on it; (2) a second local
/// endpoint (made by the CNI after the proxy started) joins the slice: the LB holds both
/// (upstream: LBID-1 deleted, LBID-2 made; HNS 14 cannot modify in place); (3) a remote
/// endpoint joins: the LB is kept as it is (same ID, the local two).
#[tokio::test]
async fn cluster_ip_svc_with_itp_local__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let svc = service("svc1", json!({"internalTrafficPolicy":"Local"}));
    p.sync(&snapshot(&[
        svc.clone(),
        slice("svc1", "IPv4", &[(LOCAL, None)]),
    ]))
    .await;
    let l = lbs(&n).await;
    let first = lb_for(&l, Some("10.20.30.41"), 80).clone();
    assert_eq!(first.host_compute_endpoints, vec![n.local]);

    let second = add_local(&n, "pod-b", "10.244.1.11").await;
    let two = [(LOCAL, None), ("10.244.1.11", None)];
    let report = p
        .sync(&snapshot(&[svc.clone(), slice("svc1", "IPv4", &two)]))
        .await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let l = lbs(&n).await;
    assert_eq!(l.len(), 1, "the first LB is gone: {l:#?}");
    let lb2 = lb_for(&l, Some("10.20.30.41"), 80).clone();
    let mut want = vec![n.local, second];
    want.sort();
    let mut got = lb2.host_compute_endpoints.clone();
    got.sort();
    assert_eq!(got, want);
    assert!(
        remotes(&n).await.is_empty(),
        "a local pod is no remote endpoint"
    );

    let three = [(LOCAL, None), ("10.244.1.11", None), (REMOTE, None)];
    let report = p
        .sync(&snapshot(&[svc, slice("svc1", "IPv4", &three)]))
        .await;
    assert_eq!((report.created, report.deleted, report.updated), (0, 0, 0));
    let l = lbs(&n).await;
    assert_eq!(l.len(), 1);
    assert_eq!(lb_for(&l, Some("10.20.30.41"), 80).id, lb2.id);
}

/// proxier_test.go testDualStackService: a LoadBalancer Service with a ClusterIP, an ingress IP
/// and a NodePort per family, `--forward-healthcheck-vip`. Per family: ClusterIP, NodePort,
/// ingress and health-check LBs (upstream LBID-1..4 and 5..8); flags DSR (ETP=Local with
/// `--enable-dsr`) or none, plus IPv6 (2) on the IPv6 ones; ETP=Local: the local backend only,
/// else local and remote. Upstream runs its IPv6 proxier on an Overlay fake; winkernel itself
/// turns dual-stack off on Overlay (`isDualStackSupported`), so this runs on L2Bridge.
async fn dual_stack_service(etp_local: bool, family_policy: &str) {
    let n = node(false).await;
    let local6 = add_local(&n, "pod-a6", "fd00:244:1::10").await;
    let mut cfg = config(&n, false);
    cfg.enable_dsr = etp_local;
    cfg.feature_gates.win_dsr = true;
    cfg.forward_healthcheck_vip = true;
    let mut p = Proxy::connect(cfg).await.unwrap();
    let policy = if etp_local { "Local" } else { "Cluster" };
    let mut svc = service(
        "svc1",
        json!({"type":"LoadBalancer","clusterIPs":["10.20.30.41","fd00::21"],"ipFamilies":["IPv4","IPv6"],
            "ipFamilyPolicy":family_policy,"externalTrafficPolicy":policy,
            "ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    svc["status"] = json!({"loadBalancer":{"ingress":[{"ip":"11.21.31.41"},{"ip":"fd00::1"}]}});
    let mut v4 = vec![(LOCAL, Some(NODE))];
    let mut v6 = vec![("fd00:244:1::10", Some(NODE))];
    if !etp_local {
        v4.push((REMOTE, None));
        v6.push(("fd00:244:2::5", None));
    }
    let objs = [svc, slice("svc1", "IPv4", &v4), slice("svc1", "IPv6", &v6)];
    let report = p.sync(&snapshot(&objs)).await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let l = lbs(&n).await;
    assert_eq!(l.len(), 8, "four LBs per family: {l:#?}");
    let base = if etp_local { 1 } else { 0 };
    let backends = if etp_local { 1 } else { 2 };
    for (cluster, ingress, ipv6, local) in [
        ("10.20.30.41", "11.21.31.41", 0, n.local),
        ("fd00::21", "fd00::1", 2, local6),
    ] {
        let node_port = l
            .iter()
            .find(|lb| lb.frontend_vips.is_empty() && lb.flags & 2 == ipv6)
            .unwrap_or_else(|| panic!("no NodePort LB with IPv6 flag {ipv6}: {l:#?}"));
        for lb in [
            lb_for(&l, Some(cluster), 80),
            node_port,
            lb_for(&l, Some(ingress), 80),
        ] {
            assert_eq!(lb.flags, base | ipv6, "{lb:#?}");
            assert_eq!(lb.host_compute_endpoints.len(), backends, "{lb:#?}");
            assert!(lb.host_compute_endpoints.contains(&local));
        }
        let health = lb_for(&l, Some(ingress), 10256);
        assert_eq!(health.host_compute_endpoints, vec![n.root]);
    }
    let remote_count = remotes(&n).await.len();
    assert_eq!(remote_count, if etp_local { 0 } else { 2 });
}

/// proxier_test.go TestETPLocalIngressIPServiceWithPreferDualStack.
#[tokio::test]
async fn etp_local_ingress_ip_service_with_prefer_dual_stack__winkernel() {
    dual_stack_service(true, "PreferDualStack").await;
}

/// proxier_test.go TestETPLocalIngressIPServiceWithRequireDualStack.
#[tokio::test]
async fn etp_local_ingress_ip_service_with_require_dual_stack__winkernel() {
    dual_stack_service(true, "RequireDualStack").await;
}

/// proxier_test.go TestETPClusterIngressIPServiceWithPreferDualStack.
#[tokio::test]
async fn etp_cluster_ingress_ip_service_with_prefer_dual_stack__winkernel() {
    dual_stack_service(false, "PreferDualStack").await;
}

/// proxier_test.go TestETPClusterIngressIPServiceWithRequireDualStack.
#[tokio::test]
async fn etp_cluster_ingress_ip_service_with_require_dual_stack__winkernel() {
    dual_stack_service(false, "RequireDualStack").await;
}

/// The node's hnsd socket, with the method and path of every call the proxy sends through it.
struct Recorder {
    socket: UnixSocket,
    calls: Mutex<Vec<(Method, String)>>,
}

impl Transport for Recorder {
    fn exchange(&self, method: Method, path: &str, body: Vec<u8>) -> Exchange<'_> {
        let call = (method.clone(), path.to_string());
        self.calls.lock().unwrap().push(call);
        self.socket.exchange(method, path, body)
    }

    fn endpoint(&self) -> String {
        self.socket.endpoint()
    }
}

/// proxier_test.go TestUpdateLoadBalancerWhenSupported / ...WhenUnsupported (Overlay): the
/// Service's only backend moves to another address: the old remote endpoint is deleted, a new
/// one made. Where HNS reports ModifyLoadbalancer (hnslib: 15.5 to 15.x or 16.0 and later, so
/// the `unrestricted` profile) the proxy modifies the LB in place and it keeps its ID (LBID-1);
/// without it (ws2022, and ws2025, whose HNS 15.4 hnslib leaves out: kubernetes#131466) the
/// proxy never calls HcnModifyLoadBalancer: it deletes the LB and makes it again with a new ID
/// (LBID-3).
async fn update_load_balancer(profile: Profile, kept: bool) {
    let n = node_on(profile, true).await;
    let recorder = Arc::new(Recorder {
        socket: UnixSocket::new(n.hnsd.socket()),
        calls: Mutex::new(Vec::new()),
    });
    let client = Client::over(Arc::clone(&recorder) as Arc<dyn Transport>);
    let mut p = Proxy::connect_with(config(&n, true), client).await.unwrap();
    let svc = service(
        "svc1",
        json!({"type":"NodePort","ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    p.sync(&snapshot(&[
        svc.clone(),
        slice("svc1", "IPv4", &[(REMOTE, None)]),
    ]))
    .await;
    let before = lb_for(&lbs(&n).await, Some("10.20.30.41"), 80).id;
    let old_remote = remote_for(&remotes(&n).await, REMOTE).id;
    let moved = "10.244.2.6";
    let report = p
        .sync(&snapshot(&[svc, slice("svc1", "IPv4", &[(moved, None)])]))
        .await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let r = remotes(&n).await;
    assert!(
        r.iter().all(|e| e.id != old_remote),
        "old remote endpoint deleted"
    );
    let new_remote = remote_for(&r, moved).id;
    let l = lbs(&n).await;
    let after = lb_for(&l, Some("10.20.30.41"), 80);
    assert_eq!(after.host_compute_endpoints, vec![new_remote]);
    assert_eq!(after.id == before, kept, "{profile}: LB ID kept: {kept}");
    let calls = recorder.calls.lock().unwrap();
    let modifies: Vec<&str> = calls
        .iter()
        .filter(|(m, path)| *m == Method::PATCH && path.starts_with("/loadbalancers/"))
        .map(|(_, path)| path.as_str())
        .collect();
    if kept {
        assert!(
            modifies.contains(&format!("/loadbalancers/{before}").as_str()),
            "{profile}: modified in place: {modifies:?}"
        );
        assert!(report.updated > 0 && report.deleted == 0, "{report:?}");
    } else {
        assert!(
            modifies.is_empty(),
            "{profile}: no HcnModifyLoadBalancer call: {modifies:?}"
        );
        assert!(
            report.updated == 0 && report.deleted == report.created,
            "{report:?}"
        );
        assert!(report.created > 0, "{report:?}");
    }
}

/// proxier_test.go TestUpdateLoadBalancerWhenSupported.
#[tokio::test]
async fn update_load_balancer_when_supported__winkernel() {
    update_load_balancer(Profile::Unrestricted, true).await;
}

/// proxier_test.go TestUpdateLoadBalancerWhenUnsupported.
#[tokio::test]
async fn update_load_balancer_when_unsupported__winkernel() {
    update_load_balancer(Profile::Ws2022, false).await;
}

/// proxier_test.go TestUpdateLoadBalancerWhenUnsupported on Windows Server 2025: its HNS 15.4
/// is below hnslib's ModifyLoadbalancer gate, so the LB is deleted and re-created, as on 2022.
#[tokio::test]
async fn update_load_balancer_on_ws2025s_hns_15_4_recreates__winkernel() {
    update_load_balancer(Profile::Ws2025, false).await;
}

/// proxier_test.go TestEndpointSliceWithInternalPortDifferentFromServicePort: the LB's
/// internal port is the EndpointSlice's port (8080), the external one the Service's (80).
#[tokio::test]
async fn endpoint_slice_with_internal_port_different_from_service_port__winkernel() {
    let n = node(true).await;
    let mut p = proxy(&n, true).await;
    let svc = service("svc1", json!({"clusterIP":"172.20.1.1"}));
    let mut s = slice("svc1", "IPv4", &[(REMOTE, Some("testhost2"))]);
    s["ports"][0]["port"] = json!(8080);
    p.sync(&snapshot(&[svc, s])).await;
    let l = lbs(&n).await;
    let lb = lb_for(&l, Some("172.20.1.1"), 80);
    assert_eq!(lb.port_mappings.len(), 1);
    assert_eq!(pm(lb), (8080, 80));
    assert_eq!(
        lb.host_compute_endpoints,
        vec![remote_for(&remotes(&n).await, REMOTE).id]
    );
}

/// proxier_test.go TestRemoteAndLocalEndpointsSameIP: one address, local by svc1's slice and
/// on another node by svc2's; HNS has a local endpoint for it. Both Services' LBs use that
/// local endpoint, and no remote endpoint is made for it.
#[tokio::test]
async fn remote_and_local_endpoints_same_ip__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let objs = [
        service("svc1", json!({})),
        slice("svc1", "IPv4", &[(LOCAL, Some(NODE))]),
        service("svc2", json!({"clusterIP":"10.20.30.42"})),
        slice("svc2", "IPv4", &[(LOCAL, Some("testhost2"))]),
    ];
    p.sync(&snapshot(&objs)).await;
    let l = lbs(&n).await;
    for vip in ["10.20.30.41", "10.20.30.42"] {
        assert_eq!(
            lb_for(&l, Some(vip), 80).host_compute_endpoints,
            vec![n.local]
        );
    }
    assert!(remotes(&n).await.is_empty());
    p.sync(&snapshot(&[])).await;
    let eps = n.client.list_endpoints().await.unwrap();
    assert!(
        eps.iter().any(|e| e.id == n.local),
        "the local endpoint survives"
    );
}

/// The load balancers of a LoadBalancer Service (ClusterIP 10.0.0.200, NodePort 3001,
/// external IP 50.60.70.81, ingress 50.60.70.82, ClientIP affinity, `--forward-healthcheck-vip`)
/// on Overlay, before and after its backends go from two to three: (before, after) HNS LBs.
async fn manage(profile: Profile) -> (Vec<LoadBalancer>, Vec<LoadBalancer>) {
    let n = node_on(profile, true).await;
    let mut cfg = config(&n, true);
    cfg.forward_healthcheck_vip = true;
    let mut p = Proxy::connect(cfg).await.unwrap();
    let mut svc = service(
        "svc1",
        json!({"type":"LoadBalancer","clusterIP":"10.0.0.200","externalIPs":["50.60.70.81"],
            "sessionAffinity":"ClientIP",
            "ports":[{"name":"p80","port":80,"targetPort":8080,"protocol":"TCP","nodePort":3001}]}),
    );
    svc["status"] = json!({"loadBalancer":{"ingress":[{"ip":"50.60.70.82"}]}});
    let backends = |ips: &[&'static str]| {
        let eps: Vec<(&str, Option<&str>)> = ips.iter().map(|ip| (*ip, None)).collect();
        let mut s = slice("svc1", "IPv4", &eps);
        s["ports"][0]["port"] = json!(8080);
        s
    };
    let two = ["10.244.2.10", "10.244.2.11"];
    let report = p.sync(&snapshot(&[svc.clone(), backends(&two)])).await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let before = lbs(&n).await;
    let three = ["10.244.2.10", "10.244.2.11", "10.244.2.12"];
    let report = p.sync(&snapshot(&[svc, backends(&three)])).await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    (before, lbs(&n).await)
}

/// The LB of one frontend in `before` and `after`: with ModifyLoadbalancer the same ID, else a
/// new one and the old ID gone from HNS; three backends after, two before.
fn check_managed(
    before: &[LoadBalancer],
    after: &[LoadBalancer],
    vip: Option<&str>,
    port: u16,
    modify: bool,
) {
    let (b, a) = (lb_for(before, vip, port), lb_for(after, vip, port));
    assert_eq!(b.host_compute_endpoints.len(), 2);
    assert_eq!(a.host_compute_endpoints.len(), 3);
    assert_eq!(
        a.id == b.id,
        modify,
        "{vip:?}:{port}: ID kept only where HNS modifies"
    );
    if !modify {
        assert!(
            after.iter().all(|lb| lb.id != b.id),
            "the old LB is deleted"
        );
    }
}

/// loadbalancer_test.go TestManageLoadbalancer, the rows a real HNS can show: create (with and
/// without modify support), update with modify (same ID) and without (delete and create: a new
/// ID), skip create when no endpoints are available (no LB). The rows with injected create or
/// update failures need a fault switch hnsd does not have.
#[tokio::test]
async fn manage_loadbalancer__winkernel() {
    for (profile, modify) in [
        (Profile::Unrestricted, true),
        (Profile::Ws2025, false),
        (Profile::Ws2022, false),
    ] {
        let (before, after) = manage(profile).await;
        check_managed(&before, &after, Some("10.0.0.200"), 80, modify);
    }
    let n = node(true).await;
    let mut p = proxy(&n, true).await;
    p.sync(&snapshot(&[
        service("svc1", json!({})),
        slice("svc1", "IPv4", &[]),
    ]))
    .await;
    assert!(lbs(&n).await.is_empty(), "no endpoints: no LB");
}

/// loadbalancer_test.go TestManageClusterIPLoadbalancer.
#[tokio::test]
async fn manage_cluster_ip_loadbalancer__winkernel() {
    let (before, after) = manage(Profile::Ws2022).await;
    check_managed(&before, &after, Some("10.0.0.200"), 80, false);
    let lb = lb_for(&after, Some("10.0.0.200"), 80);
    assert_eq!(pm(lb), (8080, 80));
    assert_eq!(
        lb.port_mappings[0].distribution_type,
        hcn::loadbalancer::LoadBalancerDistribution::SOURCE_IP,
        "ClientIP affinity: LoadBalancerDistributionSourceIP (2)"
    );
}

/// loadbalancer_test.go TestManageNodePortLoadbalancer.
#[tokio::test]
async fn manage_node_port_loadbalancer__winkernel() {
    let (before, after) = manage(Profile::Ws2022).await;
    check_managed(&before, &after, None, 3001, false);
    let (before, after) = manage(Profile::Unrestricted).await;
    check_managed(&before, &after, None, 3001, true);
}

/// loadbalancer_test.go TestManageExternalIPLoadbalancers.
#[tokio::test]
async fn manage_external_ip_loadbalancers__winkernel() {
    let (before, after) = manage(Profile::Ws2022).await;
    check_managed(&before, &after, Some("50.60.70.81"), 80, false);
}

/// loadbalancer_test.go TestManageIngressIPLoadbalancers: the ingress LB is remade, the
/// health-check LB (its root endpoint unchanged) keeps its ID.
#[tokio::test]
async fn manage_ingress_ip_loadbalancers__winkernel() {
    let (before, after) = manage(Profile::Ws2022).await;
    check_managed(&before, &after, Some("50.60.70.82"), 80, false);
    let hc = |l: &[LoadBalancer]| lb_for(l, Some("50.60.70.82"), 10256).id;
    assert_eq!(hc(&before), hc(&after), "health-check LB kept");
}

/// proxier_test.go TestRemoteEndpointDeleteDoesNotAffectLocalEndpointWithSameIP: svc1 and svc2
/// share a local backend A and a remote backend B; then the CNI makes a local endpoint at B's
/// address and svc3 (slice on this node) uses it; when svc1 and svc2 lose their endpoints, the
/// remote endpoint at B goes, the local one at B stays and svc3's LB still uses it.
#[tokio::test]
async fn remote_endpoint_delete_does_not_affect_local_endpoint_with_same_ip__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    // B: an address of this node's subnet that no HNS endpoint holds yet (a pod elsewhere, by
    // its slice), so that the CNI can later make a local endpoint at it.
    let b = "10.244.1.20";
    let np = |port: u16| json!([{"name":"p80","port":80,"protocol":"TCP","nodePort":port}]);
    let svc1 = service("svc1", json!({"type":"NodePort","ports":np(3001)}));
    let svc2 = service(
        "svc2",
        json!({"type":"NodePort","clusterIP":"10.20.30.42","ports":np(3002)}),
    );
    let both = [(LOCAL, Some(NODE)), (b, None)];
    let mut objs = vec![
        svc1,
        slice("svc1", "IPv4", &both),
        svc2,
        slice("svc2", "IPv4", &both),
    ];
    p.sync(&snapshot(&objs)).await;
    let remote_b = remote_for(&remotes(&n).await, b).id;

    let local_b = add_local(&n, "pod-b-here", b).await;
    objs.push(service("svc3", json!({"clusterIP":"10.20.30.43"})));
    objs.push(slice("svc3", "IPv4", &[(b, Some(NODE))]));
    p.sync(&snapshot(&objs)).await;
    let l = lbs(&n).await;
    assert_eq!(
        lb_for(&l, Some("10.20.30.43"), 80).host_compute_endpoints,
        vec![local_b]
    );

    objs[1] = slice("svc1", "IPv4", &[]);
    objs[3] = slice("svc2", "IPv4", &[]);
    let report = p.sync(&snapshot(&objs)).await;
    assert!(report.retry.is_empty(), "{:?}", report.problems);
    let eps = n.client.list_endpoints().await.unwrap();
    assert!(eps.iter().all(|e| e.id != remote_b), "remote B deleted");
    assert!(eps.iter().any(|e| e.id == local_b), "local B kept");
    let l = lbs(&n).await;
    assert_eq!(l.len(), 1, "{l:#?}");
    assert_eq!(
        lb_for(&l, Some("10.20.30.43"), 80).host_compute_endpoints,
        vec![local_b]
    );
}

/// proxier_test.go TestDsrEndpointsAreCreatedCorrectly: Overlay with `--enable-dsr`, a ClusterIP
/// Service with a remote backend: the remote endpoint is made and the ClusterIP LB (DSR) uses it.
#[tokio::test]
async fn dsr_endpoints_are_created_correctly__winkernel() {
    let n = node(true).await;
    let mut cfg = config(&n, true);
    cfg.enable_dsr = true;
    cfg.feature_gates.win_dsr = true;
    let mut p = Proxy::connect(cfg).await.unwrap();
    p.sync(&snapshot(&[
        service("svc1", json!({})),
        slice("svc1", "IPv4", &[(REMOTE, None)]),
    ]))
    .await;
    let remote = remote_for(&remotes(&n).await, REMOTE).id;
    let l = lbs(&n).await;
    let lb = lb_for(&l, Some("10.20.30.41"), 80);
    assert_eq!(lb.host_compute_endpoints, vec![remote]);
    assert_eq!(lb.flags, 1);
}

/// proxier_test.go TestDsrNotAppliedToClusterTrafficPolicy: with ETP=Cluster, `--enable-dsr`
/// makes only the ClusterIP LB DSR; the NodePort LB is not (localTrafficDSR is false).
#[tokio::test]
async fn dsr_not_applied_to_cluster_traffic_policy__winkernel() {
    let n = node(true).await;
    let mut cfg = config(&n, true);
    cfg.enable_dsr = true;
    cfg.feature_gates.win_dsr = true;
    let mut p = Proxy::connect(cfg).await.unwrap();
    let svc = service(
        "svc1",
        json!({"type":"NodePort","externalTrafficPolicy":"Cluster",
            "ports":[{"name":"p80","port":80,"protocol":"TCP","nodePort":3001}]}),
    );
    p.sync(&snapshot(&[svc, slice("svc1", "IPv4", &[(REMOTE, None)])]))
        .await;
    let l = lbs(&n).await;
    assert_eq!(lb_for(&l, Some("10.20.30.41"), 80).flags, 1);
    assert_eq!(lb_for(&l, None, 3001).flags, 0);
}

/// hns_test.go TestGetLoadBalancerExisting: an LB already in HNS with what the Service needs
/// (made here through the HNS API, as `hcn.AddLoadBalancer` does, so without winnet's
/// LinuxService label) is reused: no HNS call, the same ID.
#[tokio::test]
async fn get_load_balancer_existing__winkernel() {
    let n = node(false).await;
    let existing = n
        .client
        .create_load_balancer(&LoadBalancer {
            host_compute_endpoints: vec![n.local],
            frontend_vips: vec!["10.20.30.41".parse().unwrap()],
            port_mappings: vec![hcn::LoadBalancerPortMapping {
                protocol: 6,
                internal_port: 80,
                external_port: 80,
                distribution_type: 0,
                flags: 0,
            }],
            ..LoadBalancer::default()
        })
        .await
        .unwrap();
    let mut p = proxy(&n, false).await;
    let report = p
        .sync(&snapshot(&[
            service("svc1", json!({})),
            slice("svc1", "IPv4", &[(LOCAL, Some(NODE))]),
        ]))
        .await;
    assert_eq!((report.created, report.updated, report.deleted), (0, 0, 0));
    let l = lbs(&n).await;
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].id, existing.id);
}

/// hns_test.go TestDeleteLoadBalancer: when the Service goes, its LB is deleted from HNS.
#[tokio::test]
async fn delete_load_balancer__winkernel() {
    let n = node(false).await;
    let mut p = proxy(&n, false).await;
    let objs = [
        service("svc1", json!({})),
        slice("svc1", "IPv4", &[(LOCAL, Some(NODE))]),
    ];
    p.sync(&snapshot(&objs)).await;
    let id = lb_for(&lbs(&n).await, Some("10.20.30.41"), 80).id;
    let report = p.sync(&snapshot(&[])).await;
    assert_eq!(report.deleted, 1);
    let gone = n.client.get_load_balancer_by_id(id).await.unwrap_err();
    assert!(gone.is_not_found(), "gone from HNS: {gone}");
}
