//! What the tests of the local cluster (`winnet cluster`, `winnet demo`) share: running the
//! winnet binary and reading what it printed, and the root check.

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
