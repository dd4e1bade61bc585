//! Frontends the host sends into the switch instead of to itself ([`HostClaim`]: a NodePort
//! where the profile lets the node reach its own NodePorts, `LocalRoutedVIP`). In the node's
//! kernel a connection to one of its own addresses never leaves the host, so each claim gets a
//! policy route: locally made packets to that address, protocol and port are routed out of the
//! management vNIC to the default gateway, where the switch's load balancer takes them; the
//! answers come back from the host's own address, which the vNIC is told to accept.
//!
//! Policy routes are made with iproute2's `ip rule`/`ip route` (the netlink glue in `host`
//! has no FIB-rule messages yet).

use std::collections::BTreeSet;
use std::process::Command;

use crate::compiler::{Compiler, HostClaim};

/// The routing table claims route through.
const TABLE: &str = "4242";
/// The preference of claim rules (before the local table, which moves behind them).
const PREF: &str = "500";
/// Where the local table's rule moves to while there are claims.
const LOCAL_PREF: &str = "1000";

/// The claims in force.
#[derive(Default)]
pub struct Claims {
    installed: BTreeSet<HostClaim>,
    gateway: Option<std::net::IpAddr>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn proto(p: u8) -> Option<&'static str> {
    match p {
        6 => Some("tcp"),
        17 => Some("udp"),
        _ => None,
    }
}

impl Claims {
    /// Brings the policy routes in line with the compiler's claims.
    pub fn sync(&mut self, c: &Compiler, vnic: &str, taken: bool) {
        let want: BTreeSet<HostClaim> = if taken {
            c.host_claims()
                .into_iter()
                .filter(|h| h.address.is_ipv4() && proto(h.protocol).is_some())
                .collect()
        } else {
            BTreeSet::new()
        };
        let gateway = want
            .iter()
            .next()
            .and_then(|h| c.facts().default_gateway(h.address));
        if want == self.installed && gateway == self.gateway {
            return;
        }
        for h in self.installed.clone() {
            if !want.contains(&h) {
                let _ = rule("del", &h);
            }
        }
        if want.is_empty() {
            if !self.installed.is_empty() {
                // The local table's rule goes back to the front.
                let _ = ip(&["rule", "add", "pref", "0", "lookup", "local"]);
                let _ = ip(&["rule", "del", "pref", LOCAL_PREF, "lookup", "local"]);
                let _ = ip(&["route", "flush", "table", TABLE]);
            }
            self.installed.clear();
            self.gateway = None;
            return;
        }
        let Some(gw) = gateway else {
            tracing::warn!(
                "the host has no default gateway: its own NodePorts are not routed into the switch"
            );
            return;
        };
        if self.installed.is_empty() {
            let moved = ip(&["rule", "add", "pref", LOCAL_PREF, "lookup", "local"])
                .and_then(|()| ip(&["rule", "del", "pref", "0", "lookup", "local"]))
                .and_then(|()| {
                    host::link::set_sysctl(&format!("net/ipv4/conf/{vnic}/accept_local"), "1")
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = moved {
                tracing::warn!("cannot route the host's own NodePorts into the switch: {e}");
                return;
            }
        }
        let gw = gw.to_string();
        if let Err(e) = ip(&[
            "route", "replace", "default", "via", &gw, "dev", vnic, "table", TABLE,
        ]) {
            tracing::warn!("{e}");
            return;
        }
        for h in &want {
            if !self.installed.contains(h)
                && let Err(e) = rule("add", h)
            {
                tracing::warn!("{e}");
            }
        }
        self.installed = want;
        self.gateway = gateway;
    }
}

fn rule(verb: &str, h: &HostClaim) -> Result<(), String> {
    let to = format!("{}/32", h.address);
    let port = h.port.to_string();
    let p = proto(h.protocol).unwrap_or("tcp");
    ip(&[
        "rule", verb, "pref", PREF, "iif", "lo", "to", &to, "ipproto", p, "dport", &port, "lookup",
        TABLE,
    ])
}
