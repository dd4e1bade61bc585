//! One test per problem kind: a healthy snapshot, broken one way, names that problem with the
//! right objects; the healthy snapshot yields nothing. No root, no node: snapshots built here.

use std::net::IpAddr;

use doctor::snapshot::{
    ClusterFacts, DnsAnswer, DnsView, FlannelLease, FlannelView, HnsView, KernelView, KubeView,
    LinkView, NetnsView, Pod, ProfileFacts, Service, ServiceEndpoint, ServicePort,
};
use doctor::{Finding, NodeSnapshot, ProblemKind, Repair, diagnose};
use hns_client::switch::{
    LayerDump, PlacedDump, RuleDump, SnatPoolDump, SwitchDump, SwitchFacts, SwitchPort,
};
use serde_json::json;

const NET: &str = "11111111-0000-0000-0000-000000000001";
const NS: &str = "22222222-0000-0000-0000-000000000001";
const EP: &str = "33333333-0000-0000-0000-000000000001";
const REMOTE: &str = "33333333-0000-0000-0000-000000000002";
const LB: &str = "44444444-0000-0000-0000-000000000001";
const POD_IP: &str = "10.244.1.5";
const REMOTE_IP: &str = "10.244.2.7";
const VIP: &str = "10.96.0.10";
const NETNS: &str = "/run/netns/wn-win1-web1";

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn endpoint(id: &str, addr: &str, remote: bool, exceptions: &[&str]) -> hcn::Endpoint {
    let mut v = json!({
        "ID": id, "Name": format!("ep-{addr}"), "HostComputeNetwork": NET,
        "IpConfigurations": [{"IpAddress": addr, "PrefixLength": 24}],
        "MacAddress": "0E-2A-0A-F4-01-05",
        "Flags": if remote { 1 } else { 0 },
        "Dns": {"ServerList": ["10.96.0.53"], "Search": ["default.svc.cluster.local"]},
    });
    if !remote {
        v["HostComputeNamespace"] = json!(NS);
        v["Policies"] = json!([{"Type": "OutBoundNAT", "Settings": {"Exceptions": exceptions}}]);
    }
    hcn::decode_value(v).expect("endpoint")
}

fn lb(id: &str, vip: &str, port: u16, backends: &[&str], flags: u32) -> hcn::LoadBalancer {
    hcn::decode_value(json!({
        "ID": id, "HostComputeEndpoints": backends, "FrontendVIPs": [vip],
        "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": port}],
        "Flags": flags, "LinuxService": "default/web",
    }))
    .expect("load balancer")
}

fn network(kind: &str, remote_subnets: serde_json::Value) -> hcn::Network {
    hcn::decode_value(json!({
        "ID": NET, "Name": "cbr0", "Type": kind,
        "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": "10.244.1.0/24"}]}],
        "Policies": remote_subnets,
    }))
    .expect("network")
}

fn rule(kind: &str, id: &str) -> RuleDump {
    RuleDump {
        owner_kind: kind.into(),
        owner_id: id.into(),
        action: "allow".into(),
        ..RuleDump::default()
    }
}

const EXCEPTIONS: [&str; 3] = ["10.244.0.0/16", "10.96.0.0/12", "192.168.77.0/24"];

fn resolv() -> String {
    "nameserver 10.96.0.53\nsearch default.svc.cluster.local\noptions ndots:5\n".into()
}

