//! The agent against an hnsd in this process (`hns::InProcess`, the same API router as the
//! socket): what it sends, counted at the transport. An endpoint's ACL list goes in one call;
//! an unchanged plan sends nothing (re-applying resets live TCP on Windows), also after a
//! restart (adoption); a pod without its endpoint yet is pending; nothing is programmed before
//! the source has been read whole.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use hcn::policy::AclPolicySetting;
use hns::store::Store;
use hns::{InProcess, Profile, Service};
use hns_client::transport::Exchange;
use hns_client::{Client, Method, Transport};
use policy::agent::{self, Agent, Config};
use policy::metrics::Health;
use policy::{Cluster, Style};
use serde_json::json;

/// The in-process hnsd's transport, counting the calls that change something.
struct Counting {
    inner: InProcess,
    modifies: AtomicUsize,
    paths: Mutex<Vec<String>>,
}

impl Transport for Counting {
    fn exchange(&self, method: Method, path: &str, body: Vec<u8>) -> Exchange<'_> {
        if method != Method::GET {
            self.modifies.fetch_add(1, Ordering::SeqCst);
            self.paths.lock().unwrap().push(format!("{method} {path}"));
        }
        self.inner.exchange(method, path, body)
    }

    fn endpoint(&self) -> String {
        self.inner.endpoint()
    }
}

struct Node {
    counting: Arc<Counting>,
    client: Arc<Client>,
}

impl Node {
    async fn network(&self) -> hcn::Network {
        let found = self.client.get_network_by_name("cbr0").await.unwrap();
        found.expect("network cbr0")
    }

    fn modifies(&self) -> usize {
        self.counting.modifies.load(Ordering::SeqCst)
    }
}

/// An hnsd of `profile` with network cbr0 and an endpoint per address.
async fn node_with_endpoints(profile: Profile, ips: &[&str]) -> Node {
    let service = Arc::new(Service::start(Store::in_memory().unwrap(), profile).unwrap());
    let counting = Arc::new(Counting {
        inner: InProcess::new(service, "n1"),
        modifies: AtomicUsize::new(0),
        paths: Mutex::new(Vec::new()),
    });
    let client = Arc::new(Client::over(Arc::clone(&counting) as Arc<dyn Transport>));
    let net = testkit::hnsd::create_network(
        &client,
        &json!({"Name":"cbr0","Type":"L2Bridge","Ipams":[{"Subnets":[
            {"IpAddressPrefix":"10.244.1.0/24","Routes":[{"NextHop":"10.244.1.1","DestinationPrefix":"0.0.0.0/0"}]},
            {"IpAddressPrefix":"fd00:244:1::/64","Routes":[{"NextHop":"fd00:244:1::1","DestinationPrefix":"::/0"}]}]}]}),
    )
    .await;
    for (i, ip) in ips.iter().enumerate() {
        let ep = hcn::Endpoint {
            name: format!("pod{i}"),
            host_compute_network: net.id,
            // "v4" or "v4,v6": a dual-stack endpoint.
            ip_configurations: ip
                .split(',')
                .map(|a| {
                    let address: IpAddr = a.parse().unwrap();
                    hcn::IpConfig {
                        ip_address: Some(address),
                        prefix_length: if address.is_ipv4() { 24 } else { 64 },
                    }
                })
                .collect(),
            // The CNI's policy, which the agent's ACL updates must leave alone.
            policies: vec![hcn::EndpointPolicy::OutBoundNat(
                hcn::policy::OutboundNatPolicySetting {
                    exceptions: vec!["10.244.0.0/16".into()],
                    ..Default::default()
                },
            )],
            ..Default::default()
        };
        client.create_endpoint(&ep).await.unwrap();
    }
    counting.modifies.store(0, Ordering::SeqCst);
    counting.paths.lock().unwrap().clear();
    Node { counting, client }
}

fn config(style: Style) -> Config {
    Config {
        style,
        node: "n1".into(),
        network_name: "cbr0".into(),
        hns_socket: "/nonexistent".into(),
        source: kubesrc::Source::Manifests {
            dir: "/nonexistent".into(),
            poll: std::time::Duration::from_millis(50),
        },
        host_addresses: vec!["192.168.0.11/32".parse().unwrap()],
        healthz_bind: None,
    }
}

const PODS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: x, labels: {ns: x}}
---
apiVersion: v1
kind: Pod
metadata: {namespace: x, name: a, labels: {pod: a}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {podIP: 10.244.1.2}
---
apiVersion: v1
kind: Pod
metadata: {namespace: x, name: b, labels: {pod: b}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {podIP: 10.244.1.3}
"#;

const ALLOW_B_TO_A: &str = r#"
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: allow-b}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{protocol: TCP, port: 80}]
"#;

fn cluster(text: &str) -> Cluster {
    let mut objects = kubesrc::Objects::default();
    kubesrc::manifests::load_text(text, "test", &mut objects);
    let c = Cluster::from_objects(&objects);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    c
}

