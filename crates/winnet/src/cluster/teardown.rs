//! `winnet cluster down`: every process the cluster started is stopped and every namespace it
//! made removed (with the pods' TAPs and the veth ends inside them), then its directory.

use std::path::Path;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{NS_PREFIX, State, sh};

/// Removes the cluster in `dir`; Ok (and nothing done) when there is none.
pub fn down(dir: &Path) -> anyhow::Result<bool> {
    let Some(state) = State::load(dir)? else {
        return Ok(false);
    };
    for pid in &state.pids {
        if let Ok(p) = i32::try_from(*pid) {
            let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
    // Give the kernel a moment to reap sockets before the namespaces go.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut failed = Vec::new();
    for ns in state.namespaces.iter().rev() {
        if !ns.starts_with(NS_PREFIX) {
            continue;
        }
        if Path::new("/run/netns").join(ns).exists()
            && let Err(e) = sh(&["ip", "netns", "del", ns])
        {
            failed.push(format!("{ns}: {e}"));
        }
        let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
    }
    std::fs::remove_dir_all(dir).or_else(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    if !failed.is_empty() {
        anyhow::bail!(
            "some namespaces could not be removed: {}",
            failed.join("; ")
        );
    }
    Ok(true)
}
