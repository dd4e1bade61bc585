//! The winkernel mapping, table by table, against a real hnsd: for each Service shape of the
//! reference §5.4 the HNS load balancers and remote endpoints, with exact VIPs, ports, flags,
//! distribution and backends.

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use hcn::{Endpoint, Guid, LoadBalancer};
use hns::Profile;
use hns_client::Client;
use proxy::{Config, Proxy, Snapshot, SourceConfig};
use serde_json::{Value, json};
use testkit::kube::service;

const NODE: &str = "win-1";

struct Node {
    hnsd: testkit::hnsd::Hnsd,
    client: Client,
    /// IP -> HNS ID of the local pod endpoints the CNI made.
    locals: Vec<(IpAddr, Guid)>,
    root: Guid,
}

/// An hnsd with an L2Bridge (or Overlay) network `cbr0`, the root endpoint, and two local pods.
async fn node(profile: Profile, overlay: bool) -> Node {
    let (hnsd, net) = common::hnsd_with_cbr0(profile, overlay).await;
    let client = hnsd.client();
    let root = common::endpoint(&client, &net, "cbr0", &[("10.244.1.2", 24)]).await;
    let mut locals = Vec::new();
    for (name, ip) in [("pod-a", "10.244.1.10"), ("pod-b", "10.244.1.11")] {
        let id = common::endpoint(&client, &net, name, &[(ip, 24)]).await;
        locals.push((ip.parse().unwrap(), id));
    }
    Node {
        hnsd,
        client,
        locals,
        root,
    }
}

fn config(n: &Node) -> Config {
    let source = SourceConfig::Manifests("/nonexistent".into());
    Config {
        retry_after: Duration::from_millis(50),
        host_mac: Some("00-15-5D-AA-BB-CC".parse().unwrap()),
        ..testkit::proxy::config(&n.hnsd.socket(), source)
    }
}

/// An EndpointSlice: (ip, node, ready, serving, terminating).
fn slice(svc: &str, family: &str, ports: Value, eps: &[(&str, &str, bool, bool, bool)]) -> Value {
    let endpoints = eps
        .iter()
        .map(|(ip, node, ready, serving, terminating)| {
            testkit::kube::endpoint(ip, node, *ready, *serving, *terminating)
        })
        .collect();
    testkit::kube::endpoint_slice(&format!("{svc}-{family}"), svc, family, ports, endpoints)
}

fn http_ports() -> Value {
    testkit::kube::http_port(8080)
}

/// Local pod-a, local pod-b, remote 10.244.2.5 on win-2; all ready.
fn three(svc: &str) -> Value {
    slice(
        svc,
        "IPv4",
        http_ports(),
        &[
            ("10.244.1.10", NODE, true, true, false),
            ("10.244.1.11", NODE, true, true, false),
            ("10.244.2.5", "win-2", true, true, false),
        ],
    )
}

fn snapshot(objects: &[Value]) -> Snapshot {
    let mut snap = Snapshot::default();
    let text: Vec<String> = objects.iter().map(|o| format!("---\n{o}\n")).collect();
    proxy::source::manifests::load_text(&text.concat(), "test", &mut snap);
    snap
}

fn cluster_ip(extra: Value) -> Value {
    let mut spec = json!({"clusterIP":"10.96.0.10","ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP"}]});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

struct Hns {
    lbs: Vec<LoadBalancer>,
    remotes: Vec<Endpoint>,
}

async fn hns_state(n: &Node) -> Hns {
    let lbs = n.client.list_load_balancers().await.unwrap();
    let remotes = n
        .client
        .list_endpoints()
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.is_remote())
        .collect();
    Hns { lbs, remotes }
}

impl Hns {
    fn lb(&self, vip: Option<&str>, port: u16) -> &LoadBalancer {
        let vip: Option<IpAddr> = vip.map(|v| v.parse().unwrap());
        self.lbs
            .iter()
            .find(|lb| {
                lb.frontend_vips.first().copied() == vip
                    && lb.port_mappings[0].external_port == port
            })
            .unwrap_or_else(|| panic!("no LB {vip:?}:{port} in {:#?}", self.lbs))
    }
    fn remote(&self, ip: &str) -> &Endpoint {
        let ip: IpAddr = ip.parse().unwrap();
        self.remotes
            .iter()
            .find(|e| e.ips().any(|i| i == ip))
            .unwrap_or_else(|| panic!("no remote endpoint {ip}"))
    }
}