/// One Windows node with one pod behind one Service, a remote backend on another node, and
/// every layer in agreement.
fn healthy() -> NodeSnapshot {
    NodeSnapshot {
        node: "win1".into(),
        profile: ProfileFacts {
            name: "ws2025".into(),
            backend_limit: Some(1024),
            no_icmp_through_nat: true,
            acl_default_deny: false,
        },
        cluster: ClusterFacts {
            cluster_cidr: Some("10.244.0.0/16".parse().expect("cidr")),
            service_cidr: Some("10.96.0.0/12".parse().expect("cidr")),
        },
        kube: KubeView {
            services_known: true,
            services: vec![Service {
                namespace: "default".into(),
                name: "web".into(),
                service_type: "ClusterIP".into(),
                cluster_ips: vec![ip(VIP)],
                ports: vec![ServicePort {
                    name: "http".into(),
                    protocol: "TCP".into(),
                    port: 80,
                    node_port: None,
                }],
                endpoints: [(POD_IP, "win1"), (REMOTE_IP, "win2")]
                    .iter()
                    .map(|(a, n)| ServiceEndpoint {
                        ip: ip(a),
                        node: Some(n.to_string()),
                        ready: true,
                        serving: true,
                    })
                    .collect(),
                ..Service::default()
            }],
            pods: vec![Pod {
                namespace: "default".into(),
                name: "web1".into(),
                ip: Some(ip(POD_IP)),
                netns: Some(NETNS.into()),
                ..Pod::default()
            }],
            pods_known: true,
        },
        hns: HnsView {
            networks: vec![network("L2Bridge", json!([]))],
            endpoints: vec![
                endpoint(EP, POD_IP, false, &EXCEPTIONS),
                endpoint(REMOTE, REMOTE_IP, true, &[]),
            ],
            namespaces: vec![
                hcn::decode_value(json!({"ID": NS, "Type": "Guest", "LinuxNetns": NETNS, "Resources": [{"Type": "Endpoint", "Data": {"Id": EP}}]}))
                    .expect("namespace"),
            ],
            load_balancers: vec![lb(LB, VIP, 80, &[EP, REMOTE], 0)],
            routes: vec![],
        },
        switch: Some(SwitchDump {
            node: "win1".into(),
            facts: SwitchFacts {
                profile: "ws2025".into(),
                addresses: vec!["192.168.77.10/24".parse().expect("address")],
                ..SwitchFacts::default()
            },
            ports: vec![SwitchPort {
                name: "web1".into(),
                kind: "Pod".into(),
                endpoint: Some(EP.into()),
                layers: vec![LayerDump {
                    name: "SLB".into(),
                    rules: vec![rule("LoadBalancer", LB), rule("Endpoint", EP)],
                }],
                ..SwitchPort::default()
            }],
            snat_pools: vec![SnatPoolDump {
                address: Some(ip("192.168.77.10")),
                size: 16384,
                busiest: vec![("tcp".into(), 3)],
            }],
            notices: vec![],
            // What a dump from before the placements were recorded holds: the rule checks
            // fall back to owners HNS no longer has ([`placed`] has them).
            placed: vec![],
        }),
        kernel: Some(KernelView {
            pods: vec![NetnsView {
                path: NETNS.into(),
                exists: true,
                links: vec![LinkView {
                    name: "eth0".into(),
                    mac: Some("0e:2a:0a:f4:01:05".into()),
                    up: true,
                    kind: Some("tun".into()),
                }],
                resolv_conf: Some(resolv()),
                expected_resolv_conf: Some(resolv()),
                processes: 1,
                ..NetnsView::default()
            }],
            named_netns: vec!["wn-win1-web1".into()],
            node: NetnsView {
                exists: true,
                routes: vec![format!("{WIN2_SUBNET} via {WIN2_IP}")],
                ..NetnsView::default()
            },
            ..KernelView::default()
        }),
        flannel: Some(FlannelView {
            public_ip: Some(ip("192.168.77.10")),
            leases: vec![
                lease("10.244.1.0/24", "192.168.77.10", "host-gw"),
                lease(WIN2_SUBNET, WIN2_IP, "host-gw"),
            ],
            subnet_file: SUBNET_FILE.into(),
            subnet_env: Some(
                "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=true\n"
                    .into(),
            ),
        }),
        dns: Some(DnsView {
            server: Some(ip("10.96.0.53")),
            asked_from: NETNS.into(),
            answers: vec![DnsAnswer {
                service: "default/web".into(),
                name: WEB_NAME.into(),
                qtype: "A".into(),
                addresses: vec![ip(VIP)],
                error: None,
            }],
        }),
        policy: None,
    }
}

const WEB_NAME: &str = "web.default.svc.cluster.local.";

const WIN2_SUBNET: &str = "10.244.2.0/24";
const WIN2_IP: &str = "192.168.77.12";
const SUBNET_FILE: &str = "/run/flannel/subnet.env";

