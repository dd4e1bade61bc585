//! A Windows pod that is one of its own Service's backends reaches itself through the Service,
//! with real packets: the local cluster's pods are made by win-bridge / win-overlay with
//! `loopbackDSR`, kube-proxy runs DSR, and curl in the pod connects to the ClusterIP and to
//! the Service's FQDN until the load balancer has sent it back to itself several times. Root
//! only; run under `flock /tmp/winnet-cluster.lock` (the cluster has fixed names).

mod local_cluster;

use local_cluster::{require_root, text, winnet};
use std::process::Command;

/// Takes the cluster down when dropped (a failing test leaves nothing).
struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        let _ = winnet(&["cluster", "down"]);
    }
}

/// `web-client` on win-1 is one of `web`'s backends (selector `web`), with web-1 beside it
/// and web-2 on win-2; kube-proxy with DSR, Windows Server 2025.
const TOPOLOGY: &str = "mode: overlay\nprofile: ws2025\ndsr: true\nnodes:\n\
     - {name: win-1, os: windows, pods: [web-1, web-client]}\n\
     - {name: win-2, os: windows, pods: [web-2]}\n\
     services:\n\
     - {name: web, selector: web, port: 80, targetPort: 8080}\n";

/// `web`'s ClusterIP (the topology's first Service).
const VIP: &str = "10.96.1.1";
/// win-1's address: the loopback DSR policy translates the hairpin's source to it.
const WIN_1: &str = "192.168.77.11";

/// The address the cluster gave pod `name` (its state file).
fn pod_ip(name: &str) -> String {
    let state: serde_json::Value = serde_json::from_slice(
        &std::fs::read("/run/winnet/cluster/state.json").expect("state.json"),
    )
    .expect("state");
    state["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|n| n["pods"].as_array().into_iter().flatten())
        .find(|p| p["name"] == name)
        .and_then(|p| p["ip"].as_str())
        .unwrap_or_else(|| panic!("no pod {name} in state.json"))
        .to_string()
}

/// curl in web-client's namespace; the server's answer (`from <source> to <destination>`).
fn curl(url: &str) -> Result<String, String> {
    let out = Command::new("ip")
        .args(["netns", "exec", "wn-win-1-web-client", "curl", "-sS"])
        .args(["--max-time", "5", url])
        .output()
        .expect("curl");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[test]
fn a_windows_pod_reaches_itself_through_its_own_service_with_real_packets() {
    require_root();
    let _down = Down;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("hairpin.yaml");
    std::fs::write(&file, TOPOLOGY).expect("topology");
    let file = file.to_string_lossy().into_owned();
    for mode in ["overlay", "l2bridge"] {
        let up = winnet(&["cluster", "up", &file, "--mode", mode]);
        assert!(up.status.success(), "{mode}: {}", text(&up));
        let own = pod_ip("web-client");
        let itself = format!("from {WIN_1} to {own}");
        // 60 tries miss the pod three times with odds far below 1e-6 (one in three picks it).
        let mut reached: Vec<String> = Vec::new();
        while reached.iter().filter(|r| **r == itself).count() < 3 && reached.len() < 60 {
            let host = if reached.len() % 2 == 0 {
                VIP
            } else {
                "web.default.svc.cluster.local"
            };
            match curl(&format!("http://{host}:80/")) {
                Ok(answer) => reached.push(answer),
                Err(e) => panic!(
                    "{mode}: connection {} to {host} failed after {reached:?}: {e}",
                    reached.len() + 1
                ),
            }
        }
        assert!(
            reached.iter().filter(|r| **r == itself).count() >= 3,
            "{mode}: web-client answered itself ({itself}) three times: {reached:?}"
        );
        // The other backends still see the client pod itself (DSR).
        assert!(
            reached
                .iter()
                .all(|r| *r == itself || r.starts_with(&format!("from {own} to "))),
            "{mode}: {reached:?}"
        );
        let down = winnet(&["cluster", "down"]);
        assert!(down.status.success(), "{mode}: {}", text(&down));
    }
}