fn ids(ids: &[Guid]) -> BTreeSet<Guid> {
    ids.iter().copied().collect()
}

fn pm(lb: &LoadBalancer) -> (u32, u16, u16, u32, u32) {
    let p = &lb.port_mappings[0];
    (
        p.protocol,
        p.internal_port,
        p.external_port,
        p.distribution_type,
        p.flags,
    )
}

#[tokio::test]
async fn cluster_ip_with_local_and_remote_backends() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let report = proxy
        .sync(&snapshot(&[
            service("web", cluster_ip(json!({}))),
            three("web"),
        ]))
        .await;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    let h = hns_state(&n).await;
    assert_eq!(h.lbs.len(), 1);
    let lb = h.lb(Some("10.96.0.10"), 80);
    assert_eq!(pm(lb), (6, 8080, 80, 0, 0));
    assert_eq!(lb.flags, 0);
    assert_eq!(lb.source_vip, None, "L2Bridge leaves SourceVIP out");
    let remote = h.remote("10.244.2.5");
    assert_eq!(remote.mac_address.unwrap().to_string(), "02-11-0A-F4-02-05");
    assert!(remote.policies.is_empty(), "no PA on L2Bridge");
    let mut want = vec![n.locals[0].1, n.locals[1].1, remote.id];
    want.sort();
    assert_eq!(ids(&lb.host_compute_endpoints), ids(&want));
}

#[tokio::test]
async fn enable_dsr_marks_only_the_cluster_ip_lb() {
    let n = node(Profile::Ws2022, false).await;
    let mut cfg = config(&n);
    cfg.enable_dsr = true;
    assert!(
        Proxy::connect(cfg.clone())
            .await
            .err()
            .unwrap()
            .to_string()
            .contains("WinDSR feature gate not enabled")
    );
    cfg.feature_gates.win_dsr = true;
    let mut proxy = Proxy::connect(cfg).await.unwrap();
    let svc = service(
        "web",
        cluster_ip(
            json!({"type":"NodePort","ports":[{"name":"http","port":80,"targetPort":8080,"nodePort":30080}]}),
        ),
    );
    proxy.sync(&snapshot(&[svc, three("web")])).await;
    let h = hns_state(&n).await;
    assert_eq!(h.lb(Some("10.96.0.10"), 80).flags, 1);
    let np = h.lb(None, 30080);
    assert_eq!(np.flags, 0, "NodePort uses DSR only with ETP=Local");
    assert_eq!(pm(np), (6, 8080, 30080, 0, 18));
    assert_eq!(np.host_compute_endpoints.len(), 3);
}

#[tokio::test]
async fn node_port_external_ip_and_ingress_rows() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let mut svc = service(
        "web",
        cluster_ip(
            json!({"type":"LoadBalancer","externalIPs":["192.168.0.100"],
        "ports":[{"name":"http","port":80,"targetPort":8080,"nodePort":30080}]}),
        ),
    );
    svc["status"] = json!({"loadBalancer":{"ingress":[{"ip":"192.168.0.200"}]}});
    proxy.sync(&snapshot(&[svc, three("web")])).await;
    let h = hns_state(&n).await;
    assert_eq!(h.lbs.len(), 4, "ClusterIP, NodePort, externalIP, ingress");
    assert_eq!(pm(h.lb(None, 30080)), (6, 8080, 30080, 0, 18));
    assert_eq!(pm(h.lb(Some("192.168.0.100"), 80)), (6, 8080, 80, 0, 16));
    assert_eq!(pm(h.lb(Some("192.168.0.200"), 80)), (6, 8080, 80, 0, 16));
    for lb in &h.lbs {
        assert_eq!(lb.flags, 0);
        assert_eq!(lb.host_compute_endpoints.len(), 3, "all backends");
    }
}