fn lease(subnet: &str, public_ip: &str, backend: &str) -> FlannelLease {
    FlannelLease {
        subnet: subnet.parse().expect("subnet"),
        public_ip: ip(public_ip),
        backend: backend.into(),
    }
}

/// The findings of `snap`, which must all be of `kind`; at least one.
fn only(snap: &NodeSnapshot, kind: ProblemKind) -> Vec<Finding> {
    let found = diagnose(snap);
    assert!(!found.is_empty(), "no {kind} found");
    for f in &found {
        assert_eq!(f.kind, kind, "unexpected finding: {f:#?}");
        assert_eq!(f.node, "win1");
        assert!(!f.breaks.is_empty() && !f.fix.is_empty(), "{f:#?}");
    }
    found
}

fn names(f: &Finding, kind: &str, id: &str) -> bool {
    f.objects
        .iter()
        .any(|o| o.kind == kind && o.id.eq_ignore_ascii_case(id))
}

#[test]
fn a_healthy_node_yields_nothing() {
    assert_eq!(diagnose(&healthy()), vec![]);
}

#[test]
fn a_snapshot_survives_json_unchanged() {
    let snap = healthy();
    let text = serde_json::to_string(&snap).expect("serialize");
    let back: NodeSnapshot = serde_json::from_str(&text).expect("deserialize");
    assert_eq!(back, snap);
    assert_eq!(diagnose(&back), diagnose(&snap));
}

#[test]
fn a_remote_endpoint_with_a_local_pods_ip() {
    let mut s = healthy();
    let stale = "33333333-0000-0000-0000-0000000000ff";
    s.hns.endpoints.push(endpoint(stale, POD_IP, true, &[]));
    let f = only(&s, ProblemKind::RemoteEndpointIsLocalPod);
    assert_eq!(f.len(), 1);
    assert!(names(&f[0], "Endpoint", stale) && names(&f[0], "Endpoint", EP));
    assert!(names(&f[0], "Pod", "default/web1"));
    assert!(
        matches!(&f[0].repair, Some(Repair::DeleteEndpoint { id, .. }) if id.eq_ignore_ascii_case(stale))
    );
}

#[test]
fn two_endpoints_with_one_ip() {
    let mut s = healthy();
    let other = "33333333-0000-0000-0000-0000000000aa";
    s.hns.endpoints.push(endpoint(other, REMOTE_IP, true, &[]));
    let f = only(&s, ProblemKind::DuplicateEndpointIp);
    assert!(names(&f[0], "Endpoint", other) && names(&f[0], "Endpoint", REMOTE));
}

#[test]
fn an_endpoint_without_a_pod_and_a_pod_without_an_endpoint() {
    let mut s = healthy();
    s.kube.pods[0].ip = Some(ip("10.244.1.99"));
    let found = diagnose(&s);
    let kinds: Vec<ProblemKind> = found.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        vec![
            ProblemKind::EndpointWithoutPod,
            ProblemKind::PodWithoutEndpoint
        ]
    );
    assert!(names(&found[0], "Endpoint", EP));
    assert!(names(&found[1], "Pod", "default/web1"));
    // Unknown pods are not "no pods": the pod checks are skipped.
    s.kube.pods_known = false;
    s.kube.pods.clear();
    assert_eq!(diagnose(&s), vec![]);
}

#[test]
fn a_load_balancer_without_a_service() {
    let mut s = healthy();
    let stale = "44444444-0000-0000-0000-0000000000ee";
    s.hns
        .load_balancers
        .push(lb(stale, "10.96.0.99", 80, &[EP], 0));
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0]
            .rules
            .push(rule("LoadBalancer", stale));
    }
    let f = only(&s, ProblemKind::LoadBalancerWithoutService);
    assert!(names(&f[0], "LoadBalancer", stale));
    // Without the Services (hnsd's own gauges), no load balancer is called orphaned.
    s.kube.services_known = false;
    s.kube.services.clear();
    assert_eq!(diagnose(&s), vec![]);
}

