//! The root check of tests that make namespaces, devices, or processes inside them.

/// Fails the test, loudly and saying what to do, unless it runs as root. `what` says what the
/// test does that needs root, e.g. "this test makes network namespaces and devices".
#[track_caller]
pub fn require_root(what: &str) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "{what} and needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN): run it as root, \
         e.g. `sudo -E cargo test` (CI does)"
    );
}