#[tokio::test]
async fn external_traffic_policy_local_and_preserve_destination() {
    let n = node(Profile::Ws2022, false).await;
    let mut cfg = config(&n);
    cfg.forward_healthcheck_vip = true;
    let mut proxy = Proxy::connect(cfg).await.unwrap();
    let mut svc = service(
        "web",
        cluster_ip(
            json!({"type":"LoadBalancer","externalTrafficPolicy":"Local","healthCheckNodePort":32000,
        "externalIPs":["192.168.0.100"],"ports":[{"name":"http","port":80,"targetPort":8080,"nodePort":30080}]}),
        ),
    );
    svc["status"] = json!({"loadBalancer":{"ingress":[{"ip":"192.168.0.200"}]}});
    let mut preserved = service(
        "keep",
        cluster_ip(json!({"clusterIP":"10.96.0.11","type":"LoadBalancer",
        "ports":[{"name":"http","port":80,"targetPort":8080,"nodePort":30081}]})),
    );
    preserved["metadata"]["annotations"] = json!({"preserve-destination":"true"});
    preserved["status"] = json!({"loadBalancer":{"ingress":[{"ip":"192.168.0.201"}]}});
    proxy
        .sync(&snapshot(&[svc, three("web"), preserved, three("keep")]))
        .await;
    let h = hns_state(&n).await;
    let locals = ids(&[n.locals[0].1, n.locals[1].1]);
    for (vip, port, flags) in [
        (None, 30080, 18),
        (Some("192.168.0.100"), 80, 16),
        (Some("192.168.0.200"), 80, 16),
    ] {
        let lb = h.lb(vip, port);
        assert_eq!(lb.flags, 1, "{vip:?}: ETP=Local means DSR");
        assert_eq!(pm(lb).4, flags);
        assert_eq!(
            ids(&lb.host_compute_endpoints),
            locals,
            "{vip:?}: local backends only"
        );
    }
    assert_eq!(
        h.lb(Some("10.96.0.10"), 80).host_compute_endpoints.len(),
        3,
        "ClusterIP keeps every backend"
    );
    let health = h.lb(Some("192.168.0.200"), 32000);
    assert_eq!(pm(health), (6, 32000, 32000, 0, 0));
    assert_eq!(health.host_compute_endpoints, vec![n.root]);
    let ingress = h.lb(Some("192.168.0.201"), 80);
    assert_eq!(
        pm(ingress).4,
        28,
        "preserve-destination: VipExternalIP + UseMux + PreserveDIP"
    );
    assert_eq!(ingress.flags, 1);
    assert_eq!(ids(&ingress.host_compute_endpoints), locals);
    assert_eq!(
        pm(h.lb(Some("192.168.0.201"), 10256)).4,
        12,
        "health LB with preserve-destination"
    );
    assert_eq!(
        ids(&h.lb(None, 30081).host_compute_endpoints),
        locals,
        "NodePort local with preserve-destination"
    );
}

#[tokio::test]
async fn session_affinity_follows_the_profile() {
    for (profile, dist) in [(Profile::Ws2022, 2), (Profile::Ws2019, 0)] {
        let n = node(profile, false).await;
        let mut proxy = Proxy::connect(config(&n)).await.unwrap();
        let report = proxy
            .sync(&snapshot(&[
                service("web", cluster_ip(json!({"sessionAffinity":"ClientIP"}))),
                three("web"),
            ]))
            .await;
        let h = hns_state(&n).await;
        assert_eq!(pm(h.lb(Some("10.96.0.10"), 80)).3, dist, "{profile}");
        if dist == 0 {
            assert!(
                report
                    .problems
                    .iter()
                    .any(|p| p.contains("Session Affinity is not supported")),
                "{:?}",
                report.problems
            );
        }
    }
}

