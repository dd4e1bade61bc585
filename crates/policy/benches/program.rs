//! Programming NetworkPolicies into hnsd (profile ws2025), per style: 500 policies on one pod
//! (ACN#1893: 2 h one by one, 70 s batched on Windows), and 1,500 pods x 10 policies with 15
//! of the pods on this node (ACN#1875: 3 h -> 8 min). Each: the agent's first sync (plan and
//! every HNS call), its second (nothing changed: no call), and the baseline in the same run:
//! the same ACL lists and sets sent straight through `hns_client::Client`, one call per
//! endpoint (the floor any agent pays hnsd). Then the incremental path a user waits on: one
//! pod's label changing back and forth in the 1,500-pod cluster, from the objects as the source
//! hands them over to every HNS call made (`Cluster::from_objects`, plan, reconcile), p50/p99,
//! beside the floor: the same changed lists and sets sent straight to hnsd.
//! Run: `cargo bench -p policy --bench program` (`POLICY_BENCH_ROUNDS`, default 40;
//! `POLICY_BENCH_ONLY=label` for the label change alone).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hcn::{Endpoint, IpConfig, RequestType};
use hns::Profile;
use policy::agent::{Agent, Config};
use policy::{Cluster, Plan, Style};
use serde_json::{Value, json};
use testkit::hnsd::{Hnsd, create_network, l2bridge};

const LOCAL: usize = 15;

fn pod_ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        10,
        244,
        (i / 250) as u8 + 1,
        (i % 250 + 2) as u8,
    ))
}

fn pod(i: usize) -> Value {
    // This node's pods are in ns0, where the policies are; the others spread over 5 namespaces.
    let (node, ns) = if i < LOCAL {
        ("win-1", 0)
    } else {
        ("win-2", i % 5)
    };
    json!({"kind":"Pod","apiVersion":"v1",
        "metadata":{"namespace":format!("ns{ns}"),"name":format!("p{i}"),
            "labels":{"pod":format!("p{i}"),"app":format!("a{}", i % 10)}},
        "spec":{"nodeName":node,"containers":[{"name":"c"}]},"status":{"podIP":pod_ip(i).to_string()}})
}

/// `n` policies; `one_pod`: each selects pod p0, else each selects one app of every namespace.
fn policies(n: usize, one_pod: bool) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let selector = if one_pod { json!({"matchLabels":{"pod":"p0"}}) } else { json!({"matchLabels":{"app":format!("a{}", i % 10)}}) };
            json!({"kind":"NetworkPolicy","apiVersion":"networking.k8s.io/v1",
                "metadata":{"namespace":"ns0","name":format!("np{i}")},
                "spec":{"podSelector":selector,"ingress":[{
                    "from":[{"podSelector":{"matchLabels":{"app":format!("a{}", (i + 1) % 10)}}},
                            {"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":format!("ns{}", i % 5)}}}],
                    "ports":[{"protocol":"TCP","port":8000 + (i % 1000) as u16}]}]}})
        })
        .collect()
}

fn objects(docs: &[Value]) -> kubesrc::Objects {
    let text: String = docs.iter().map(|d| format!("---\n{d}\n")).collect();
    let mut o = kubesrc::Objects::default();
    kubesrc::manifests::load_text(&text, "bench", &mut o);
    o
}

fn cluster(pods: usize, policies: Vec<Value>) -> Cluster {
    let mut docs: Vec<Value> = (0..pods).map(pod).collect();
    docs.extend(policies);
    Cluster::from_objects(&objects(&docs))
}

async fn node() -> (Hnsd, Arc<hns_client::Client>, hcn::Network) {
    let hnsd = Hnsd::start_on_own_runtime(Profile::Ws2025);
    let client = Arc::new(hnsd.client());
    let net = create_network(&client, &l2bridge("cbr0", "10.244.0.0/16", "10.244.0.1")).await;
    for i in 0..LOCAL {
        let ep = Endpoint {
            name: format!("p{i}"),
            host_compute_network: net.id,
            ip_configurations: vec![IpConfig {
                ip_address: Some(pod_ip(i)),
                prefix_length: 16,
            }],
            ..Default::default()
        };
        client.create_endpoint(&ep).await.expect("endpoint");
    }
    (hnsd, client, net)
}

fn config(style: Style) -> Config {
    Config {
        style,
        node: "win-1".into(),
        network_name: "cbr0".into(),
        hns_socket: "/unused".into(),
        source: kubesrc::Source::Manifests {
            dir: "/unused".into(),
            poll: Duration::from_secs(1),
        },
        host_addresses: vec!["192.168.0.11/32".parse().expect("cidr")],
        healthz_bind: None,
    }
}