#[test]
fn a_service_port_without_a_load_balancer() {
    let mut s = healthy();
    s.hns.load_balancers.clear();
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0]
            .rules
            .retain(|r| r.owner_kind != "LoadBalancer");
    }
    let f = only(&s, ProblemKind::ServicePortWithoutLoadBalancer);
    assert!(names(&f[0], "Service", "default/web"));
    assert!(names(&f[0], "Frontend", "10.96.0.10:80/TCP"));
    assert_eq!(f[0].repair, Some(Repair::ResyncProxy));
}

#[test]
fn internal_traffic_policy_local_without_a_local_endpoint_needs_no_load_balancer() {
    let mut s = healthy();
    s.kube.services[0].internal_policy_local = true;
    s.kube.services[0]
        .endpoints
        .retain(|e| e.ip == ip(REMOTE_IP));
    s.hns.load_balancers.clear();
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0]
            .rules
            .retain(|r| r.owner_kind != "LoadBalancer");
    }
    assert_eq!(diagnose(&s), vec![]);
}

#[test]
fn a_dual_stack_service_has_one_load_balancer_per_family_over_that_familys_addresses() {
    let mut s = healthy();
    let mut ep = endpoint(EP, POD_IP, false, &EXCEPTIONS);
    ep.ip_configurations.push(hcn::IpConfig {
        ip_address: Some(ip("fd00:10:244:1::5")),
        prefix_length: 64,
    });
    s.hns.endpoints[0] = ep;
    let svc = &mut s.kube.services[0];
    svc.cluster_ips.push(ip("fd00:10:96::10"));
    svc.endpoints.push(ServiceEndpoint {
        ip: ip("fd00:10:244:1::5"),
        node: Some("win1".into()),
        ready: true,
        serving: true,
    });
    s.kube.pods[0].ip = Some(ip(POD_IP));
    let v6 = "44444444-0000-0000-0000-000000000006";
    s.hns
        .load_balancers
        .push(lb(v6, "fd00:10:96::10", 80, &[EP], 2));
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0].rules.push(rule("LoadBalancer", v6));
    }
    assert_eq!(diagnose(&s), vec![]);
    // The IPv6 load balancer missing is named with its own frontend.
    s.hns.load_balancers.pop();
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0].rules.pop();
    }
    let f = only(&s, ProblemKind::ServicePortWithoutLoadBalancer);
    assert!(
        names(&f[0], "Frontend", "[fd00:10:96::10]:80/TCP")
            || names(&f[0], "Frontend", "fd00:10:96::10:80/TCP"),
        "{f:#?}"
    );
}

#[test]
fn backends_that_are_not_the_ready_endpoints() {
    let mut s = healthy();
    s.kube.services[0].endpoints[1].ready = false;
    let f = only(&s, ProblemKind::LoadBalancerBackendsDiffer);
    assert!(names(&f[0], "LoadBalancer", LB) && names(&f[0], "Service", "default/web"));
    assert!(f[0].summary.contains(REMOTE_IP), "{}", f[0].summary);
}

#[test]
fn a_frontend_held_by_two_load_balancers() {
    let mut s = healthy();
    let twin = "44444444-0000-0000-0000-0000000000dd";
    s.hns
        .load_balancers
        .push(lb(twin, VIP, 80, &[EP, REMOTE], 0));
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0].rules.push(rule("LoadBalancer", twin));
    }
    let f = only(&s, ProblemKind::FrontendHeldTwice);
    assert!(names(&f[0], "LoadBalancer", twin) && names(&f[0], "LoadBalancer", LB));
}

#[test]
fn an_object_whose_rules_are_missing_and_rules_whose_owner_is_gone() {
    let mut s = healthy();
    let gone = "44444444-0000-0000-0000-0000000000cc";
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0].rules = vec![rule("Endpoint", EP), rule("LoadBalancer", gone)];
    }
    let found = diagnose(&s);
    let kinds: Vec<ProblemKind> = found.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        vec![ProblemKind::RulesMissing, ProblemKind::RulesWithoutOwner]
    );
    assert!(names(&found[0], "LoadBalancer", LB));
    assert!(found[1].objects[0].id.contains(gone));
    // A pod endpoint without a port is missing too.
    let mut s = healthy();
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].endpoint = None;
    }
    let f = only(&s, ProblemKind::RulesMissing);
    assert!(names(&f[0], "Endpoint", EP));
}