#[tokio::test]
async fn internal_and_external_policy_local() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    proxy
        .sync(&snapshot(&[
            service("web", cluster_ip(json!({"internalTrafficPolicy":"Local"}))),
            three("web"),
        ]))
        .await;
    let h = hns_state(&n).await;
    assert_eq!(
        h.lb(Some("10.96.0.10"), 80).host_compute_endpoints.len(),
        2,
        "ITP=Local: local backends"
    );
    let both = service(
        "both",
        cluster_ip(
            json!({"clusterIP":"10.96.0.12","type":"NodePort","internalTrafficPolicy":"Local",
        "externalTrafficPolicy":"Local","ports":[{"name":"http","port":80,"targetPort":8080,"nodePort":30090}]}),
        ),
    );
    let n2 = node(Profile::Ws2022, false).await;
    let mut proxy2 = Proxy::connect(config(&n2)).await.unwrap();
    proxy2.sync(&snapshot(&[both, three("both")])).await;
    let h2 = hns_state(&n2).await;
    assert!(
        h2.remotes.is_empty(),
        "ITP=Local and ETP=Local: no remote endpoints (kubernetes#114407)"
    );
    assert_eq!(h2.lbs.len(), 2);
}

#[tokio::test]
async fn multiple_ports_udp_sctp_and_external_name() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let dns = service(
        "dns",
        json!({"clusterIP":"10.96.0.10","ports":[
        {"name":"dns","port":53,"targetPort":53,"protocol":"UDP"},
        {"name":"dns-tcp","port":53,"targetPort":53,"protocol":"TCP"},
        {"name":"sctp","port":9,"targetPort":9,"protocol":"SCTP"}]}),
    );
    let dns_slice = slice(
        "dns",
        "IPv4",
        json!([{"name":"dns","port":53,"protocol":"UDP"},{"name":"dns-tcp","port":53,"protocol":"TCP"},
        {"name":"sctp","port":9,"protocol":"SCTP"}]),
        &[("10.244.1.10", NODE, true, true, false)],
    );
    let ext = service(
        "ext",
        json!({"type":"ExternalName","externalName":"example.com"}),
    );
    let report = proxy.sync(&snapshot(&[dns, dns_slice, ext])).await;
    let h = hns_state(&n).await;
    let protos: BTreeSet<u32> = h
        .lbs
        .iter()
        .map(|lb| lb.port_mappings[0].protocol)
        .collect();
    assert_eq!(protos, BTreeSet::from([6, 17]));
    assert_eq!(h.lbs.len(), 2, "no LB for SCTP or ExternalName");
    assert!(
        report.problems.iter().any(|p| p.contains("SCTP")),
        "{:?}",
        report.problems
    );
}

#[tokio::test]
async fn named_target_port_uses_the_endpoint_port() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let svc = service(
        "web",
        json!({"clusterIP":"10.96.0.10","ports":[{"name":"http","port":80,"targetPort":"web"}]}),
    );
    let sl = slice(
        "web",
        "IPv4",
        json!([{"name":"http","port":9376,"protocol":"TCP"}]),
        &[("10.244.1.10", NODE, true, true, false)],
    );
    proxy.sync(&snapshot(&[svc, sl])).await;
    assert_eq!(pm(hns_state(&n).await.lb(Some("10.96.0.10"), 80)).1, 9376);
}

#[tokio::test]
async fn terminating_endpoints_as_kep_1669_says() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let mut svc = service(
        "web",
        cluster_ip(
            json!({"type":"LoadBalancer","ports":[{"name":"http","port":80,"targetPort":8080,"nodePort":30080}]}),
        ),
    );
    svc["status"] = json!({"loadBalancer":{"ingress":[{"ip":"192.168.0.200"}]}});
    // Every endpoint terminating but serving: they are used for the ClusterIP and the ingress
    // IP, and the NodePort LB is not programmed (endpointsAvailableForLB is false; winkernel's
    // ingress loop does not look at it).
    let terminating = slice(
        "web",
        "IPv4",
        http_ports(),
        &[
            ("10.244.1.10", NODE, false, true, true),
            ("10.244.2.5", "win-2", false, true, true),
        ],
    );
    proxy.sync(&snapshot(&[svc.clone(), terminating])).await;
    let h = hns_state(&n).await;
    assert_eq!(h.lbs.len(), 2);
    assert_eq!(h.lb(Some("10.96.0.10"), 80).host_compute_endpoints.len(), 2);
    assert_eq!(
        h.lb(Some("192.168.0.200"), 80).host_compute_endpoints.len(),
        2
    );
    // One ready endpoint: only it is used, and every LB is there.
    let mixed = slice(
        "web",
        "IPv4",
        http_ports(),
        &[
            ("10.244.1.10", NODE, true, true, false),
            ("10.244.2.5", "win-2", false, true, true),
        ],
    );
    proxy.sync(&snapshot(&[svc, mixed])).await;
    let h = hns_state(&n).await;
    assert_eq!(h.lbs.len(), 3);
    for lb in &h.lbs {
        assert_eq!(lb.host_compute_endpoints, vec![n.locals[0].1]);
    }
    assert!(
        h.remotes.is_empty(),
        "the terminating remote endpoint is no longer used, so it is gone"
    );
}

