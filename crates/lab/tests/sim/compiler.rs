//! The compiler as hnsd drives it: incremental changes leave the switch exactly as a rebuild
//! from scratch would, a change to one load balancer touches only its own rules, and hnsd's
//! committer feeds it through `Service::observe`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::topology::*;
use hcn::modify::ModifyRequest;
use hcn::policy::{AclAction, AclDirection, AclPolicySetting, SdnRoutePolicySetting};
use hcn::{EndpointPolicy, NetworkPolicy, SdnRoute};
use hns::Profile;
use hns::state::{Kind, Object, State, WriteOp};
use hns_compiler::{Compiler, NodeFacts, Resolver};
use lab::{Cluster, PodOptions, Who};
use vfp::{Action, Switch};

/// Every rule of a switch, by (port name, layer, owner), in a form independent of the order
/// pools and ports were created in.
fn snapshot(sw: &Switch) -> BTreeMap<(String, String, String), Vec<String>> {
    let pool = |id: vfp::PoolId| {
        sw.snat_pool(id)
            .map_or("?".to_string(), |p| p.ip.to_string())
    };
    let mut out: BTreeMap<_, Vec<String>> = BTreeMap::new();
    for port in sw.ports() {
        for layer in port.layers() {
            for g in layer.groups() {
                for r in g.rules() {
                    let action = match &r.rule.action {
                        Action::Snat { pool: p } => format!("snat {}", pool(*p)),
                        Action::LoadBalance(lb) => format!(
                            "lb {:?} {:?} snat {:?} preserve {}",
                            lb.backends,
                            lb.distribution,
                            lb.source_nat.map(pool),
                            lb.preserve_dst
                        ),
                        other => format!("{other:?}"),
                    };
                    let key = (
                        port.name().to_string(),
                        layer.name().to_string(),
                        r.origin.to_string(),
                    );
                    out.entry(key).or_default().push(format!(
                        "#{} prio {} {:?} {action} stateful {}",
                        r.index, r.rule.priority, r.rule.conditions, r.rule.stateful
                    ));
                }
            }
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

fn rebuilt(c: &Cluster, n: usize) -> Compiler {
    let node = &c.nodes[n];
    let facts = node.compiler().facts().clone();
    node.read(|state| Compiler::build(state, facts))
}

fn assert_same_as_rebuild(c: &Cluster) {
    for n in 0..c.nodes.len() {
        let fresh = rebuilt(c, n);
        let inc = &*c.nodes[n].compiler();
        assert_eq!(snapshot(inc.switch()), snapshot(fresh.switch()), "node {n}");
        assert_eq!(inc.host_claims(), fresh.host_claims());
        assert_eq!(inc.rule_count(), fresh.rule_count());
        let names = |c: &Compiler| {
            let mut v: Vec<_> = c
                .host_interfaces()
                .into_iter()
                .map(|i| (i.name, i.mac, i.addresses))
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(inc), names(&fresh));
    }
}

fn modify(kind: Kind, id: hcn::Guid, json: serde_json::Value) -> WriteOp {
    let req: ModifyRequest = hcn::decode_value(json).unwrap();
    WriteOp::Modify(kind, id, req)
}

#[test]
fn incremental_changes_leave_the_switch_as_a_rebuild_would() {
    for backend in [Backend::HostGw, Backend::Vxlan] {
        let mut t = topo(backend, Profile::Ws2022);
        assert_same_as_rebuild(&t.c);
        // An ACL added to a running pod.
        let Who::Pod(_, b) = t.b else { unreachable!() };
        let acl = EndpointPolicy::Acl(AclPolicySetting {
            id: String::new(),
            protocols: "17".parse().unwrap(),
            action: AclAction::Block,
            direction: AclDirection::Out,
            local_addresses: Default::default(),
            remote_addresses: "10.244.2.0/24".parse().unwrap(),
            local_ports: Default::default(),
            remote_ports: "53".parse().unwrap(),
            rule_type: None,
            priority: 300,
        });
        let body = serde_json::json!({"ResourceType": "Policy", "RequestType": "Add",
            "Settings": {"Policies": [acl]}});
        t.c.nodes[0].hns(modify(Kind::Endpoint, b, body)).unwrap();
        assert_same_as_rebuild(&t.c);
        // A new pod, then its deletion (detached, deleted; load balancers lose it).
        let e =
            t.c.add_pod(
                0,
                "e",
                PodOptions {
                    loopback_dsr: true,
                    ..PodOptions::default()
                },
            )
            .unwrap();
        assert_same_as_rebuild(&t.c);
        let Who::Pod(_, e) = e else { unreachable!() };
        let ns = t.c.nodes[0]
            .read(|s| s.endpoint(e).map(|e| e.host_compute_namespace))
            .unwrap();
        let body = serde_json::json!({"ResourceType": "Endpoint", "RequestType": "Remove",
            "Settings": {"EndpointId": e.to_string()}});
        t.c.nodes[0].hns(modify(Kind::Namespace, ns, body)).unwrap();
        t.c.nodes[0].pods.remove(&e);
        t.c.nodes[0]
            .hns(WriteOp::Delete(Kind::Endpoint, e))
            .unwrap();
        assert_same_as_rebuild(&t.c);
        // A load balancer deleted.
        let lb = t.c.nodes[0]
            .read(|s| s.load_balancers().next().map(|l| l.id))
            .unwrap();
        t.c.nodes[0]
            .hns(WriteOp::Delete(Kind::LoadBalancer, lb))
            .unwrap();
        assert_same_as_rebuild(&t.c);
        // An SDN route object on pod b.
        let r = SdnRoute {
            host_compute_endpoints: vec![b],
            setting: vec![SdnRoutePolicySetting {
                destination_prefix: "172.16.0.0/16".parse().ok(),
                next_hop: None,
                need_encap: true,
            }],
            ..SdnRoute::default()
        };
        let rid = t.c.nodes[0].create(Object::Route(r)).unwrap();
        assert_same_as_rebuild(&t.c);
        t.c.nodes[0].hns(WriteOp::Delete(Kind::Route, rid)).unwrap();
        assert_same_as_rebuild(&t.c);
        // Overlay: a remote subnet route removed and added back with another DR MAC.
        if backend == Backend::Vxlan {
            let net = t.c.nodes[0].network.clone().unwrap().id;
            let old = t.c.nodes[0]
                .read(|s| {
                    s.network(net)?
                        .policies
                        .iter()
                        .find(|p| matches!(p, NetworkPolicy::RemoteSubnetRoute(_)))
                        .cloned()
                })
                .unwrap();
            let body = serde_json::json!({"ResourceType": "Policy", "RequestType": "Remove",
                "Settings": {"Policies": [old.clone()]}});
            t.c.nodes[0].hns(modify(Kind::Network, net, body)).unwrap();
            assert_same_as_rebuild(&t.c);
            let NetworkPolicy::RemoteSubnetRoute(mut r) = old else {
                unreachable!()
            };
            r.distributed_router_mac_address = hcn::MacAddress([0, 0x15, 0x5d, 0xee, 0, 9]);
            let body = serde_json::json!({"ResourceType": "Policy", "RequestType": "Add",
                "Settings": {"Policies": [NetworkPolicy::RemoteSubnetRoute(r)]}});
            t.c.nodes[0].hns(modify(Kind::Network, net, body)).unwrap();
            assert_same_as_rebuild(&t.c);
        }
    }
}

#[test]
fn changing_one_load_balancer_touches_only_its_own_rules() {
    // Only `unrestricted` (HNS 16.0) has HcnModifyLoadBalancer, which hnslib gates at 15.5
    // (ws2025's HNS 15.4 refuses it): the backend change is one write.
    let mut t = topo(Backend::HostGw, Profile::Unrestricted);
    let (a, b, d) = (t.a, t.b, t.d);
    for _ in 0..3 {
        assert!(t.c.tcp_syn(a, ip(WEB_LOCAL), 80).ok());
        assert!(t.c.tcp_syn(a, ip(WEB_REMOTE), 80).ok());
        assert!(t.c.tcp_syn(a, t.ip(d), 8080).ok());
    }
    let node = &mut t.c.nodes[0];
    let lb = node
        .read(|s| {
            s.load_balancers()
                .find(|l| l.frontend_vips == vec![ip(WEB_REMOTE)])
                .cloned()
        })
        .unwrap();
    let hits = |sw: &Switch| {
        let mut m = BTreeMap::new();
        for p in sw.ports() {
            for l in p.layers() {
                for g in l.groups() {
                    for r in g.rules() {
                        let key = (
                            p.name().to_string(),
                            l.name().to_string(),
                            r.origin.to_string(),
                            r.index,
                        );
                        m.insert(key, r.hits);
                    }
                }
            }
        }
        m
    };
    let before = hits(node.compiler().switch());
    assert!(before.values().any(|h| *h > 0));
    // The Service behind 10.96.0.20 now has pod b as its backend.
    let Who::Pod(_, b_ep) = b else { unreachable!() };
    let mut changed = lb.clone();
    changed.host_compute_endpoints = vec![b_ep];
    node.hns(WriteOp::UpdateLoadBalancer(lb.id, changed))
        .unwrap();
    let after = hits(node.compiler().switch());
    let owner = format!("LoadBalancer {}", lb.id);
    for (k, h) in &before {
        if k.2.starts_with(&owner) {
            continue;
        }
        assert_eq!(
            after.get(k),
            Some(h),
            "rule {k:?} was reinstalled or removed"
        );
    }
    assert!(after.keys().any(|k| k.2.starts_with(&owner)));
    let ex = t.c.tcp_syn(a, ip(WEB_REMOTE), 80);
    assert_eq!(ex.receiver(), Some(b), "{ex}");
    assert_same_as_rebuild(&t.c);
}

#[tokio::test]
async fn hnsd_drives_the_compiler_with_each_committed_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = hns::store::Store::open(&dir.path().join("state")).unwrap();
    let service = hns::Service::start(store, Profile::Ws2022).unwrap();
    let facts = NodeFacts {
        name: "node1".into(),
        profile: Profile::Ws2022,
        host_mac: vfp::wire::MacAddr([0, 0x15, 0x5d, 1, 0, 0x11]),
        addresses: vec!["192.168.77.11/24".parse().unwrap()],
        uplink: Some("Ethernet".into()),
        routes: Vec::new(),
        resolver: Resolver::none(),
        dynamic_ports: Default::default(),
    };
    let compiler = Arc::new(Mutex::new(Compiler::build(
        &State::new(Profile::Ws2022),
        facts,
    )));
    let c = Arc::clone(&compiler);
    service.observe(Box::new(move |state, changes| {
        c.lock().unwrap().apply(state, changes);
    }));
    let net: hcn::Network = serde_json::from_value(l2bridge_doc()).unwrap();
    let Some(Object::Network(net)) = service
        .write(WriteOp::Create(Object::Network(net)))
        .await
        .unwrap()
    else {
        panic!()
    };
    let ep = hcn::Endpoint {
        host_compute_network: net.id,
        ..hcn::Endpoint::default()
    };
    let Some(Object::Endpoint(ep)) = service
        .write(WriteOp::Create(Object::Endpoint(ep)))
        .await
        .unwrap()
    else {
        panic!()
    };
    let port = compiler.lock().unwrap().endpoint_port(ep.id);
    assert!(
        port.is_some(),
        "the endpoint's port exists once the create returned"
    );
    service
        .write(WriteOp::Delete(Kind::Endpoint, ep.id))
        .await
        .unwrap();
    assert!(compiler.lock().unwrap().endpoint_port(ep.id).is_none());
    service.shutdown();
}

fn l2bridge_doc() -> serde_json::Value {
    serde_json::json!({
        "Name": "cbr0", "Type": "L2Bridge",
        "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": "10.244.1.0/24",
            "Routes": [{"NextHop": "10.244.1.1", "DestinationPrefix": "0.0.0.0/0"}]}]}],
        "SchemaVersion": {"Major": 2, "Minor": 0}
    })
}
