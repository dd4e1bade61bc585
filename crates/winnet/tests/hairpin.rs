//! A Windows pod that is one of its own Service's backends reaches itself through the Service,
//! with real packets: the local cluster's pods are made by win-bridge / win-overlay with
//! `loopbackDSR`, kube-proxy runs DSR, and curl in the pod connects to the ClusterIP and to
//! the Service's FQDN until the load balancer has sent it back to itself several times. Root
//! only; run under `flock /tmp/winnet-cluster.lock` (the cluster has fixed names).

mod local_cluster;

use local_cluster::{one_at_a_time, pod_ip, require_root, text, winnet};
use std::process::Command;

/// Takes the cluster down when dropped (a failing test leaves nothing).
struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        let _ = winnet(&["cluster", "down"]);
    }
}

/// A cluster where `web-client` on win-1 is one of `web`'s backends (selector `web`), with
/// web-1 beside it and web-2 on win-2, on Windows Server 2025; kube-proxy with DSR or without.
fn topology(dsr: bool, dual_stack: bool) -> String {
    format!(
        "mode: overlay\nprofile: ws2025\ndsr: {dsr}\ndualStack: {dual_stack}\nnodes:\n\
         - {{name: win-1, os: windows, pods: [web-1, web-client]}}\n\
         - {{name: win-2, os: windows, pods: [web-2]}}\n\
         services:\n\
         - {{name: web, selector: web, port: 80, targetPort: 8080}}\n"
    )
}

/// `web`'s ClusterIP (the topology's first Service).
const VIP: &str = "10.96.1.1";
/// win-1's address: with DSR, the loopback DSR policy translates the hairpin's source to it.
const WIN_1: &str = "192.168.77.11";

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

/// Brings the cluster of `file` up in `mode` (`what` names it in failures) and connects from web-client to `web` (the
/// ClusterIP, and every other time its FQDN) until the load balancer has sent it back to itself
/// three times; every connection must be answered. The client's address, and the servers'
/// answers (`from <source> to <server>`).
fn hairpin(file: &str, mode: &str, what: &str) -> (String, Vec<String>) {
    let up = winnet(&["cluster", "up", file, "--mode", mode]);
    assert!(up.status.success(), "{what}: {}", text(&up));
    let own = pod_ip("web-client");
    let to_itself = format!(" to {own}");
    // 60 tries miss the pod three times with odds far below 1e-6 (one in three picks it).
    let mut reached: Vec<String> = Vec::new();
    while reached.iter().filter(|r| r.ends_with(&to_itself)).count() < 3 {
        assert!(
            reached.len() < 60,
            "{what}: never back to itself: {reached:?}"
        );
        let host = if reached.len().is_multiple_of(2) {
            VIP
        } else {
            "web.default.svc.cluster.local"
        };
        match curl(&format!("http://{host}:80/")) {
            Ok(answer) => reached.push(answer),
            Err(e) => panic!(
                "{what}: connection {} to {host} failed after {reached:?}: {e}",
                reached.len() + 1
            ),
        }
    }
    let down = winnet(&["cluster", "down"]);
    assert!(down.status.success(), "{what}: {}", text(&down));
    (own, reached)
}

#[test]
fn a_windows_pod_reaches_itself_through_its_own_service_with_real_packets() {
    require_root();
    let _one = one_at_a_time();
    let _down = Down;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("hairpin.yaml");
    let file_name = file.to_string_lossy().into_owned();
    // win-overlay, win-bridge, and sdnbridge (a dual-stack L2Bridge node).
    for (mode, dual_stack) in [("overlay", false), ("l2bridge", false), ("l2bridge", true)] {
        for dsr in [true, false] {
            std::fs::write(&file, topology(dsr, dual_stack)).expect("topology");
            let what = format!("{mode}, dual-stack {dual_stack}, DSR {dsr}");
            let (own, reached) = hairpin(&file_name, mode, &what);
            if !dsr {
                continue;
            }
            // With DSR the pod gets its own connections from its node's address (loopback
            // DSR), and the other backends see the pod itself.
            let (itself, client) = (format!("from {WIN_1} to {own}"), format!("from {own} to "));
            assert!(
                reached
                    .iter()
                    .all(|r| *r == itself || r.starts_with(&client)),
                "{what}: {reached:?}"
            );
        }
    }
}