/// The healthy snapshot with the compiler's placements recorded, as hnsd's dumps have them.
fn placed() -> NodeSnapshot {
    let mut s = healthy();
    if let Some(sw) = s.switch.as_mut() {
        let port = sw.ports[0].id;
        sw.placed = [("LoadBalancer", LB), ("Endpoint", EP)]
            .iter()
            .map(|(kind, id)| PlacedDump {
                port,
                layer: "SLB".into(),
                owner_kind: kind.to_string(),
                owner_id: id.to_string(),
                rules: 1,
            })
            .collect();
    }
    s
}

#[test]
fn rules_removed_or_added_by_hand_against_the_compilers_placements() {
    assert_eq!(diagnose(&placed()), Vec::new());
    // The load balancer's rule removed from the port (vfpctrl /remove-rule).
    let mut s = placed();
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0]
            .rules
            .retain(|r| r.owner_kind != "LoadBalancer");
    }
    let f = only(&s, ProblemKind::RulesMissing);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(names(&f[0], "LoadBalancer", LB), "{f:#?}");
    assert!(f[0].summary.contains("1 of its 1 rules"), "{f:#?}");
    // A rule added by hand, and a second rule under the endpoint's name: neither was placed.
    let mut s = placed();
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0]
            .rules
            .push(rule("Operator", "block-dns"));
        sw.ports[0].layers[0].rules.push(rule("Endpoint", EP));
    }
    let f = only(&s, ProblemKind::RulesWithoutOwner);
    assert_eq!(f.len(), 2, "{f:#?}");
    assert!(names(&f[0], "Rule", &format!("Endpoint {EP}")), "{f:#?}");
    assert!(names(&f[1], "Rule", "Operator block-dns"), "{f:#?}");
    assert!(f[1].summary.contains("added by hand"), "{f:#?}");
}

#[test]
fn a_probe_that_pings_outside_the_cluster_through_outbound_nat() {
    let probe = |cmd: &[&str]| doctor::snapshot::ExecProbe {
        container: "web".into(),
        probe: "liveness".into(),
        command: cmd.iter().map(|s| s.to_string()).collect(),
    };
    let mut s = healthy();
    s.kube.pods[0].exec_probes = vec![
        probe(&["ping", "-n", "1", "8.8.8.8"]),
        // Inside the cluster: pods and the underlay are reached untranslated.
        probe(&["ping", "-n", "1", REMOTE_IP]),
        probe(&["ping", "-n", "1", "192.168.77.1"]),
        // Over TCP: carried.
        probe(&["powershell", "Test-NetConnection 8.8.8.8 -Port 53"]),
    ];
    let f = only(&s, ProblemKind::IcmpProbeThroughOutboundNat);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(names(&f[0], "Pod", "default/web1"), "{f:#?}");
    assert!(f[0].summary.contains("8.8.8.8"), "{f:#?}");
    assert!(
        f[0].source
            .as_deref()
            .is_some_and(|s| s.contains("windows-networking.md")),
        "{f:#?}"
    );
    // A build that carries ICMP through NAT (unrestricted) has no such problem.
    s.profile.no_icmp_through_nat = false;
    assert_eq!(diagnose(&s), vec![]);
}

#[test]
fn an_overlay_remote_subnet_without_its_encap_rule() {
    let mut s = healthy();
    s.hns.networks = vec![network(
        "Overlay",
        json!([{"Type": "RemoteSubnetRoute", "Settings": {
            "DestinationPrefix": "10.244.2.0/24", "ProviderAddress": "192.168.77.11",
            "DistributedRouterMacAddress": "0E-2A-C0-A8-4D-0B", "IsolationId": 4096}}]),
    )];
    let f = only(&s, ProblemKind::RemoteSubnetWithoutEncap);
    assert!(names(&f[0], "Network", NET));
    assert!(f[0].summary.contains("10.244.2.0/24"));
    // With the rule in place the node is healthy again.
    if let Some(sw) = s.switch.as_mut() {
        sw.ports[0].layers[0].rules.push(RuleDump {
            destinations: vec!["10.244.2.0/24".parse().expect("prefix")],
            action: "encap vxlan to 192.168.77.11".into(),
            ..rule("Network", NET)
        });
    }
    assert_eq!(diagnose(&s), vec![]);
}

