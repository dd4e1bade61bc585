//! Frontends the host sends into the switch instead of to itself ([`HostClaim`]: a NodePort
//! where the profile lets the node reach its own NodePorts, `LocalRoutedVIP`). In the node's
//! kernel a connection to one of its own addresses never leaves the host, so each claim gets a
//! policy route: locally made packets to that address, protocol and port are routed out of the
//! management vNIC to the default gateway, where the switch's load balancer takes them; the
//! answers come back from the host's own address, which the vNIC is told to accept.
//!
//! Policy routes are FIB rules and a routing table of their own, made over rtnetlink
//! ([`host::netlink`]) in the namespace of the calling thread (the node's).

use std::collections::BTreeSet;
use std::net::IpAddr;

use host::HostError;
use host::netlink::{LOCAL_TABLE, Netlink, PortRange, RouteEntry, Rule, RuleFamily};
use ipnet::IpNet;

use hns_compiler::{Compiler, HostClaim};

/// The routing table claims route through.
const TABLE: u32 = 4242;
/// The preference of claim rules (before the local table, which moves behind them).
const PREF: u32 = 500;
/// Where the local table's rule moves to while there are claims.
const LOCAL_PREF: u32 = 1000;

/// The claims in force.
#[derive(Default)]
pub struct Claims {
    installed: BTreeSet<HostClaim>,
    gateway: Option<IpAddr>,
}

/// True for the protocols a rule can name a port of.
fn has_ports(protocol: u8) -> bool {
    matches!(protocol, 6 | 17)
}

/// The rule of claim `h`: packets this host makes (`iif lo`) to its address, protocol and
/// port look their route up in [`TABLE`].
fn claim_rule(h: &HostClaim) -> Rule {
    Rule {
        priority: Some(PREF),
        iif: Some("lo".into()),
        dst: Some(IpNet::from(h.address)),
        ip_proto: Some(h.protocol),
        dport: Some(PortRange::single(h.port)),
        ..Rule::lookup(RuleFamily::of(h.address), TABLE)
    }
}

/// The IPv4 rule that looks the local table up, at `priority` (0 where the kernel puts it).
fn local_rule(priority: u32) -> Rule {
    Rule {
        priority: Some(priority),
        ..Rule::lookup(RuleFamily::Ipv4, LOCAL_TABLE)
    }
}

impl Claims {
    /// Brings the policy routes in line with the compiler's claims.
    pub fn sync(&mut self, c: &Compiler, vnic: &str, taken: bool) {
        let want: BTreeSet<HostClaim> = if taken {
            c.host_claims()
                .into_iter()
                .filter(|h| h.address.is_ipv4() && has_ports(h.protocol))
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
        let mut nl = match Netlink::open() {
            Ok(nl) => nl,
            Err(e) => {
                tracing::warn!("cannot change the host's policy routes for its own NodePorts: {e}");
                return;
            }
        };
        for h in self.installed.difference(&want) {
            if let Err(e) = nl.del_rule(&claim_rule(h)) {
                tracing::warn!("{e}");
            }
        }
        if want.is_empty() {
            if !self.installed.is_empty()
                && let Err(e) = release(&mut nl)
            {
                tracing::warn!("cannot give the local table its place back: {e}");
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
        if self.installed.is_empty()
            && let Err(e) = take(&mut nl, vnic)
        {
            tracing::warn!("cannot route the host's own NodePorts into the switch: {e}");
            return;
        }
        if let Err(e) = route_to(&mut nl, vnic, gw) {
            tracing::warn!("{e}");
            return;
        }
        for h in want.difference(&self.installed) {
            if let Err(e) = nl.add_rule(&claim_rule(h)) {
                tracing::warn!("{e}");
            }
        }
        self.installed = want;
        self.gateway = gateway;
    }
}

/// Moves the local table's rule behind the claims' and lets the vNIC accept packets from the
/// host's own addresses.
fn take(nl: &mut Netlink, vnic: &str) -> Result<(), HostError> {
    nl.add_rule(&local_rule(LOCAL_PREF))?;
    nl.del_rule(&local_rule(0))?;
    host::sysctl::set_sysctl(&format!("net/ipv4/conf/{vnic}/accept_local"), "1")
}

/// The claims' table: a default route to `gw` out of the vNIC.
fn route_to(nl: &mut Netlink, vnic: &str, gw: IpAddr) -> Result<(), HostError> {
    let vnic = nl.existing_link(vnic)?;
    let default = if gw.is_ipv4() {
        IpNet::V4(Default::default())
    } else {
        IpNet::V6(Default::default())
    };
    let route = RouteEntry {
        destination: default,
        gateway: Some(gw),
        oif: Some(vnic.index),
        metric: None,
    };
    nl.add_route_in(TABLE, &route, false)
}

/// Puts the local table's rule back in front and empties the claims' table.
fn release(nl: &mut Netlink) -> Result<(), HostError> {
    nl.add_rule(&local_rule(0))?;
    nl.del_rule(&local_rule(LOCAL_PREF))?;
    nl.flush_routes_in(TABLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_the_rule_ip_rule_was_given() {
        let h = HostClaim {
            protocol: 6,
            address: "192.168.77.11".parse().expect("ip"),
            port: 30080,
        };
        assert_eq!(
            claim_rule(&h).to_string(),
            "pref 500 from all to 192.168.77.11/32 iif lo ipproto tcp dport 30080 lookup 4242"
        );
        assert_eq!(
            local_rule(LOCAL_PREF).to_string(),
            "pref 1000 from all lookup local"
        );
        assert!(has_ports(17) && !has_ports(1));
    }
}
