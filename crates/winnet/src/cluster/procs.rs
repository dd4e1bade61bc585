//! The processes the local cluster starts (etcd, hnsd, flanneld, kube-proxy, the servers), as
//! recorded in its state: each with its PID and the kernel's start time of that PID, so `down`
//! stops only processes that are still the ones it started (a PID may be reused after a reboot
//! or a crash), and waits until they are gone.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
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
    /// How it was started, so that `cluster restart` starts it again the same way (absent in
    /// the state of a cluster made by an older winnet).
    #[serde(default)]
    pub launch: Option<Launch>,
}

/// How a process of the cluster is started: its command line, where, and its log.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Launch {
    /// The namespace to run it in (`ip netns exec`); None for programs that enter theirs
    /// themselves (hnsd's `--node-netns`).
    pub netns: Option<String>,
    pub args: Vec<String>,
    /// Its stdout and stderr (stderr only for a program started here).
    pub log: PathBuf,
    /// `RUST_LOG` for it.
    pub rust_log: String,
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
    let launch = Launch {
        netns: Some(netns.to_string()),
        args: args.iter().map(|a| a.to_string()).collect(),
        log: log.to_path_buf(),
        rust_log: "info".into(),
    };
    start(name, launch, false)
}

/// Starts `launch` as `name`, its log made anew or appended to (a restart); not waited on.
pub fn start(name: &str, launch: Launch, append: bool) -> anyhow::Result<Proc> {
    let log = &launch.log;
    let logf = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(log)
        .with_context(|| format!("create log {}", log.display()))?;
    let (program, rest) = launch
        .args
        .split_first()
        .with_context(|| format!("{name}: no program to start"))?;
    let mut cmd = match &launch.netns {
        Some(ns) => command_in(ns, program),
        None => Command::new(program),
    };
    // A program started in its namespace prints to the log; one that enters its namespace
    // itself logs to stderr alone.
    let stdout = match launch.netns {
        Some(_) => Stdio::from(logf.try_clone()?),
        None => Stdio::null(),
    };
    let child = cmd
        .args(rest)
        .env("RUST_LOG", &launch.rust_log)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("cannot start {}", launch.args.join(" ")))?;
    let pid = child.id();
    std::mem::forget(child);
    let mut p = Proc::started(name, pid)
        .with_context(|| format!("{name} (PID {pid}) exited at once; see {}", log.display()))?;
    p.launch = Some(launch);
    Ok(p)
}

/// Stops `p` with `signal` (as a crash or a service manager would), waits until it is gone,
/// and starts it again as it was started: the new record.
pub fn restart(p: &Proc, signal: Signal) -> anyhow::Result<Proc> {
    let launch = p.launch.clone().with_context(|| {
        format!(
            "{} was started by an older winnet that did not record how: take the cluster down and up again",
            p.name
        )
    })?;
    let left = stop_with(std::slice::from_ref(p), signal, Duration::from_secs(10));
    if !left.is_empty() {
        anyhow::bail!("{} did not stop on {signal}", left.join(", "));
    }
    start(&p.name, launch, true)
}

/// True while a killed process's threads are still exiting: its first thread is already a
/// zombie (so it no longer counts as alive) while the others still hold what the process held
/// — a lock, a socket — until the last one is gone.
fn threads_exiting(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|d| d.count() > 1)
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
            launch: None,
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
    stop_with(procs, Signal::SIGKILL, Duration::from_secs(5))
}

/// Sends `signal` to every process in `procs` that is still the one started and waits up to
/// `within` until they have exited; the ones still running after.
fn stop_with(procs: &[Proc], signal: Signal, within: Duration) -> Vec<String> {
    let ours: Vec<&Proc> = procs.iter().filter(|p| p.alive()).collect();
    for p in &ours {
        if let Ok(pid) = i32::try_from(p.pid) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<String> = ours
            .iter()
            .filter(|p| p.alive() || threads_exiting(p.pid))
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
            launch: None,
        };
        assert!(p.alive());
        let other = Proc {
            start: start + 1,
            ..p
        };
        assert!(!other.alive(), "a reused PID is not ours");
    }
}