async fn acls_of(client: &Client, ip: &str) -> Vec<AclPolicySetting> {
    let ip: IpAddr = ip.parse().unwrap();
    let eps = client.list_endpoints().await.unwrap();
    let ep = eps.iter().find(|e| e.ips().any(|i| i == ip)).unwrap();
    hns_client::acl::endpoint_acls(ep)
        .into_iter()
        .cloned()
        .collect()
}

/// How many endpoints hold their OutBoundNAT policy.
async fn nat_policies(client: &Client) -> usize {
    let eps = client.list_endpoints().await.unwrap();
    eps.iter()
        .filter(|e| {
            e.policies
                .iter()
                .any(|p| matches!(p, hcn::EndpointPolicy::OutBoundNat(_)))
        })
        .count()
}

#[tokio::test]
async fn one_call_per_endpoint_and_none_when_nothing_changed_even_after_a_restart() {
    let node = node_with_endpoints(Profile::Ws2022, &["10.244.1.2", "10.244.1.3"]).await;
    let c = cluster(&format!("{PODS}{ALLOW_B_TO_A}"));
    let mut agent = Agent::new(Arc::clone(&node.client), &config(Style::Calico));
    let (plan, report) = agent.sync(&c).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        (report.endpoints_updated, node.modifies()),
        (2, 2),
        "one call per endpoint"
    );
    // HNS holds exactly the plan: a's list (host allow, b -> a on TCP 80, Block; the
    // profile's allow and Block outbound) and b's.
    for (ip, wanted) in &plan.endpoints {
        let held = acls_of(&node.client, &ip.to_string()).await;
        let planned = policy::acl::hcn_acls(&wanted.acls, Style::Calico).unwrap();
        assert_eq!(held, planned, "{ip}");
    }
    assert_eq!(
        nat_policies(&node.client).await,
        2,
        "felix's v1 update carries its ACLs alone, and each endpoint keeps its OutBoundNAT"
    );
    let a = &plan.endpoints[&"10.244.1.2".parse::<IpAddr>().unwrap()].acls;
    let described: Vec<String> = a.iter().map(|x| x.describe()).collect();
    assert_eq!(
        described,
        [
            "allow-host-to-endpoint (Allow In priority 900) remote 192.168.0.11/32",
            "policy-x/knp.default.allow-b-in0.0.0-0 (Allow In priority 1000) protocol 6 remote 10.244.1.3/32 local ports 80",
            "Block In priority 1001",
            "profile-kns.x-allow-all-0 (Allow Out priority 1000)",
            "Block Out priority 1001",
        ]
    );

    // The same objects again: nothing sent.
    let (_, again) = agent.sync(&c).await;
    assert_eq!(
        (
            again.endpoints_updated,
            again.endpoints_unchanged,
            node.modifies()
        ),
        (0, 2, 2)
    );
    // A new agent (a restart) adopts what the first one programmed.
    let mut restarted = Agent::new(Arc::clone(&node.client), &config(Style::Calico));
    let (_, adopted) = restarted.sync(&c).await;
    assert_eq!((adopted.endpoints_updated, node.modifies()), (0, 2));

    // The policy goes: only a's list changes.
    let (_, after) = restarted.sync(&cluster(PODS)).await;
    assert_eq!(
        (
            after.endpoints_updated,
            after.endpoints_unchanged,
            node.modifies()
        ),
        (1, 1, 3)
    );
    assert_eq!(
        acls_of(&node.client, "10.244.1.2").await,
        acls_of(&node.client, "10.244.1.3").await
    );
}

#[tokio::test]
async fn a_pod_without_its_endpoint_waits_and_is_programmed_once_it_has_one() {
    let node = node_with_endpoints(Profile::Ws2022, &["10.244.1.2"]).await;
    let c = cluster(&format!("{PODS}{ALLOW_B_TO_A}"));
    let mut agent = Agent::new(Arc::clone(&node.client), &config(Style::Calico));
    let (_, first) = agent.sync(&c).await;
    assert_eq!(first.endpoints_pending, ["x/b"]);
    assert!(first.needs_retry());
    let net = node.network().await;
    let ep = hcn::Endpoint {
        name: "b".into(),
        host_compute_network: net.id,
        ip_configurations: vec![hcn::IpConfig {
            ip_address: Some("10.244.1.3".parse().unwrap()),
            prefix_length: 24,
        }],
        ..Default::default()
    };
    node.client.create_endpoint(&ep).await.unwrap();
    let (_, second) = agent.sync(&c).await;
    assert!(!second.needs_retry(), "{second:?}");
    assert_eq!(
        (second.endpoints_updated, second.endpoints_unchanged),
        (1, 1)
    );
}

