//! Locks held across test processes. Some things on a machine only one test may use at a time,
//! whichever test binary or run it comes from: the local cluster's fixed namespace names, or a
//! program's first run that must be alone. Such a test holds an exclusive `flock(2)` on a file
//! named for the thing; the kernel releases it when the guard is dropped or the process ends,
//! so a test that crashed never leaves it held.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where the lock files live: the machine's directory for them, emptied at boot.
pub const DIR: &str = "/run/lock";

/// An exclusive lock, held until dropped.
#[derive(Debug)]
pub struct Held {
    _file: File,
    pub path: PathBuf,
}

/// Waits for, then holds, the exclusive lock `name` (the file `/run/lock/<name>.lock`, made
/// 0600 if missing). A lock of another thread of this process is waited for too: each call
/// opens the file afresh, and `flock` locks belong to the open file.
#[track_caller]
pub fn exclusive(name: &str) -> Held {
    let path = Path::new(DIR).join(format!("{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open the test lock {}: {e}", path.display()));
    loop {
        // SAFETY: the descriptor is open for the whole call (`file` owns it); flock has no
        // other precondition.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        assert!(
            e.kind() == std::io::ErrorKind::Interrupted,
            "cannot take the test lock {}: {e}",
            path.display()
        );
    }
    Held { _file: file, path }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_second_holder_waits_for_the_first() {
        let name = format!("winnet-testkit-{}", std::process::id());
        let first = exclusive(&name);
        let released = AtomicBool::new(false);
        let (took, taken) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let _second = exclusive(&name);
                took.send(released.load(Ordering::SeqCst)).expect("send");
            });
            assert!(
                taken.recv_timeout(Duration::from_millis(200)).is_err(),
                "the second holder did not wait"
            );
            released.store(true, Ordering::SeqCst);
            drop(first);
            assert!(taken.recv().expect("the second holder took it"));
        });
        let _ = std::fs::remove_file(Path::new(DIR).join(format!("{name}.lock")));
    }
}
