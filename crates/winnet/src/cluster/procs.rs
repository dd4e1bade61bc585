//! The processes the local cluster starts (etcd, hnsd, flanneld, kube-proxy, the servers), as
//! recorded in its state: each with its PID and the kernel's start time of that PID, so `down`
//! stops only processes that are still the ones it started (a PID may be reused after a reboot
//! or a crash), and waits until they are gone.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// A process the cluster started.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Proc {
    pub pid: u32,
    /// What it is (`etcd`, `win-1 flanneld`, ...).
    pub name: String,
    /// Its start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start: u64,
}

/// A command that runs `program` in the namespace `netns`, as `ip netns exec` runs it: the one
/// place the cluster runs a program in a namespace. It stays iproute2's rather than a `setns`
/// in the child because `ip netns exec` also gives the program a mount namespace with
/// `/etc/netns/<ns>/*` bound over `/etc` (a Linux pod's resolv.conf, which kubelet would give
/// it) and the namespace's own `/sys`. It execs the program, so the PID is the program's.
pub fn command_in(netns: &str, program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", netns]).arg(program);
    c
}

/// Starts `args` in the namespace `netns` with stdout and stderr to `log`; not waited on
/// (`down` stops it; init reaps it once `winnet` exits).
pub fn spawn(name: &str, netns: &str, args: &[&str], log: &Path) -> anyhow::Result<Proc> {
    let logf =
        std::fs::File::create(log).with_context(|| format!("create log {}", log.display()))?;
    let (program, rest) = args
        .split_first()
        .with_context(|| format!("{name}: no program to start"))?;
    let child = command_in(netns, program)
        .args(rest)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("cannot start {}", args.join(" ")))?;
    let pid = child.id();
    std::mem::forget(child);
    Proc::started(name, pid)
        .with_context(|| format!("{name} (PID {pid}) exited at once; see {}", log.display()))
}

/// What `/proc/PID/stat` says of a process.
struct Stat {
    zombie: bool,
    start: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses `/proc/PID/stat`: the command name is in parentheses and may hold spaces, so the
/// fields are counted after its closing one (field 3 is the state, field 22 the start time).
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        zombie: *fields.first()? == "Z",
        start: fields.get(19)?.parse().ok()?,
    })
}

impl Proc {
    /// The record of `pid`, just started as `name`; None when it is already gone.
    pub fn started(name: &str, pid: u32) -> Option<Proc> {
        Some(Proc {
            pid,
            name: name.to_string(),
            start: stat(pid)?.start,
        })
    }

    /// True while the process runs and is the one that was started.
    pub fn alive(&self) -> bool {
        stat(self.pid).is_some_and(|s| s.start == self.start && !s.zombie)
    }
}

/// Stops every process in `procs` that is still the one started (SIGKILL: nothing of theirs
/// is to be kept), and waits up to 5 s until they have exited; the ones still running after.
pub fn stop(procs: &[Proc]) -> Vec<String> {
    let ours: Vec<&Proc> = procs.iter().filter(|p| p.alive()).collect();
    for p in &ours {
        if let Ok(pid) = i32::try_from(p.pid) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<String> = ours
            .iter()
            .filter(|p| p.alive())
            .map(|p| format!("{} (PID {})", p.name, p.pid))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "4242 (winnet (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 987654 1000 10 18446744073709551615";
        let s = parse_stat(line).expect("parses");
        assert_eq!(s.start, 987654);
        assert!(!s.zombie);
        let z = line.replace(") S 1", ") Z 1");
        assert!(parse_stat(&z).expect("parses").zombie);
        assert!(parse_stat("garbage").is_none());
        assert!(parse_stat("1 (x) S 1").is_none());
    }

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not_ours() {
        let me = std::process::id();
        let start = stat(me).expect("own stat").start;
        let p = Proc {
            pid: me,
            name: "test".into(),
            start,
        };
        assert!(p.alive());
        let other = Proc {
            start: start + 1,
            ..p
        };
        assert!(!other.alive(), "a reused PID is not ours");
    }
}
