//! What the tests of the local cluster (`winnet cluster`, `winnet demo`) share: running the
//! winnet binary and reading what it printed, the root check, and the lock that keeps them
//! one at a time on the machine.

use std::process::{Command, Output};

/// Runs `winnet ARGS` and waits for it.
pub fn winnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_winnet"))
        .args(args)
        .output()
        .expect("run winnet")
}

/// What a run printed, stdout then stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Fails the test loudly unless it runs as root: the local cluster builds namespaces and devices.
pub fn require_root() {
    testkit::require_root("the local cluster builds namespaces and devices");
}

/// The local cluster has fixed names (namespaces `wn-*`, 192.168.77.0/24, `/run/winnet/cluster`):
/// one test of it at a time on the whole machine, whichever test binary or run it belongs to.
/// The lock is held until the guard is dropped: hold it for the whole test, from before the
/// cluster goes up until after it is down. (Its own file: a run under the engineers'
/// `flock /tmp/winnet-cluster.lock` takes both, in that order, and never waits for itself.)
pub fn one_at_a_time() -> testkit::lock::Held {
    testkit::lock::exclusive("winnet-tests-cluster")
}

/// The address the cluster gave pod `name` (its state file). Not every test binary asks.
#[allow(dead_code)]
pub fn pod_ip(name: &str) -> String {
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