#[tokio::test]
async fn dual_stack_one_lb_per_family_and_not_on_overlay() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let svc = service(
        "web",
        json!({"clusterIP":"10.96.0.10","clusterIPs":["10.96.0.10","fd00:96::10"],"ipFamilies":["IPv4","IPv6"],
        "ports":[{"name":"http","port":80,"targetPort":8080}]}),
    );
    let v6 = slice(
        "web",
        "IPv6",
        http_ports(),
        &[("fd00:244:2::5", "win-2", true, true, false)],
    );
    proxy
        .sync(&snapshot(&[svc.clone(), three("web"), v6.clone()]))
        .await;
    let h = hns_state(&n).await;
    assert_eq!(h.lbs.len(), 2);
    let lb6 = h.lb(Some("fd00:96::10"), 80);
    assert_eq!(lb6.flags, 2, "IPv6 flag");
    assert_eq!(
        lb6.host_compute_endpoints,
        vec![h.remote("fd00:244:2::5").id]
    );
    assert_eq!(h.lb(Some("10.96.0.10"), 80).flags, 0);

    let o = node(Profile::Ws2022, true).await;
    let mut cfg = config(&o);
    cfg.feature_gates.win_overlay = true;
    cfg.source_vip = Some("10.244.1.3".parse().unwrap());
    let mut proxy = Proxy::connect(cfg).await.unwrap();
    let report = proxy.sync(&snapshot(&[svc, three("web"), v6])).await;
    assert_eq!(hns_state(&o).await.lbs.len(), 1, "IPv4 only on Overlay");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("do not support dual-stack")),
        "{:?}",
        report.problems
    );
}

#[tokio::test]
async fn overlay_remote_endpoints_carry_the_pa_and_lbs_the_source_vip() {
    let n = node(Profile::Ws2022, true).await;
    let mut cfg = config(&n);
    let err = Proxy::connect(cfg.clone()).await.err().unwrap().to_string();
    assert!(err.contains("WinOverlay"), "{err}");
    cfg.feature_gates.win_overlay = true;
    assert!(
        Proxy::connect(cfg.clone())
            .await
            .err()
            .unwrap()
            .to_string()
            .contains("--source-vip")
    );
    cfg.source_vip = Some("10.244.1.3".parse().unwrap());
    let mut proxy = Proxy::connect(cfg).await.unwrap();
    let host_net = service("hostnet", cluster_ip(json!({"clusterIP":"10.96.0.11"})));
    let host_slice = slice(
        "hostnet",
        "IPv4",
        http_ports(),
        &[("192.168.0.13", "win-3", true, true, false)],
    );
    proxy
        .sync(&snapshot(&[
            service("web", cluster_ip(json!({}))),
            three("web"),
            host_net,
            host_slice,
        ]))
        .await;
    let h = hns_state(&n).await;
    let pa = |ep: &Endpoint| match &ep.policies[..] {
        [hcn::EndpointPolicy::ProviderAddress(p)] => p.provider_address.to_string(),
        other => panic!("policies {other:?}"),
    };
    assert_eq!(
        pa(h.remote("10.244.2.5")),
        "192.168.0.12",
        "PA of the RemoteSubnetRoute"
    );
    assert_eq!(
        pa(h.remote("192.168.0.13")),
        "192.168.0.11",
        "outside every remote subnet: the node IP"
    );
    assert_eq!(
        h.lb(Some("10.96.0.10"), 80).source_vip.unwrap().to_string(),
        "10.244.1.3"
    );
    assert_eq!(
        h.lb(Some("10.96.0.11"), 80).source_vip.unwrap().to_string(),
        "192.168.0.11",
        "a backend outside the pod network"
    );
    let cluster = h.remote("10.96.0.10");
    assert_eq!(
        cluster.mac_address.unwrap().to_string(),
        "00-15-5D-AA-BB-CC",
        "ClusterIP remote endpoint with the host MAC"
    );
    assert_eq!(pa(cluster), "192.168.0.11", "behind this node's PA");
    let eps = n.client.list_endpoints().await.unwrap();
    let svip = eps
        .iter()
        .find(|e| e.ips().any(|ip| ip.to_string() == "10.244.1.3"))
        .expect("source VIP endpoint");
    assert!(!svip.is_remote());
    assert_eq!(svip.mac_address.unwrap().to_string(), "00-15-5D-AA-BB-CC");
}

