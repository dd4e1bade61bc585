//! A NetworkPolicy explained on the local cluster with real packets: applied with `winnet
//! cluster apply` (the calico-style agents program the ACLs), probed, traced — the trace names
//! the NetworkPolicy and rule behind the deciding ACL, what felix skipped (a named port) and a
//! Linux node's verdict — then its ACLs removed by hand through `winnet hns` (the HCN API): on
//! win-2, the doctor over both nodes names the policy applied on win-1 and not on win-2; on
//! win-1, it names the endpoint, the policy and the fix, and the trace of the packet now
//! dropped says a Linux node would allow it. Root only; the cluster goes down even when the
//! test fails.

mod local_cluster;

use local_cluster::{one_at_a_time, pod_ip, require_root, text, winnet};
use serde_json::{Value, json};

/// Takes the cluster down when dropped (a failing test leaves nothing).
struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        let _ = winnet(&["cluster", "down"]);
    }
}

const TOPOLOGY: &str = "mode: l2bridge\nprofile: ws2022\nnetworkPolicyStyle: calico\n\
namespaces:\n  - {name: x, labels: {ns: x}}\n\
nodes:\n  - name: win-1\n    os: windows\n    pods:\n\
\x20     - {name: a, namespace: x, labels: {pod: a}, serve: [tcp/80]}\n\
\x20     - {name: b, namespace: x, labels: {pod: b}, serve: [tcp/80]}\n\
\x20     - {name: c, namespace: x, labels: {pod: c}, serve: [tcp/80]}\n\
\x20 - name: win-2\n    os: windows\n    pods:\n\
\x20     - {name: d, namespace: x, labels: {pod: a}, serve: [tcp/80]}\n";

const POLICY: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: allow-b, namespace: x}\n\
spec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress:\n\
\x20 - from: [{podSelector: {matchLabels: {pod: b}}}]\n    ports: [{protocol: TCP, port: 80}]\n";

/// c -> a by the port's name, which felix cannot express on Windows: it skips the rule.
const NAMED_PORT: &str = "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\n\
metadata: {name: allow-c-named, namespace: x}\n\
spec:\n  podSelector: {matchLabels: {pod: a}}\n  ingress:\n\
\x20 - from: [{podSelector: {matchLabels: {pod: c}}}]\n    ports: [{protocol: TCP, port: serve-80-tcp}]\n";

/// Runs winnet, which must succeed; what it printed is shown unless it is JSON.
fn ok(args: &[&str]) -> String {
    let out = winnet(args);
    assert!(out.status.success(), "winnet {args:?}: {}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    if !args.contains(&"--json") && !args.contains(&"json") {
        eprintln!("$ winnet {}\n{s}", args.join(" "));
    }
    s
}

/// Whether `from` reaches `to` on TCP 80, from `winnet cluster probe`.
fn connected(from: &str, to: &str) -> bool {
    let cells: Vec<Value> =
        serde_json::from_str(&ok(&["cluster", "probe", "--json"])).expect("probe json");
    cells
        .iter()
        .find(|c| c["from"] == from && c["to"] == to)
        .and_then(|c| c["connected"].as_bool())
        .unwrap_or_else(|| panic!("no {from} -> {to} in {cells:#?}"))
}

/// The trace's explanation of the ACL layer of pod `to`'s port, for TCP from `from` to `to`:80.
fn traced(from: &str, to: &str) -> Value {
    let dest = format!("{}:80", pod_ip(to));
    let args = [
        "trace",
        "--node",
        "win-1",
        "--from",
        &pod_ip(from),
        "--to",
        &dest,
    ];
    ok(&args);
    let answer: Value =
        serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).expect("trace --json");
    // The ACL layer of `to`'s port: the step where the packet goes into its device.
    answer["NetworkPolicy"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| {
            let step = e["Step"].as_u64().unwrap_or(0) as usize;
            answer["Trace"]["Steps"][step.saturating_sub(1)]["Direction"] == "in"
        })
        .cloned()
        .unwrap_or_else(|| panic!("no NetworkPolicy explanation into {to}: {answer:#}"))
}

/// The doctor's findings on win-1 (JSON) and whether it exited 0.
fn doctor() -> (Vec<Value>, bool) {
    let out = winnet(&["doctor", "--node", "win-1", "-o", "json"]);
    let table = winnet(&["doctor", "--node", "win-1"]);
    eprintln!("$ winnet doctor --node win-1\n{}", text(&table));
    let nodes: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor json ({e}): {}", text(&out)));
    let findings = nodes[0]["findings"].as_array().cloned().unwrap_or_default();
    (findings, out.status.success())
}

