//! `winnet cluster check`: every flow of the matrix run with real programs (curl for TCP, a UDP
//! exchange, ping), what happened set against what the profile says should, and a verdict.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use serde::Serialize;

use super::flows::{Flow, Proto};
use super::procs::command_in;

/// What happened to one flow.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    #[serde(flatten)]
    pub flow: Flow,
    /// It got through.
    pub passed: bool,
    /// What the client saw (the server's answer, with the source address it saw, or the error).
    pub detail: String,
    /// What happened matches what the profile says.
    pub matches: bool,
    /// Why the flow was not run (a Linux node in the in-memory cluster: the Linux kernel is
    /// not simulated); such a row counts neither way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Outcome {
    /// A flow that was not run, and why.
    pub fn skipped(f: &Flow, why: &str) -> Outcome {
        Outcome {
            flow: f.clone(),
            passed: false,
            detail: why.to_string(),
            matches: true,
            skipped: Some(why.to_string()),
        }
    }
}

/// True when `detail` says the receiver saw the client as `want` (`... from <want> ...`).
fn saw_from(detail: &str, want: std::net::IpAddr) -> bool {
    let words: Vec<&str> = detail.split_whitespace().collect();
    words
        .windows(2)
        .any(|w| w[0] == "from" && w[1].trim_end_matches([',', ')', ';']) == want.to_string())
}

/// True when `detail` says the receiver saw the connection addressed to `want`
/// (`... to <want> ...`).
fn saw_to(detail: &str, want: std::net::IpAddr) -> bool {
    let words: Vec<&str> = detail.split_whitespace().collect();
    words
        .windows(2)
        .any(|w| w[0] == "to" && w[1].trim_end_matches([',', ')', ';']) == want.to_string())
}

/// The HTTP status `detail` reports (`HTTP <status> ...`), if it reports one.
fn status_in(detail: &str) -> Option<u16> {
    let words: Vec<&str> = detail.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == "HTTP" && w[1].len() == 3)
        .and_then(|w| w[1].parse().ok())
}

/// Why the real cluster skips a flow of the in-memory cluster only.
pub const IN_MEMORY_ONLY: &str = "in memory only (winnet demo --simulate)";

/// At most this many flows run at once: the real cluster's flows are mostly waiting (a
/// connection's answer, a dropped SYN's timeout), yet each is a process in a pod's namespace.
const AT_ONCE: usize = 8;

/// Runs `flows`: first those that may run together ([`Flow::runs_alongside`]), up to
/// [`AT_ONCE`] at a time; then the others one by one. The outcomes are in the flows' order.
pub fn run_all(flows: &[Flow]) -> Vec<Outcome> {
    let together: Vec<usize> = (0..flows.len())
        .filter(|&i| flows[i].runs_alongside())
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<Option<Outcome>> = vec![None; flows.len()];
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..AT_ONCE.min(together.len()))
            .map(|_| {
                s.spawn(|| {
                    let mut ran = Vec::new();
                    while let Some(&i) =
                        together.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        let outcome =
                            std::panic::catch_unwind(|| run(&flows[i])).unwrap_or_else(|_| {
                                judge(&flows[i], false, "the flow's thread panicked".into())
                            });
                        ran.push((i, outcome));
                    }
                    ran
                })
            })
            .collect();
        for w in workers {
            for (i, o) in w.join().unwrap_or_default() {
                out[i] = Some(o);
            }
        }
    });
    flows
        .iter()
        .zip(out)
        .map(|(f, o)| o.unwrap_or_else(|| run(f)))
        .collect()
}

/// Runs one flow.
pub fn run(f: &Flow) -> Outcome {
    if f.in_memory_only {
        return Outcome::skipped(f, IN_MEMORY_ONLY);
    }
    let (passed, detail) = match (&f.step, f.proto, f.connections) {
        (Some(step), _, _) => super::acl_steps::run(f, step, tcp),
        (None, Proto::Tcp, Some(n)) => sticky(f, n),
        (None, Proto::Tcp, None) => tcp(f),
        (None, Proto::Udp, _) => udp(f),
        (None, Proto::Icmp, _) => icmp(f),
    };
    judge(f, passed, detail)
}