#[test]
fn an_endpoint_without_its_tap_and_a_tap_without_its_endpoint() {
    let mut s = healthy();
    if let Some(k) = s.kernel.as_mut() {
        k.pods[0].links[0].name = "eth1".into();
    }
    let found = diagnose(&s);
    let kinds: Vec<ProblemKind> = found.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        vec![
            ProblemKind::EndpointWithoutTap,
            ProblemKind::TapWithoutEndpoint
        ]
    );
    assert!(names(&found[0], "Endpoint", EP));
    assert!(names(&found[1], "Tap", &format!("{NETNS}:eth1")));
}

#[test]
fn a_namespace_left_behind() {
    let mut s = healthy();
    let leaked = "hcn-55555555-0000-0000-0000-000000000001";
    let other_node = "hcn-55555555-0000-0000-0000-000000000002";
    if let Some(k) = s.kernel.as_mut() {
        k.named_netns.push(leaked.into());
        k.named_netns.push(other_node.into());
        k.owned_elsewhere.push(other_node.into());
    }
    let f = only(&s, ProblemKind::LeakedNamespace);
    assert_eq!(f.len(), 1);
    assert!(names(&f[0], "Netns", leaked));
    assert_eq!(
        f[0].repair,
        Some(Repair::DeleteNetns {
            name: leaked.into()
        })
    );
}

#[test]
fn an_exception_that_covers_an_external_destination() {
    let mut s = healthy();
    let mut ex = EXCEPTIONS.to_vec();
    ex.push("8.8.8.0/24");
    s.hns.endpoints[0] = endpoint(EP, POD_IP, false, &ex);
    let f = only(&s, ProblemKind::ExceptionCoversExternal);
    assert!(names(&f[0], "Endpoint", EP) && f[0].summary.contains("8.8.8.0/24"));
}

#[test]
fn exceptions_that_miss_the_cluster_cidr() {
    let mut s = healthy();
    s.hns.endpoints[0] = endpoint(EP, POD_IP, false, &["10.96.0.0/12", "192.168.77.0/24"]);
    let f = only(&s, ProblemKind::ExceptionsMissClusterCidr);
    assert!(names(&f[0], "Endpoint", EP) && f[0].summary.contains("10.244.0.0/16"));
}

/// Loopback DSR's OutBoundNAT names the pod's own address: it translates only the hairpin, so
/// a config with no other OutBoundNAT has no exceptions to miss.
#[test]
fn the_loopback_dsr_policy_alone_needs_no_exceptions() {
    let mut s = healthy();
    let mut ep = endpoint(EP, POD_IP, false, &[]);
    ep.policies = vec![hcn::EndpointPolicy::OutBoundNat(
        hcn::policy::OutboundNatPolicySetting {
            destinations: vec![POD_IP.into()],
            ..Default::default()
        },
    )];
    s.hns.endpoints[0] = ep;
    let found = diagnose(&s);
    assert!(
        found
            .iter()
            .all(|f| f.kind != ProblemKind::ExceptionsMissClusterCidr),
        "{found:?}"
    );
}

#[test]
fn a_pod_whose_dns_differs_from_its_endpoint() {
    let mut s = healthy();
    if let Some(k) = s.kernel.as_mut() {
        k.pods[0].resolv_conf = Some("nameserver 8.8.8.8\n".into());
    }
    let f = only(&s, ProblemKind::PodDnsDiffers);
    assert!(names(&f[0], "Endpoint", EP) && f[0].summary.contains("8.8.8.8"));
}

#[test]
fn snat_port_pressure_on_a_node_address() {
    let mut s = healthy();
    if let Some(sw) = s.switch.as_mut() {
        sw.snat_pools[0].busiest = vec![("tcp".into(), 16000)];
    }
    let f = only(&s, ProblemKind::SnatPortPressure);
    assert!(names(&f[0], "SnatPool", "192.168.77.10"));
}

