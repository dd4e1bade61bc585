//! `winnet cluster probe`: the reachability matrix of the cluster's pods, as upstream's netpol
//! e2e prints its `Reachability` tables: rows from, columns to (`namespace/name`), `.`
//! connected and `X` blocked. Every pair is probed at once, each from inside its client pod's
//! namespace with real packets: a TCP connect, or a UDP echo answered; a blocked pair costs
//! the probe's timeout ([`TIMEOUT`]).

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use host::netns::Netns;
use lab::workloads::Protocol;
use serde::Serialize;

use super::State;

/// How long a probe waits for a connection or an echo.
pub const TIMEOUT: Duration = Duration::from_millis(800);

/// One cell of the matrix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub from: String,
    pub to: String,
    pub port: u16,
    pub protocol: String,
    pub connected: bool,
}

/// Probes `port`/`protocol` from every pod of `state` to every pod (the cluster DNS's pods
/// left out), in parallel; the cells in row order.
pub fn matrix(state: &State, port: u16, protocol: Protocol) -> Vec<Probe> {
    let pods: Vec<&super::PodState> = state
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .filter(|p| !p.name.starts_with(super::topology::DNS_POD_PREFIX))
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .flat_map(|from| pods.iter().map(move |to| (*from, *to)))
            .map(|(from, to)| {
                let target = SocketAddr::from((to.ip, port));
                let netns = from.netns.clone();
                let cell = Probe {
                    from: key(from),
                    to: key(to),
                    port,
                    protocol: protocol.to_string(),
                    connected: false,
                };
                s.spawn(move || Probe {
                    connected: Netns::named(&netns)
                        .run(|| Ok(reach(target, protocol)))
                        .unwrap_or(false),
                    ..cell
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    })
}

fn key(p: &super::PodState) -> String {
    format!("{}/{}", p.namespace, p.name)
}

/// Whether `target` answers: a TCP connection accepted, or the UDP echo's answer.
fn reach(target: SocketAddr, protocol: Protocol) -> bool {
    match protocol {
        Protocol::Tcp => TcpStream::connect_timeout(&target, TIMEOUT).is_ok(),
        Protocol::Udp => {
            let Ok(sock) = UdpSocket::bind(("0.0.0.0", 0)) else {
                return false;
            };
            let mut buf = [0u8; 512];
            sock.set_read_timeout(Some(TIMEOUT)).is_ok()
                && sock.send_to(b"probe", target).is_ok()
                && sock.recv_from(&mut buf).is_ok()
        }
    }
}

/// The matrix as upstream prints `Reachability`: a header of the destinations, then one row
/// per source.
pub fn table(cells: &[Probe]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for c in cells {
        if !names.contains(&c.from.as_str()) {
            names.push(&c.from);
        }
    }
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0);
    let mut out = format!("{:width$}", "");
    for n in &names {
        out.push_str(&format!(" {n}"));
    }
    out.push('\n');
    for from in &names {
        out.push_str(&format!("{from:width$}"));
        for to in &names {
            let c = cells.iter().find(|c| c.from == *from && c.to == *to);
            let mark = if c.is_some_and(|c| c.connected) {
                "."
            } else {
                "X"
            };
            out.push_str(&format!(" {mark:<w$}", w = to.len()));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_reads_as_upstreams_reachability() {
        let cell = |from: &str, to: &str, connected| Probe {
            from: from.into(),
            to: to.into(),
            port: 80,
            protocol: "tcp".into(),
            connected,
        };
        let t = table(&[
            cell("x/a", "x/a", true),
            cell("x/a", "y/b", false),
            cell("y/b", "x/a", true),
            cell("y/b", "y/b", true),
        ]);
        assert_eq!(t, "    x/a y/b\nx/a .   X  \ny/b .   .  \n");
    }
}
