//! `winnet doctor --hns-socket S` on a node outside the local cluster, with `--manifests DIR`
//! or `--kubeconfig FILE`: the node's Pods are read from the same source as its Services
//! (`spec.nodeName`, `status.podIP`, `hostNetwork` left out), so the pod checks run — a pod
//! with no endpoint is named, and a pod whose exec probe pings outside the cluster is named
//! with its documented limitation; a folder without Pods leaves the pod checks skipped, not
//! passed. No root: hnsd serves the objects only, the kube API is a small fake that lists.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use serde_json::Value;

fn winnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_winnet"))
        .args(args)
        .env_remove("HNS_SOCKET")
        .output()
        .expect("run winnet")
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The findings of the doctor on node n1, and its exit status.
fn doctor(socket: &Path, manifests: &Path) -> (Vec<Value>, Output) {
    doctor_from(socket, "--manifests", manifests)
}

/// The same, with the Kubernetes objects from `source` (`--manifests` or `--kubeconfig`).
fn doctor_from(socket: &Path, source: &str, path: &Path) -> (Vec<Value>, Output) {
    let out = winnet(&[
        "doctor",
        "--node",
        "n1",
        "--hns-socket",
        socket.to_str().expect("path"),
        source,
        path.to_str().expect("path"),
        "--cluster-cidr",
        "10.244.0.0/16",
        "--service-cidr",
        "10.96.0.0/12",
        "-o",
        "json",
    ]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let findings = report[0]["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (findings, out)
}

/// The pods named by findings of `kind`.
fn pods_named(findings: &[Value], kind: &str) -> Vec<String> {
    let mut v: Vec<String> = findings
        .iter()
        .filter(|f| f["kind"] == kind)
        .flat_map(|f| f["objects"].as_array().cloned().unwrap_or_default())
        .filter(|o| o["kind"] == "Pod")
        .filter_map(|o| o["id"].as_str().map(str::to_string))
        .collect();
    v.sort();
    v
}

const PODS: &str = r#"
apiVersion: v1
kind: PodList
items:
  - apiVersion: v1
    kind: Pod
    metadata: {name: pod-a, namespace: default}
    spec:
      nodeName: n1
      containers:
        - name: app
          image: app
          livenessProbe:
            exec: {command: [powershell.exe, -Command, "Test-Connection -ComputerName 8.8.8.8 -Count 1 -Quiet"]}
    status: {podIP: 10.244.1.2}
  - apiVersion: v1
    kind: Pod
    metadata: {name: pod-b, namespace: default}
    spec: {nodeName: n1, containers: [{name: app, image: app}]}
    status: {podIP: 10.244.1.99}
  - apiVersion: v1
    kind: Pod
    metadata: {name: agent, namespace: kube-system}
    spec: {nodeName: n1, hostNetwork: true, containers: [{name: agent, image: agent}]}
    status: {podIP: 192.168.77.11}
  - apiVersion: v1
    kind: Pod
    metadata: {name: pod-c, namespace: default}
    spec: {nodeName: n2, containers: [{name: app, image: app}]}
    status: {podIP: 10.244.2.5}
"#;

/// pod-a's endpoint (10.244.1.2) in hnsd at `sock`, attached to a pod's namespace as a CNI
/// ADD leaves it; `dir` holds the documents.
fn pod_a_endpoint(sock: &str, dir: &Path) {
    let ex = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hns");
    let net = ok(
        winnet(&[
            "hns",
            "--hns-socket",
            sock,
            "create",
            "networks",
            "-f",
            ex.join("network.json").to_str().expect("path"),
            "-o",
            "id",
        ]),
        "create the network",
    );
    let set = format!("HostComputeNetwork={}", net.trim());
    let ep = ok(
        winnet(&[
            "hns",
            "--hns-socket",
            sock,
            "create",
            "endpoints",
            "-f",
            ex.join("endpoint.json").to_str().expect("path"),
            "--set",
            &set,
            "-o",
            "json",
        ]),
        "create pod-a's endpoint",
    );
    let ep: Value = serde_json::from_str(&ep).expect("JSON");
    assert_eq!(
        ep["IpConfigurations"][0]["IpAddress"], "10.244.1.2",
        "the endpoint pod-a's manifest names: {ep:#}"
    );

    // Attached to a pod's namespace, as a CNI ADD leaves it: a pod endpoint.
    let ns_doc = dir.join("ns.json");
    std::fs::write(
        &ns_doc,
        r#"{"Type": "Guest", "SchemaVersion": {"Major": 2, "Minor": 0}}"#,
    )
    .expect("write ns.json");
    let ns = ok(
        winnet(&[
            "hns",
            "--hns-socket",
            sock,
            "create",
            "namespaces",
            "-f",
            ns_doc.to_str().expect("path"),
            "-o",
            "id",
        ]),
        "create the pod's namespace",
    );
    let attach = dir.join("attach.json");
    std::fs::write(
        &attach,
        serde_json::json!({"ResourceType": "Endpoint", "RequestType": "Add",
            "Settings": {"EndpointId": ep["ID"]}})
        .to_string(),
    )
    .expect("write attach.json");
    ok(
        winnet(&[
            "hns",
            "--hns-socket",
            sock,
            "modify",
            "--file",
            attach.to_str().expect("path"),
            "namespace",
            ns.trim(),
        ]),
        "attach pod-a's endpoint",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_from_manifests_are_compared_with_the_nodes_endpoints() {
    let hnsd = testkit::hnsd::Hnsd::start(hns::Profile::Ws2025).await;
    let s = hnsd.socket();
    let dir = tempfile::tempdir().expect("tempdir");
    pod_a_endpoint(s.to_str().expect("path"), dir.path());
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("mkdir");
    let dir = &manifests;
    std::fs::write(dir.join("pods.yaml"), PODS).expect("write pods.yaml");
    let (f, out) = doctor(&s, dir);
    assert_eq!(out.status.code(), Some(1), "{f:#?}");
    assert_eq!(pods_named(&f, "pod-without-endpoint"), ["default/pod-b"]);
    assert_eq!(
        pods_named(&f, "icmp-probe-through-outbound-nat"),
        ["default/pod-a"]
    );
    let icmp = f
        .iter()
        .find(|f| f["kind"] == "icmp-probe-through-outbound-nat")
        .expect("the ICMP finding");
    assert!(
        icmp["summary"]
            .as_str()
            .is_some_and(|s| s.contains("8.8.8.8"))
            && icmp["source"]
                .as_str()
                .is_some_and(|s| s.contains("windows-networking.md")),
        "{icmp:#}"
    );

    // pod-a's probe over TCP instead: no ICMP finding.
    let tcp = PODS.replace(
        "Test-Connection -ComputerName 8.8.8.8 -Count 1 -Quiet",
        "Test-NetConnection 8.8.8.8 -Port 443",
    );
    std::fs::write(dir.join("pods.yaml"), tcp).expect("write pods.yaml");
    let (f, _) = doctor(&s, dir);
    assert!(
        pods_named(&f, "icmp-probe-through-outbound-nat").is_empty(),
        "{f:#?}"
    );
    assert_eq!(pods_named(&f, "pod-without-endpoint"), ["default/pod-b"]);

    // A folder without Pods (kube-proxy's own): the pods are not known, so no pod is named.
    std::fs::remove_file(dir.join("pods.yaml")).expect("remove pods.yaml");
    let (f, _) = doctor(&s, dir);
    assert!(
        f.iter()
            .all(|f| f["kind"] != "pod-without-endpoint" && f["kind"] != "endpoint-without-pod"),
        "{f:#?}"
    );
}

/// A kube API server that lists what it holds and keeps every watch open without events.
async fn fake_api(collections: HashMap<&'static str, Vec<Value>>) -> u16 {
    let lists = Arc::new(collections);
    let app = axum::Router::new().route(
        "/{*path}",
        axum::routing::get(
            move |axum::extract::Path(path): axum::extract::Path<String>,
                  axum::extract::Query(q): axum::extract::Query<HashMap<String, String>>| {
                let lists = Arc::clone(&lists);
                async move {
                    use axum::response::IntoResponse;
                    if q.get("watch").is_some_and(|w| w == "true" || w == "1") {
                        let quiet = futures::stream::pending::<Result<String, std::io::Error>>();
                        return axum::response::Response::builder()
                            .header("content-type", "application/json")
                            .body(axum::body::Body::from_stream(quiet))
                            .expect("response");
                    }
                    let name = path.rsplit('/').next().unwrap_or_default();
                    let items = lists.get(name).cloned().unwrap_or_default();
                    axum::Json(serde_json::json!({"apiVersion": "v1", "kind": "List",
                        "metadata": {"resourceVersion": "1"}, "items": items}))
                    .into_response()
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the fake API");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_from_a_kube_api_are_compared_with_the_nodes_endpoints() {
    let hnsd = testkit::hnsd::Hnsd::start(hns::Profile::Ws2025).await;
    let s = hnsd.socket();
    let dir = tempfile::tempdir().expect("tempdir");
    pod_a_endpoint(s.to_str().expect("path"), dir.path());
    let list: Value = serde_norway::from_str(PODS).expect("the pods");
    let mut pods = list["items"].as_array().cloned().unwrap_or_default();
    for p in &mut pods {
        p["metadata"]["resourceVersion"] = Value::from("1");
    }
    let port = fake_api(HashMap::from([("pods", pods)])).await;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"http://127.0.0.1:{port}\"}}\nusers:\n- name: me\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: me}}\ncurrent-context: fake\n"
        ),
    )
    .expect("write the kubeconfig");
    let (f, out) =
        tokio::task::spawn_blocking(move || doctor_from(&s, "--kubeconfig", &kubeconfig))
            .await
            .expect("the doctor");
    assert_eq!(out.status.code(), Some(1), "{f:#?}");
    assert_eq!(pods_named(&f, "pod-without-endpoint"), ["default/pod-b"]);
    assert_eq!(
        pods_named(&f, "icmp-probe-through-outbound-nat"),
        ["default/pod-a"]
    );
}