#[test]
fn ws2022_nodeport_on_overlay() {
    let mut s = healthy();
    s.profile.name = "ws2022".into();
    s.hns.networks = vec![network("Overlay", json!([]))];
    s.kube.services[0].service_type = "NodePort".into();
    s.kube.services[0].ports[0].node_port = Some(30080);
    let f = only(&s, ProblemKind::Ws2022NodePortOnOverlay);
    assert!(names(&f[0], "Service", "default/web"));
    assert!(
        f[0].source
            .as_deref()
            .is_some_and(|s| s.contains("Windows-Containers#204"))
    );
    // The documented workaround clears it.
    s.kube.services[0].external_policy_local = true;
    assert!(
        diagnose(&s)
            .iter()
            .all(|f| f.kind != ProblemKind::Ws2022NodePortOnOverlay)
    );
}

#[test]
fn ws2022_l2bridge_with_dsr() {
    let mut s = healthy();
    s.profile.name = "ws2022".into();
    s.hns.load_balancers = vec![lb(LB, VIP, 80, &[EP, REMOTE], 1)];
    let f = only(&s, ProblemKind::Ws2022L2BridgeDsr);
    assert!(names(&f[0], "LoadBalancer", LB));
    assert!(f[0].source.is_some());
}

#[test]
fn more_backends_than_the_profile_takes() {
    let mut s = healthy();
    s.profile.backend_limit = Some(1);
    let f = only(&s, ProblemKind::BackendLimit);
    assert!(names(&f[0], "Service", "default/web"));
}

#[test]
fn every_kind_has_a_name_and_a_windows_tool_and_counts_cover_them() {
    let counts = doctor::counts(&[]);
    assert_eq!(counts.len(), ProblemKind::ALL.len());
    let mut names: Vec<&str> = ProblemKind::ALL.iter().map(|k| k.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), ProblemKind::ALL.len());
    for k in ProblemKind::ALL {
        assert!(!k.windows_tool().is_empty());
        let json = serde_json::to_string(&k).expect("kind");
        assert_eq!(json, format!("\"{}\"", k.as_str()));
    }
}

#[test]
fn another_nodes_lease_without_its_host_gw_route() {
    let mut snap = healthy();
    if let Some(k) = snap.kernel.as_mut() {
        k.node.routes.clear();
    }
    let f = only(&snap, ProblemKind::FlannelRouteMissing);
    assert_eq!(f.len(), 1);
    assert!(names(&f[0], "Lease", WIN2_SUBNET), "{f:#?}");
    assert!(
        names(&f[0], "Route", &format!("{WIN2_SUBNET} via {WIN2_IP}")),
        "{f:#?}"
    );
}

#[test]
fn another_nodes_vxlan_lease_without_its_remote_subnet_route() {
    let mut snap = healthy();
    let rsr = |provider: &str| {
        json!([{"Type": "RemoteSubnetRoute", "Settings": {"DestinationPrefix": WIN2_SUBNET,
            "ProviderAddress": provider, "DistributedRouterMacAddress": "0E-2A-C0-A8-4D-0C",
            "IsolationId": 4096}}])
    };
    if let Some(fl) = snap.flannel.as_mut() {
        for l in &mut fl.leases {
            l.backend = "vxlan".into();
        }
    }
    // The route is there: no flannel finding (the switch's encap rules are another check's).
    let missing = |snap: &NodeSnapshot| -> Vec<Finding> {
        diagnose(snap)
            .into_iter()
            .filter(|f| f.kind == ProblemKind::FlannelRouteMissing)
            .collect()
    };
    snap.hns.networks = vec![network("Overlay", rsr(WIN2_IP))];
    assert_eq!(missing(&snap), vec![]);
    // Towards another provider address: the lease's is missing.
    snap.hns.networks = vec![network("Overlay", rsr("192.168.77.99"))];
    let f = missing(&snap);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(names(&f[0], "Lease", WIN2_SUBNET), "{f:#?}");
    assert!(names(&f[0], "Network", NET), "{f:#?}");
    assert!(f[0].summary.contains("RemoteSubnetRoute"), "{f:#?}");
}