/// Sets what happened to `f` (it got through or not, and what the client saw: `from <source>`
/// as the receiver saw it, and for a flow by name `(<name> -> <address>)`) against what the
/// profile says should happen, whoever ran it.
pub fn judge(f: &Flow, passed: bool, detail: String) -> Outcome {
    let source_ok = match (passed, f.expect_source) {
        (true, Some(want)) => saw_from(&detail, want),
        _ => true,
    };
    // A flow by name got where it should only if the name led to the flow's address.
    let address_ok = !passed || f.to_name.is_none() || detail.ends_with(&format!("-> {})", f.to));
    // Where the source is the flow's point, a connection that lost it is not carried.
    let passed = passed && (source_ok || !f.source_is_the_point);
    let source_ok = source_ok || f.source_is_the_point;
    let destination_ok = match (passed, f.expect_destination) {
        (true, Some(want)) => saw_to(&detail, want),
        _ => true,
    };
    let status_ok = match (passed, f.expect_status) {
        (true, Some(want)) => status_in(&detail) == Some(want),
        _ => true,
    };
    let matches = passed == f.expect_pass && source_ok && address_ok && destination_ok && status_ok;
    let detail = if !destination_ok {
        format!(
            "{detail} (expected the destination {})",
            f.expect_destination
                .map(|s| s.to_string())
                .unwrap_or_default()
        )
    } else if !status_ok {
        format!(
            "{detail} (expected HTTP {})",
            f.expect_status.unwrap_or_default()
        )
    } else if passed && !source_ok {
        format!(
            "{detail} (expected the source {})",
            f.expect_source.map(|s| s.to_string()).unwrap_or_default()
        )
    } else if !address_ok {
        format!("{detail} (expected {})", f.to)
    } else {
        detail
    };
    Outcome {
        flow: f.clone(),
        passed,
        detail,
        matches,
        skipped: None,
    }
}

fn tcp(f: &Flow) -> (bool, String) {
    let host = match (&f.to_name, f.to) {
        (Some(name), _) => name.clone(),
        (None, std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        (None, ip) => ip.to_string(),
    };
    let url = format!("http://{host}:{}/", f.port);
    // A name goes through the pod's resolver first (on a Windows node the stub's walk).
    let max_time = if f.to_name.is_some() { "5" } else { "2" };
    // Two tries: the first connection of a path may wait for ARP behind a switch recompile.
    let mut last = String::new();
    for _ in 0..2 {
        let out = command_in(&f.netns, "curl")
            .args(["-sS", "--max-time"])
            .args([max_time, "-w", "\n%{http_code} %{remote_ip}", &url])
            .output();
        match out {
            Ok(o) if o.status.success() => return answered(f, &String::from_utf8_lossy(&o.stdout)),
            Ok(o) => {
                last = String::from_utf8_lossy(&o.stderr)
                    .trim()
                    .replace("curl: ", "")
            }
            Err(e) => return (false, format!("cannot run curl: {e}")),
        }
    }
    (false, last)
}

/// `n` connections from the flow's client, each answered by the server it reached (`... to
/// <server address>`): carried when all of them reached one.
fn sticky(f: &Flow, n: u16) -> (bool, String) {
    let mut reached = Vec::new();
    for _ in 0..n {
        match tcp(f) {
            (true, d) => reached.push(d.rsplit(" to ").next().unwrap_or_default().to_string()),
            (false, d) => return (false, format!("a connection failed: {d}")),
        }
    }
    one_backend(&reached)
}

/// Whether `reached` (the server of each connection) names one server, in words.
pub fn one_backend(reached: &[String]) -> (bool, String) {
    let mut backends: Vec<&String> = reached.iter().collect();
    backends.sort();
    backends.dedup();
    let list: Vec<&str> = backends.iter().map(|b| b.as_str()).collect();
    match list.as_slice() {
        [one] => (true, format!("{} connections, all to {one}", reached.len())),
        many => (
            false,
            format!(
                "{} connections to {} backends: {}",
                reached.len(),
                many.len(),
                many.join(", ")
            ),
        ),
    }
}

/// What curl printed (the body, then the status and the address it connected to); the
/// status is told where the flow is about it (a health check node port).
fn answered(f: &Flow, out: &str) -> (bool, String) {
    let (body, last) = out.rsplit_once('\n').unwrap_or((out, ""));
    let (status, remote) = last.split_once(' ').unwrap_or(("", last));
    let body = body.trim();
    let http = match f.expect_status {
        Some(_) => format!("HTTP {status}"),
        None => "HTTP".to_string(),
    };
    match &f.to_name {
        None => (true, format!("{http} {body}")),
        Some(name) => (true, format!("{http} {body} ({name} -> {remote})")),
    }
}

fn udp(f: &Flow) -> (bool, String) {
    let to = SocketAddr::new(f.to, f.port);
    let r = host::netns::Netns::named(&f.netns).run(move || {
        let io = |e: std::io::Error| host::HostError::io("UDP exchange", e);
        let s = UdpSocket::bind(("0.0.0.0", 0)).map_err(io)?;
        s.set_read_timeout(Some(Duration::from_millis(700)))
            .map_err(io)?;
        let mut buf = [0u8; 1500];
        for _ in 0..3 {
            s.send_to(b"ping", to).map_err(io)?;
            if let Ok((n, _)) = s.recv_from(&mut buf) {
                return Ok(Some(String::from_utf8_lossy(&buf[..n]).into_owned()));
            }
        }
        Ok(None)
    });
    match r {
        Ok(Some(reply)) => (true, format!("UDP {reply}")),
        Ok(None) => (false, "no UDP answer in 2 s".into()),
        Err(e) => (false, e.to_string()),
    }
}

fn icmp(f: &Flow) -> (bool, String) {
    let to = f.to.to_string();
    for _ in 0..2 {
        let ok = command_in(&f.netns, "ping")
            .args(["-c", "1", "-W", "1", &to])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return (true, "echo reply".into());
        }
    }
    (false, "no echo reply".into())
}
