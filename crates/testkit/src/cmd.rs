//! Commands a test runs that must succeed (`ip`, `winnet install-cni`, ...): a failure stops
//! the test with the command and what it printed.

use std::process::Command;

/// Runs `cmd`; its standard output, or a failed test naming it with its output.
#[track_caller]
pub fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| {
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            " (is it installed?)"
        } else {
            ""
        };
        panic!("cannot run {cmd:?}: {e}{hint}")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `args[0]` with the rest as its arguments; as [`ok`].
#[track_caller]
pub fn sh(args: &[&str]) -> String {
    let (program, rest) = args.split_first().expect("a command to run");
    ok(Command::new(program).args(rest))
}