/// The agent's first and second sync, the baseline, and what was programmed.
async fn measure(c: &Cluster, style: Style) -> (Duration, Duration, Duration, usize, usize) {
    let (_hnsd, client, _) = node().await;
    let mut agent = Agent::new(Arc::clone(&client), &config(style));
    let t = Instant::now();
    let (plan, report) = agent.sync(c).await;
    let first = t.elapsed();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let t = Instant::now();
    let (_, again) = agent.sync(c).await;
    let second = t.elapsed();
    assert_eq!(again.hns_calls, 0);
    // Baseline: the same sets and lists straight to a fresh hnsd.
    let (_hnsd2, client2, net2) = node().await;
    let eps = client2.list_endpoints().await.expect("endpoints");
    let sets: Vec<_> = plan
        .sets
        .iter()
        .map(|s| s.setting().expect("set"))
        .collect();
    let t = Instant::now();
    if !sets.is_empty() {
        client2
            .set_policies(net2.id, RequestType::Add, sets)
            .await
            .expect("sets");
    }
    for ep in &eps {
        let ip = ep.ips().next().expect("address");
        let acls = policy::acl::hcn_acls(&plan.endpoints[&ip].acls, Style::Npm).expect("acls");
        // An endpoint with no ACL to hold needs no call (the agent makes none either).
        if !acls.is_empty() {
            client2.set_endpoint_acls(ep.id, acls).await.expect("acls");
        }
    }
    let floor = t.elapsed();
    (first, second, floor, plan.rule_count(), plan.sets.len())
}

/// The changed endpoints' lists and the changed sets of `new` against `old`, sent straight.
async fn floor_calls(client: &hns_client::Client, net: hcn::Guid, old: &Plan, new: &Plan) {
    let changed: Vec<_> = new
        .sets
        .iter()
        .filter(|s| !old.sets.contains(s))
        .map(|s| s.setting().expect("set"))
        .collect();
    if !changed.is_empty() {
        client
            .set_policies(net, RequestType::Update, changed)
            .await
            .expect("sets");
    }
    for ep in client.list_endpoints().await.expect("endpoints") {
        let ip = ep.ips().next().expect("address");
        if old.endpoints.get(&ip) != new.endpoints.get(&ip) {
            let acls = policy::acl::hcn_acls(&new.endpoints[&ip].acls, Style::Npm).expect("acls");
            client.set_endpoint_acls(ep.id, acls).await.expect("acls");
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

/// One remote pod of the policies' namespace moving between two apps that the policies allow
/// from, `rounds` times: the agent's path from the objects, and the floor.
async fn label_change(style: Style, rounds: usize) -> (Vec<Duration>, Vec<Duration>, usize) {
    let mut docs: Vec<Value> = (0..1500).map(pod).collect();
    docs.extend(policies(10, false));
    // p100 is in ns0, app a0; its other self is app a5.
    let moved = 100;
    let before = objects(&docs);
    docs[moved]["metadata"]["labels"]["app"] = json!("a5");
    let after = objects(&docs);
    let (_hnsd, client, net) = node().await;
    let mut agent = Agent::new(Arc::clone(&client), &config(style));
    let (mut last, _) = agent.sync(&Cluster::from_objects(&before)).await;
    let (mut took, mut floor, mut updated) = (Vec::new(), Vec::new(), 0);
    for round in 0..rounds {
        let objects = if round % 2 == 0 { &after } else { &before };
        let t = Instant::now();
        let (plan, report) = agent.sync(&Cluster::from_objects(objects)).await;
        took.push(t.elapsed());
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        updated = report.endpoints_updated + report.sets_updated;
        // The floor: the same lists and sets again, straight (hnsd holds them already, so
        // it does the same work: HNS replaces a list it is sent).
        let t = Instant::now();
        floor_calls(&client, net.id, &last, &plan).await;
        floor.push(t.elapsed());
        last = plan;
    }
    took.sort();
    floor.sort();
    (took, floor, updated)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let rounds: usize = std::env::var("POLICY_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let only_label = std::env::var("POLICY_BENCH_ONLY").is_ok_and(|v| v == "label");
    rt.block_on(async {
        for style in [Style::Calico, Style::Npm] {
            let (took, floor, updated) = label_change(style, rounds).await;
            println!(
                "one label change, 1,500 pods x 10 policies, {}: p50 {:.2} ms, p99 {:.2} ms ({updated} endpoint lists and sets changed, {rounds} rounds); floor (the same HNS calls alone): p50 {:.2} ms, p99 {:.2} ms",
                style.name(),
                percentile(&took, 0.5),
                percentile(&took, 0.99),
                percentile(&floor, 0.5),
                percentile(&floor, 0.99),
            );
        }
        if only_label {
            return;
        }
        for (what, c) in [
            ("500 policies on one pod", cluster(LOCAL, policies(500, true))),
            ("1,500 pods x 10 policies", cluster(1500, policies(10, false))),
        ] {
            for style in [Style::Calico, Style::Npm] {
                let (first, second, floor, rules, sets) = measure(&c, style).await;
                println!(
                    "{what}, {}: first sync {:.1} ms ({rules} ACL rules on {LOCAL} endpoints, {sets} sets), unchanged sync {:.1} ms; baseline (the same lists straight to hnsd) {:.1} ms; ratio {:.2}",
                    style.name(),
                    first.as_secs_f64() * 1e3,
                    second.as_secs_f64() * 1e3,
                    floor.as_secs_f64() * 1e3,
                    first.as_secs_f64() / floor.as_secs_f64()
                );
            }
        }
    });
}