#[test]
fn a_network_or_subnet_env_off_the_nodes_own_lease() {
    let mut snap = healthy();
    if let Some(fl) = snap.flannel.as_mut() {
        fl.subnet_env = Some("FLANNEL_SUBNET=10.244.9.1/24\n".into());
    }
    let f = only(&snap, ProblemKind::FlannelSubnetDiffers);
    assert_eq!(f.len(), 1);
    assert!(names(&f[0], "SubnetEnv", SUBNET_FILE), "{f:#?}");
    assert!(names(&f[0], "Lease", "10.244.1.0/24"), "{f:#?}");
    assert!(f[0].summary.contains("10.244.9.1/24"), "{f:#?}");

    let mut snap = healthy();
    if let Some(fl) = snap.flannel.as_mut() {
        fl.subnet_env = None;
    }
    let f = only(&snap, ProblemKind::FlannelSubnetDiffers);
    assert!(f[0].summary.contains("missing"), "{f:#?}");

    // The node leased another subnet than its network's (flanneld re-leased after its lease
    // expired, the network stayed).
    let mut snap = healthy();
    if let Some(fl) = snap.flannel.as_mut() {
        fl.leases[0].subnet = "10.244.5.0/24".parse().expect("subnet");
        fl.subnet_env = Some("FLANNEL_SUBNET=10.244.5.1/24\n".into());
    }
    let f = only(&snap, ProblemKind::FlannelSubnetDiffers);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(names(&f[0], "Network", NET), "{f:#?}");
    assert!(names(&f[0], "Lease", "10.244.5.0/24"), "{f:#?}");

    // No lease carries the node's IP.
    let mut snap = healthy();
    if let Some(fl) = snap.flannel.as_mut() {
        fl.leases.remove(0);
    }
    let f = only(&snap, ProblemKind::FlannelSubnetDiffers);
    assert!(names(&f[0], "Node", "win1"), "{f:#?}");
}

#[test]
fn flannel_unknown_skips_the_flannel_checks() {
    let mut snap = healthy();
    snap.flannel = None;
    if let Some(k) = snap.kernel.as_mut() {
        k.node.routes.clear();
    }
    assert_eq!(diagnose(&snap), vec![]);
}

#[test]
fn the_cluster_dns_answers_a_service_name_wrong_or_not_at_all() {
    let mut snap = healthy();
    if let Some(d) = snap.dns.as_mut() {
        d.answers[0].addresses = vec![ip("10.96.7.7")];
    }
    let f = only(&snap, ProblemKind::ClusterDnsAnswerDiffers);
    assert_eq!(f.len(), 1);
    assert!(names(&f[0], "Service", "default/web"), "{f:#?}");
    assert!(names(&f[0], "DnsName", WEB_NAME), "{f:#?}");
    assert!(
        f[0].summary.contains("10.96.7.7") && f[0].summary.contains(VIP),
        "{f:#?}"
    );

    let mut snap = healthy();
    if let Some(d) = snap.dns.as_mut() {
        d.answers[0].addresses.clear();
        d.answers[0].error = Some("timeout".into());
    }
    let f = only(&snap, ProblemKind::ClusterDnsAnswerDiffers);
    assert!(f[0].summary.contains("timeout"), "{f:#?}");
}

#[test]
fn a_pod_whose_endpoint_does_not_give_it_the_cluster_dns() {
    let mut snap = healthy();
    if let Some(d) = snap.dns.as_mut() {
        d.server = Some(ip("10.96.0.99"));
    }
    let f = only(&snap, ProblemKind::PodResolverNotClusterDns);
    assert_eq!(f.len(), 1);
    assert!(names(&f[0], "Endpoint", EP), "{f:#?}");
    assert!(names(&f[0], "Netns", NETNS), "{f:#?}");
    assert!(names(&f[0], "Service", "kube-system/kube-dns"), "{f:#?}");
    assert!(f[0].summary.contains("10.96.0.53"), "{f:#?}");
}