fn kind_of(f: &Value) -> &str {
    f["kind"].as_str().unwrap_or_default()
}

/// Every Windows node's findings (JSON), by node.
fn doctor_all() -> Vec<(String, Vec<Value>)> {
    let out = winnet(&["doctor", "-o", "json"]);
    eprintln!("$ winnet doctor\n{}", text(&winnet(&["doctor"])));
    let nodes: Vec<Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor json ({e}): {}", text(&out)));
    nodes
        .iter()
        .map(|n| {
            let name = n["node"].as_str().unwrap_or_default().to_string();
            (name, n["findings"].as_array().cloned().unwrap_or_default())
        })
        .collect()
}

/// Removes from pod `pod`'s endpoint on `node` the ACL whose Id starts with `prefix`, by
/// hand: the endpoint read with `winnet hns`, its policy list sent back without it (an Update).
fn remove_acl_by_hand(node: &str, pod: &str, prefix: &str) {
    let socket = format!("/run/winnet/cluster/{node}/hns.sock");
    let socket = socket.as_str();
    let ip = pod_ip(pod);
    let eps: Value = serde_json::from_str(&ok(&[
        "hns",
        "--hns-socket",
        socket,
        "-o",
        "json",
        "list",
        "endpoints",
    ]))
    .expect("endpoints");
    let ep = eps
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| {
            e["IpConfigurations"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["IpAddress"] == ip.as_str())
        })
        .unwrap_or_else(|| panic!("no endpoint of {ip}: {eps:#}"));
    let id = ep["ID"].as_str().expect("endpoint ID");
    let policies: Vec<Value> = ep["Policies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            let acl_id = p["Settings"]["Id"].as_str().unwrap_or_default();
            !(p["Type"] == "ACL" && acl_id.starts_with(prefix))
        })
        .cloned()
        .collect();
    let before = ep["Policies"].as_array().map_or(0, Vec::len);
    assert_eq!(policies.len() + 1, before, "one ACL named {prefix}: {ep:#}");
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("update.json");
    let req = json!({"ResourceType": "Policy", "RequestType": "Update",
        "Settings": {"Policies": policies}});
    std::fs::write(&file, req.to_string()).expect("request");
    ok(&[
        "hns",
        "--hns-socket",
        socket,
        "modify",
        "endpoint",
        id,
        "-f",
        &file.to_string_lossy(),
    ]);
}

