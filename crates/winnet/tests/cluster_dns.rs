//! The cluster DNS in the real local cluster (issue 12, item 4 acceptance): `winnet cluster up`
//! runs the DNS pods behind the `kube-dns` Service, and programs in the pods resolve through
//! their node's resolver — glibc's `getent hosts` in the pod's namespace, so on a Windows node
//! through hnsd's Windows DNS Client stub, then 10.96.0.10 through the switch's load balancer
//! to a DNS pod. Under the default profile (ws2025) the Windows pod sees the Windows rules (a
//! dotted name is never suffixed); the Linux pod and, under `unrestricted`, the Windows pod
//! resolve every name.
//! `winnet resolve` explains the failure. Root only (CI is root).

mod local_cluster;

use local_cluster::{one_at_a_time, require_root, text, winnet};

use std::process::Command;

const WINDOWS_POD: &str = "wn-win-1-client-1";
const LINUX_POD: &str = "wn-linux-1-web-3";
/// The names of the acceptance: single label, `svc.namespace`, `host.svc` (pod web-2 of the
/// headless Service `peers`), and the FQDNs.
const SINGLE: &str = "web";
const SVC_NS: &str = "web.default";
const HOST_SVC: &str = "web-2.peers";
const FQDNS: [&str; 2] = [
    "web.default.svc.cluster.local",
    "web-2.peers.default.svc.cluster.local",
];

/// The local cluster under `profile` (`None`: the default topology's), taken down when
/// dropped (also when the test fails).
struct Up;

impl Up {
    fn new(profile: Option<&str>) -> Up {
        let _ = winnet(&["cluster", "down"]);
        let up = Up;
        let mut args = vec!["cluster", "up"];
        args.extend(profile.iter().flat_map(|p| ["--profile", p]));
        let out = winnet(&args);
        assert!(
            out.status.success(),
            "cluster up {profile:?}:\n{}",
            text(&out)
        );
        up
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = winnet(&["cluster", "down"]);
    }
}

/// What `getent hosts NAME` prints in `netns` (None when the name does not resolve).
fn getent(netns: &str, name: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "getent", "hosts", name])
        .output()
        .expect("run getent");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn assert_resolves(netns: &str, name: &str) {
    let got = getent(netns, name);
    assert!(
        got.as_deref().is_some_and(|g| g.starts_with("10.")),
        "{name} from {netns}: {got:?}"
    );
}

#[test]
fn by_default_a_windows_pod_resolves_by_windows_rules_and_the_linux_pod_resolves_everything() {
    require_root();
    let _one = one_at_a_time();
    let _up = Up::new(None);

    assert_resolves(WINDOWS_POD, SINGLE);
    for fqdn in FQDNS {
        assert_resolves(WINDOWS_POD, fqdn);
    }
    for dotted in [SVC_NS, HOST_SVC] {
        assert_eq!(
            getent(WINDOWS_POD, dotted),
            None,
            "the Windows DNS Client never suffixes {dotted}"
        );
    }
    for name in [SINGLE, SVC_NS, HOST_SVC].into_iter().chain(FQDNS) {
        assert_resolves(LINUX_POD, name);
    }

    // kube-dns carries TCP 53 too (port `dns-tcp`), through the same load balancers.
    for netns in [WINDOWS_POD, LINUX_POD] {
        let out = Command::new("ip")
            .args([
                "netns", "exec", netns, "dig", "+tcp", "+short", "+time=2", "+tries=2",
            ])
            .args(["@10.96.0.10", FQDNS[0]])
            .output()
            .expect("run dig");
        let answer = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            answer.trim(),
            "10.96.1.1",
            "DNS over TCP from {netns}: {answer}"
        );
    }

    let out = winnet(&[
        "resolve", "--node", "win-1", "--pod", "client-1", SVC_NS, "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let walk: serde_json::Value = serde_json::from_slice(&out.stdout).expect("walk JSON");
    assert_eq!(walk["End"], "MultiLabelQueriedOnce", "{walk:#}");
    let steps = walk["Steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "one query, as written: {walk:#}");
    assert_eq!(steps[0]["Name"], "web.default.");
    assert_eq!(steps[0]["Reason"]["rule"], "MultiLabelAsIs");
    assert_eq!(steps[0]["Server"], "10.96.0.10:53");
    assert_ne!(walk["Result"]["outcome"], "Answer", "{walk:#}");
    let out = winnet(&["resolve", "--node", "win-1", "--pod", "client-1", SVC_NS]);
    assert!(
        text(&out).contains("Windows DNS Client (ws2025)"),
        "the default cluster is Windows Server 2025:\n{}",
        text(&out)
    );
}

#[test]
fn under_unrestricted_the_windows_pod_resolves_every_name() {
    require_root();
    let _one = one_at_a_time();
    let _up = Up::new(Some("unrestricted"));
    for name in [SINGLE, SVC_NS, HOST_SVC].into_iter().chain(FQDNS) {
        assert_resolves(WINDOWS_POD, name);
    }
    assert!(
        getent(WINDOWS_POD, "www.example.test").is_some_and(|g| g.starts_with("10.200.0.1")),
        "names outside the cluster go to the external host's zone"
    );
    drop(_up);
    let left = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        !left.lines().any(|l| l.starts_with("wn-")),
        "cluster down leaves no namespace (DNS pods included): {left}"
    );
}