#[tokio::test]
async fn scaling_converges_without_stale_lbs_or_orphan_remotes() {
    for profile in [Profile::Ws2022, Profile::Unrestricted] {
        let n = node(profile, false).await;
        let mut proxy = Proxy::connect(config(&n)).await.unwrap();
        let svc = service(
            "web",
            cluster_ip(
                json!({"type":"NodePort","ports":[{"name":"http","port":80,"targetPort":8080,"nodePort":30080}]}),
            ),
        );
        let one = slice(
            "web",
            "IPv4",
            http_ports(),
            &[("10.244.1.10", NODE, true, true, false)],
        );
        let many = slice(
            "web",
            "IPv4",
            http_ports(),
            &[
                ("10.244.1.10", NODE, true, true, false),
                ("10.244.2.5", "win-2", true, true, false),
                ("10.244.2.6", "win-2", true, true, false),
            ],
        );
        let none = slice("web", "IPv4", http_ports(), &[]);
        proxy.sync(&snapshot(&[svc.clone(), one.clone()])).await;
        let first_id = hns_state(&n).await.lb(Some("10.96.0.10"), 80).id;
        for (step, sl, lbs, backends, remotes) in [
            ("up", &many, 2, 3, 2),
            ("zero", &none, 0, 0, 0),
            ("back", &one, 2, 1, 0),
            ("up again", &many, 2, 3, 2),
        ] {
            let report = proxy.sync(&snapshot(&[svc.clone(), sl.clone()])).await;
            assert!(
                report.retry.is_empty(),
                "{profile} {step}: {:?}",
                report.problems
            );
            let h = hns_state(&n).await;
            assert_eq!(h.lbs.len(), lbs, "{profile} {step}");
            assert_eq!(
                h.remotes.len(),
                remotes,
                "{profile} {step}: no orphan remote endpoint"
            );
            for lb in &h.lbs {
                assert_eq!(
                    lb.host_compute_endpoints.len(),
                    backends,
                    "{profile} {step}"
                );
            }
            if step == "up" {
                let same = h.lb(Some("10.96.0.10"), 80).id == first_id;
                assert_eq!(
                    same,
                    profile == Profile::Unrestricted,
                    "{profile}: updated in place only where HNS can modify"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_restarted_proxy_changes_nothing() {
    let n = node(Profile::Ws2022, false).await;
    let snap = snapshot(&[
        service(
            "web",
            cluster_ip(
                json!({"type":"NodePort","ports":[{"name":"http","port":80,"targetPort":8080,"nodePort":30080}]}),
            ),
        ),
        three("web"),
    ]);
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    proxy.sync(&snap).await;
    let before = n
        .client
        .list_raw(hns_client::Kind::LoadBalancer, None)
        .await
        .unwrap();
    drop(proxy);
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let report = proxy.sync(&snap).await;
    assert_eq!(
        (
            report.created,
            report.updated,
            report.deleted,
            report.remote_created,
            report.remote_deleted
        ),
        (0, 0, 0, 0, 0)
    );
    assert_eq!(
        n.client
            .list_raw(hns_client::Kind::LoadBalancer, None)
            .await
            .unwrap(),
        before,
        "adopted, not rebuilt"
    );
}

#[tokio::test]
async fn stale_lbs_from_before_a_restart_are_cleaned() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    proxy
        .sync(&snapshot(&[
            service("old", cluster_ip(json!({}))),
            three("old"),
        ]))
        .await;
    drop(proxy);
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    proxy.sync(&snapshot(&[])).await;
    let h = hns_state(&n).await;
    assert!(h.lbs.is_empty() && h.remotes.is_empty());
}

#[tokio::test]
async fn remote_endpoints_are_shared_between_services() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let a = service("a", cluster_ip(json!({"clusterIP":"10.96.0.21"})));
    let b = service("b", cluster_ip(json!({"clusterIP":"10.96.0.22"})));
    proxy
        .sync(&snapshot(&[a.clone(), three("a"), b, three("b")]))
        .await;
    let h = hns_state(&n).await;
    assert_eq!(h.remotes.len(), 1, "one remote endpoint for both");
    assert_eq!(h.lbs.len(), 2);
    proxy.sync(&snapshot(&[a, three("a")])).await;
    assert_eq!(hns_state(&n).await.remotes.len(), 1, "still used by a");
    proxy.sync(&snapshot(&[])).await;
    let h = hns_state(&n).await;
    assert!(h.remotes.is_empty() && h.lbs.is_empty());
}

#[tokio::test]
async fn a_wrong_hostname_is_reported_and_never_deletes_a_local_endpoint() {
    let n = node(Profile::Ws2022, false).await;
    let mut cfg = config(&n);
    cfg.hostname = "not-this-node".into();
    let mut proxy = Proxy::connect(cfg).await.unwrap();
    let report = proxy
        .sync(&snapshot(&[
            service("web", cluster_ip(json!({}))),
            three("web"),
        ]))
        .await;
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains("--hostname-override")),
        "{:?}",
        report.problems
    );
    proxy.sync(&snapshot(&[])).await;
    let eps = n.client.list_endpoints().await.unwrap();
    for (ip, id) in &n.locals {
        assert!(
            eps.iter().any(|e| e.id == *id),
            "local endpoint {ip} must survive"
        );
    }
}

#[tokio::test]
async fn bad_manifests_are_reported_and_the_rest_programmed() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let mut snap = Snapshot::default();
    proxy::source::manifests::load_text(
        "kind: Service\nmetadata: {name: broken}\nspec: {ports: [{port: 99999}]}\n",
        "bad.yaml",
        &mut snap,
    );
    proxy::source::manifests::load_text(
        "kind: ConfigMap\nmetadata: {name: cm}\n",
        "cm.yaml",
        &mut snap,
    );
    proxy::source::manifests::load_text("{not: [yaml", "garbage.yaml", &mut snap);
    let good = snapshot(&[service("web", cluster_ip(json!({}))), three("web")]);
    snap.services.extend(good.services);
    snap.slices.extend(good.slices);
    assert_eq!(snap.problems.len(), 3, "{:?}", snap.problems);
    assert!(
        snap.problems[0].contains("bad.yaml") && snap.problems[0].contains("99999"),
        "{}",
        snap.problems[0]
    );
    assert!(snap.problems[1].contains("ConfigMap"));
    proxy.sync(&snap).await;
    assert_eq!(hns_state(&n).await.lbs.len(), 1);
}

#[tokio::test]
async fn a_missing_local_endpoint_is_retried_until_the_cni_makes_it() {
    let n = node(Profile::Ws2022, false).await;
    let mut proxy = Proxy::connect(config(&n)).await.unwrap();
    let sl = slice(
        "web",
        "IPv4",
        http_ports(),
        &[("10.244.1.50", NODE, true, true, false)],
    );
    let snap = snapshot(&[service("web", cluster_ip(json!({}))), sl]);
    let report = proxy.sync(&snap).await;
    assert!(!report.retry.is_empty());
    assert!(hns_state(&n).await.lbs.is_empty());
    assert!(proxy.next_retry().is_some());
    let net = n.client.get_network_by_name("cbr0").await.unwrap().unwrap();
    let ep = Endpoint {
        host_compute_network: net.id,
        ip_configurations: vec![hcn::IpConfig {
            ip_address: Some("10.244.1.50".parse().unwrap()),
            prefix_length: 24,
        }],
        ..Default::default()
    };
    n.client.create_endpoint(&ep).await.unwrap();
    let report = proxy.sync(&snap).await;
    assert!(report.retry.is_empty(), "{:?}", report.problems);
    assert_eq!(hns_state(&n).await.lbs.len(), 1);
}