#[test]
fn trace_names_the_network_policy_and_doctor_finds_its_acl_removed_by_hand() {
    require_root();
    let _lock = one_at_a_time();
    let dir = tempfile::tempdir().expect("dir");
    let topo = dir.path().join("topology.yaml");
    std::fs::write(&topo, TOPOLOGY).expect("topology");
    let policy = dir.path().join("allow-b.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    let _down = Down;
    ok(&["cluster", "up", &topo.to_string_lossy()]);
    ok(&["cluster", "apply", "-f", &policy.to_string_lossy()]);
    ok(&["cluster", "probe"]);
    assert!(connected("x/b", "x/a"), "x/allow-b lets b reach a");
    assert!(!connected("x/c", "x/a"), "x/allow-b isolates a from c");

    // b -> a: the Allow of rule 0 of x/allow-b decided; a Linux node agrees.
    let e = traced("b", "a");
    assert_eq!(e["Policy"], "x/allow-b", "{e:#}");
    assert_eq!(
        (&e["Direction"], &e["Rule"]),
        (&json!("ingress"), &json!(0))
    );
    assert_eq!(
        (&e["WindowsAllows"], &e["LinuxAllows"]),
        (&json!(true), &json!(true))
    );
    assert!(
        e["How"]
            .as_str()
            .unwrap_or_default()
            .contains("calico agent's plan")
    );
    // c -> a: the Block closing a's ingress decided; a Linux node blocks it too.
    let e = traced("c", "a");
    let made_by = e["MadeBy"].as_str().unwrap_or_default();
    assert!(
        made_by.contains("Block closing the endpoint's ingress"),
        "{e:#}"
    );
    assert_eq!(
        (&e["WindowsAllows"], &e["LinuxAllows"]),
        (&json!(false), &json!(false))
    );

    // With objects that do not hold the policy, the Id alone still names it, and says so.
    let empty = tempfile::tempdir().expect("dir");
    let dest = format!("{}:80", pod_ip("a"));
    let b = pod_ip("b");
    let objects = empty.path().to_string_lossy().into_owned();
    let args = [
        "trace",
        "--node",
        "win-1",
        "--from",
        &b,
        "--to",
        &dest,
        "--json",
        "--manifests",
        &objects,
    ];
    let answer: Value = serde_json::from_str(&ok(&args)).expect("trace --json");
    let into_a = &answer["NetworkPolicy"][1];
    assert_eq!(
        into_a["MadeBy"], "NetworkPolicy x/allow-b rule spec.ingress[0]",
        "{answer:#}"
    );
    let how = into_a["How"].as_str().unwrap_or_default();
    assert!(
        how.starts_with("read from its Id: it is not among what the calico agent plans"),
        "{how}"
    );

    // A folder that is not there is refused, named by its flag.
    let missing = winnet(&[&args[..8], &["--manifests", "/nonexistent/manifests"]].concat());
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("--manifests /nonexistent/manifests: not a folder"),
        "{}",
        text(&missing)
    );

    // c -> a by the port's name: a Linux node allows it, felix skipped the rule.
    let named = dir.path().join("allow-c-named.yaml");
    std::fs::write(&named, NAMED_PORT).expect("policy");
    ok(&["cluster", "apply", "-f", &named.to_string_lossy()]);
    assert!(
        !connected("x/c", "x/a"),
        "the Windows node blocks what the skipped rule allows"
    );
    let e = traced("c", "a");
    assert_eq!(
        (&e["WindowsAllows"], &e["LinuxAllows"]),
        (&json!(false), &json!(true))
    );
    let skipped: Vec<&str> = e["Skipped"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let want = "x/allow-c-named spec.ingress[0].from[0]: named port \"serve-80-tcp\" (rule skipped";
    assert!(skipped.iter().any(|s| s.starts_with(want)), "{e:#}");

    let (findings, _) = doctor();
    let policy_kinds =
        |f: &&Value| kind_of(f).starts_with("policy-") || kind_of(f).starts_with("acl-");
    let before: Vec<&Value> = findings.iter().filter(policy_kinds).collect();
    assert!(
        before.is_empty(),
        "the agent's ACLs are all there: {before:#?}"
    );

    // x/allow-b selects d on win-2 too: its Allow removed there by hand, the doctor over both
    // nodes names the policy as applied on win-1 and not on win-2.
    remove_acl_by_hand("win-2", "d", "policy-x/knp.default.allow-b-in0");
    let nodes = doctor_all();
    let of = |node: &str| {
        let found = nodes.iter().find(|(n, _)| n == node);
        found.map(|(_, f)| f.clone()).unwrap_or_default()
    };
    let win1: Vec<Value> = of("win-1")
        .into_iter()
        .filter(|f| policy_kinds(&f))
        .collect();
    assert!(win1.is_empty(), "{win1:#?}");
    let across: Vec<Value> = of("win-2")
        .into_iter()
        .filter(|f| kind_of(f) == "policy-not-on-every-node")
        .collect();
    assert_eq!(across.len(), 1, "{nodes:#?}");
    let summary = across[0]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.starts_with("NetworkPolicy x/allow-b is applied on win-1"),
        "{summary}"
    );

    // The Allow of x/allow-b's rule 0 removed from a's endpoint by hand.
    remove_acl_by_hand("win-1", "a", "policy-x/knp.default.allow-b-in0");
    assert!(
        !connected("x/b", "x/a"),
        "without the Allow, a's closing Block drops b"
    );
    let (findings, clean) = doctor();
    assert!(!clean, "the doctor exits 1 when it finds something");
    let missing: Vec<&Value> = findings
        .iter()
        .filter(|f| kind_of(f) == "policy-acl-missing")
        .collect();
    assert_eq!(missing.len(), 1, "{findings:#?}");
    let objects = missing[0]["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let named = |kind: &str, id: &str| objects.iter().any(|o| o["kind"] == kind && o["id"] == id);
    assert!(named("NetworkPolicy", "x/allow-b"), "{objects:#?}");
    assert!(named("Pod", "x/a"), "{objects:#?}");
    assert!(
        objects.iter().any(|o| o["kind"] == "Endpoint"),
        "{objects:#?}"
    );
    // The trace of the packet now dropped: the closing Block, where a Linux node allows it.
    let e = traced("b", "a");
    assert_eq!(
        (&e["WindowsAllows"], &e["LinuxAllows"]),
        (&json!(false), &json!(true))
    );
    // The skipped named-port rule names c, not b: it is not listed here.
    assert_eq!(e["Skipped"], json!([]), "{e:#}");
}