#[tokio::test]
async fn nothing_is_programmed_before_the_source_is_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    // One file that does not parse: the folder is not synced.
    std::fs::write(
        dir.path().join("objects.yaml"),
        format!("{PODS}\n---\n{{ not yaml"),
    )
    .unwrap();
    let mut objects = kubesrc::manifests::watch(
        dir.path().to_path_buf(),
        std::time::Duration::from_millis(20),
    );
    let health = Arc::new(Health::default());
    let waiting = {
        let health = Arc::clone(&health);
        tokio::spawn(async move { agent::first_synced(&mut objects, &health).await })
    };
    testkit::wait::until_async(
        "the source's error to be reported",
        std::time::Duration::from_secs(10),
        || {
            let health = Arc::clone(&health);
            async move {
                (health
                    .metrics
                    .render()
                    .contains("winnet_policy_source_errors 1"))
                .then_some(())
            }
        },
    )
    .await;
    assert!(
        !waiting.is_finished(),
        "a source read in part must not be acted on"
    );
    std::fs::write(dir.path().join("objects.yaml"), PODS).unwrap();
    let cluster = waiting
        .await
        .unwrap()
        .expect("synced once the file reads whole");
    assert_eq!(cluster.pods.len(), 2);
}

/// The npm style needs SetPolicy (HNS 13.0: the ws2025 and unrestricted profiles; the table
/// has ws2022 at HNS 12.1).
#[tokio::test]
async fn npm_sets_come_before_the_acls_naming_them_and_go_after() {
    let node = node_with_endpoints(Profile::Ws2025, &["10.244.1.2", "10.244.1.3"]).await;
    let mut agent = Agent::new(Arc::clone(&node.client), &config(Style::Npm));
    let (plan, report) = agent.sync(&cluster(&format!("{PODS}{ALLOW_B_TO_A}"))).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    // One Add of the three sets, then a's ACL list; b is selected by nothing and untouched.
    assert_eq!(
        (
            report.sets_added,
            report.endpoints_updated,
            report.endpoints_unchanged
        ),
        (3, 1, 1)
    );
    let paths = node.counting.paths.lock().unwrap().clone();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(
        paths[0].contains("/networks/") && paths[1].contains("/endpoints/"),
        "{paths:?}"
    );
    let held = acls_of(&node.client, "10.244.1.2").await;
    let peer = policy::acl::set_id("ns-x&podlabel-pod:b");
    assert_eq!(held[0].id, "azure-acl-x-allow-b");
    assert!(
        held[0].remote_addresses.sets().any(|s| s == peer),
        "{held:?}"
    );
    assert_eq!(
        held.len(),
        plan.endpoints.values().map(|e| e.acls.len()).sum::<usize>()
    );
    // Unchanged: nothing sent.
    let (_, again) = agent.sync(&cluster(&format!("{PODS}{ALLOW_B_TO_A}"))).await;
    assert_eq!((again.hns_calls, node.modifies()), (0, 2));
    // The policy goes: a's ACLs first, then the sets nothing names any more.
    let (_, gone) = agent.sync(&cluster(PODS)).await;
    assert!(gone.errors.is_empty(), "{:?}", gone.errors);
    assert_eq!((gone.endpoints_updated, gone.sets_removed), (1, 3));
    let paths = node.counting.paths.lock().unwrap().clone();
    assert!(
        paths[2].contains("/endpoints/") && paths[3].contains("/networks/"),
        "{paths:?}"
    );
    assert!(acls_of(&node.client, "10.244.1.2").await.is_empty());
    assert_eq!(nat_policies(&node.client).await, 2, "the OutBoundNAT stays");
    let net = node.network().await;
    assert!(
        !net.policies
            .iter()
            .any(|p| matches!(p, hcn::NetworkPolicy::SetPolicy(_)))
    );
}

#[tokio::test]
async fn a_dual_stack_pod_is_programmed_once_by_its_ipv4_address() {
    let node =
        node_with_endpoints(Profile::Ws2022, &["10.244.1.2,fd00:244:1::2", "10.244.1.3"]).await;
    let dual = PODS.replace(
        "status: {podIP: 10.244.1.2}",
        "status: {podIP: 10.244.1.2, podIPs: [{ip: 10.244.1.2}, {ip: \"fd00:244:1::2\"}]}",
    );
    assert_ne!(dual, PODS);
    let c = cluster(&format!("{dual}{ALLOW_B_TO_A}"));
    let mut agent = Agent::new(Arc::clone(&node.client), &config(Style::Calico));
    let (_, first) = agent.sync(&c).await;
    assert_eq!(
        (first.endpoints_updated, node.modifies()),
        (2, 2),
        "{first:?}"
    );
    assert_eq!(acls_of(&node.client, "10.244.1.2").await.len(), 5);
    let (_, again) = agent.sync(&c).await;
    assert_eq!(
        (again.endpoints_unchanged, node.modifies()),
        (2, 2),
        "{again:?}"
    );
}

#[tokio::test]
async fn the_npm_style_refuses_to_start_on_an_hns_without_set_policy() {
    let old = node_with_endpoints(Profile::Ws2022, &[]).await;
    let e = agent::check_hns(&old.client, Style::Npm).await.unwrap_err();
    assert!(e.contains("needs SetPolicy") && e.contains("12.1"), "{e}");
    agent::check_hns(&old.client, Style::Calico).await.unwrap();
    let new = node_with_endpoints(Profile::Ws2025, &[]).await;
    agent::check_hns(&new.client, Style::Npm).await.unwrap();
}
