//! A known problem of every Windows build: ICMP is not carried through OutBoundNAT to remote
//! networks, so a pod's exec probe that pings an address outside the cluster (`ping`,
//! PowerShell's `Test-Connection` or `Test-NetConnection` without a TCP port) always fails,
//! and the kubelet restarts the pod (liveness) or takes it out of its Services (readiness).

use std::net::IpAddr;

use crate::checks::nat::internal;
use crate::finding::{Finding, ObjectRef, ProblemKind};
use crate::node::Node;
use crate::snapshot::ExecProbe;

/// Where the limitation is documented.
pub const SOURCE: &str = "kubernetes/website content/en/docs/concepts/services-networking/windows-networking.md (limitations: outbound ICMP through NAT); kubernetes/enhancements#824";

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    if !n.snap.profile.no_icmp_through_nat {
        return;
    }
    let inside = internal(n);
    for pod in &n.snap.kube.pods {
        for probe in &pod.exec_probes {
            let Some(target) = pinged(probe) else {
                continue;
            };
            if let Target::Address(ip) = target
                && inside.iter().any(|net| net.contains(&ip))
            {
                continue;
            }
            let target = target.to_string();
            let mut f = n.finding(
                ProblemKind::IcmpProbeThroughOutboundNat,
                format!(
                    "pod {}'s {} probe (container {}) pings {target}, outside the cluster, through OutBoundNAT on {}",
                    pod.key(),
                    probe.probe,
                    probe.container,
                    n.snap.profile.name
                ),
                vec![ObjectRef::new("Pod", pod.key(), format!("{} probe: {}", probe.probe, probe.command.join(" ")))],
                format!(
                    "the probe never gets an answer: the kubelet {} although the pod's TCP and UDP traffic to {target} works",
                    if probe.probe == "readiness" {
                        "keeps the pod out of its Services"
                    } else {
                        "restarts the container over and over"
                    }
                ),
                format!(
                    "probe over TCP instead (Test-NetConnection {target} -Port PORT, curl, or an httpGet/tcpSocket probe), or exempt {target} from OutBoundNAT when it is inside the network"
                ),
            );
            f.source = Some(SOURCE.into());
            out.push(f);
        }
    }
}

/// What a probe pings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Address(IpAddr),
    /// A name resolved at run time (`www.example.com`), outside the cluster's domain.
    Name(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Address(ip) => write!(f, "{ip}"),
            Target::Name(n) => f.write_str(n),
        }
    }
}

/// The target a probe's command pings with ICMP, if it does: `ping[.exe] [options] TARGET`,
/// or PowerShell's `Test-Connection` / `Test-NetConnection` without a TCP port, anywhere in
/// the command (`powershell -Command "..."`, `cmd /c ...`). Names inside the cluster's domain
/// (`*.svc`, `*.cluster.local`) and single-label names are left out: they resolve to pods
/// and Services, which ICMP reaches untranslated.
pub fn pinged(probe: &ExecProbe) -> Option<Target> {
    let words: Vec<String> = probe
        .command
        .iter()
        .flat_map(|arg| arg.split(|c: char| c.is_whitespace() || c == ';'))
        .map(|w| {
            w.trim_matches(|c| matches!(c, '"' | '\'' | '(' | ')' | '{' | '}'))
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let start = lower.iter().position(|w| {
        let program = w.rsplit(['/', '\\']).next().unwrap_or(w);
        matches!(
            program,
            "ping" | "ping.exe" | "ping6" | "test-connection" | "test-netconnection"
        )
    })?;
    let rest = &lower[start + 1..];
    let tcp = ["-port", "-commontcpport", "-tcpport"];
    if rest.iter().any(|w| tcp.iter().any(|t| w.starts_with(t))) {
        return None;
    }
    words[start + 1..]
        .iter()
        .filter(|w| !w.starts_with('-') && !w.starts_with('/'))
        .find_map(|w| target(w))
}

fn target(word: &str) -> Option<Target> {
    if let Ok(ip) = word
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Some(Target::Address(ip));
    }
    let name = word.trim_end_matches('.').to_ascii_lowercase();
    let hostname = name.contains('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        && name.chars().any(|c| c.is_ascii_alphabetic());
    let in_cluster = name.ends_with(".svc")
        || name.contains(".svc.")
        || name.ends_with(".cluster.local")
        || name.ends_with(".local");
    (hostname && !in_cluster).then_some(Target::Name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(cmd: &[&str]) -> ExecProbe {
        ExecProbe {
            container: "c".into(),
            probe: "liveness".into(),
            command: cmd.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn ip(s: &str) -> Option<Target> {
        Some(Target::Address(s.parse().expect("ip")))
    }

    #[test]
    fn pings_are_found_in_the_shapes_probes_take() {
        assert_eq!(
            pinged(&probe(&["ping", "-n", "1", "8.8.8.8"])),
            ip("8.8.8.8")
        );
        assert_eq!(
            pinged(&probe(&[
                "C:\\Windows\\System32\\PING.EXE",
                "-w",
                "1000",
                "1.1.1.1"
            ])),
            ip("1.1.1.1")
        );
        assert_eq!(
            pinged(&probe(&[
                "powershell.exe",
                "-Command",
                "if (-not (Test-Connection -ComputerName 'www.bing.com' -Count 1 -Quiet)) { exit 1 }"
            ])),
            Some(Target::Name("www.bing.com".into()))
        );
        assert_eq!(
            pinged(&probe(&["pwsh", "-c", "Test-NetConnection 10.200.0.1"])),
            ip("10.200.0.1")
        );
        assert_eq!(
            pinged(&probe(&["sh", "-c", "ping -c1 fd00::1"])),
            ip("fd00::1")
        );
    }

    #[test]
    fn tcp_checks_and_names_inside_the_cluster_are_not_pings() {
        assert_eq!(
            pinged(&probe(&[
                "powershell",
                "Test-NetConnection 8.8.8.8 -Port 443"
            ])),
            None
        );
        assert_eq!(
            pinged(&probe(&[
                "pwsh",
                "-c",
                "Test-Connection 8.8.8.8 -TcpPort 53"
            ])),
            None
        );
        assert_eq!(
            pinged(&probe(&["ping", "web.default.svc.cluster.local"])),
            None
        );
        assert_eq!(pinged(&probe(&["ping", "web"])), None);
        assert_eq!(pinged(&probe(&["curl", "-f", "http://8.8.8.8"])), None);
        assert_eq!(pinged(&probe(&["cat", "/tmp/healthy"])), None);
    }
}
