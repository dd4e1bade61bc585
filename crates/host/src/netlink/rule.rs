//! Policy routing rules (`ip rule`): which routing table a route lookup uses, chosen by what
//! the packet is and where it comes from. Rules are tried from the lowest priority up; the
//! first that matches names the table.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use super::route::{LOCAL_TABLE, MAIN_TABLE};
use super::wire::{
    self, AF_INET, AF_INET6, Request, WireError, attrs, c_string, ip_of, malformed, u16_at, u32_of,
};
use super::{Netlink, check_link_name};
use crate::HostError;

const FRA_DST: u16 = 1;
const FRA_IIFNAME: u16 = 3;
const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
const FRA_IP_PROTO: u16 = 22;
const FRA_DPORT_RANGE: u16 = 24;
/// `fib_rule_hdr.action`: look the route up in the rule's table.
const FR_ACT_TO_TBL: u8 = 1;
/// Size of `struct fib_rule_hdr`, the fixed header of rule messages.
const FIB_RULE_HDR_LEN: usize = 12;

/// The address family of a rule: IPv4 and IPv6 have separate rule lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleFamily {
    /// `ip -4 rule`.
    Ipv4,
    /// `ip -6 rule`.
    Ipv6,
}

impl RuleFamily {
    fn af(self) -> u8 {
        match self {
            RuleFamily::Ipv4 => AF_INET,
            RuleFamily::Ipv6 => AF_INET6,
        }
    }

    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> RuleFamily {
        if ip.is_ipv4() {
            RuleFamily::Ipv4
        } else {
            RuleFamily::Ipv6
        }
    }
}

/// Ports from `first` to `last`, both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// The one port `port`.
    pub fn single(port: u16) -> PortRange {
        PortRange {
            first: port,
            last: port,
        }
    }
}

/// A policy routing rule that sends the lookups it matches to a table (`ip rule ... lookup
/// TABLE`). Each selector left `None` matches everything. Rules the kernel lists with
/// selectors this type does not name (source, fwmark, ...) read without them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    pub family: RuleFamily,
    /// The rule's preference: rules are tried from the lowest. `None` on adding lets the
    /// kernel put it just before the last rule that has one; read rules always have it.
    pub priority: Option<u32>,
    /// The routing table matching lookups use ([`MAIN_TABLE`], [`LOCAL_TABLE`] or a policy
    /// table).
    pub table: u32,
    /// Only packets that arrive on this interface; `lo` means packets this host sends.
    pub iif: Option<String>,
    /// Only packets to this prefix.
    pub dst: Option<IpNet>,
    /// Only this IP protocol (6 TCP, 17 UDP).
    pub ip_proto: Option<u8>,
    /// Only these destination ports.
    pub dport: Option<PortRange>,
}

impl Rule {
    /// A rule of `family` that sends every lookup to `table`, narrowed by setting the other
    /// fields.
    pub fn lookup(family: RuleFamily, table: u32) -> Rule {
        Rule {
            family,
            priority: None,
            table,
            iif: None,
            dst: None,
            ip_proto: None,
            dport: None,
        }
    }

    /// Refuses rules the kernel would misread: table 0, a destination of the other family,
    /// an interface name Linux does not allow, a reversed port range.
    fn check(&self) -> Result<(), HostError> {
        let bad = |why: &str| Err(HostError::Invalid(format!("rule \"{self}\": {why}")));
        if self.table == 0 {
            return bad("table 0 is not a table; name the main table (254) or a policy table");
        }
        if let Some(dst) = self.dst
            && RuleFamily::of(dst.addr()) != self.family
        {
            return bad("the destination is not of the rule's address family");
        }
        if let Some(iif) = &self.iif {
            check_link_name(iif)?;
        }
        if let Some(p) = self.dport
            && p.first > p.last
        {
            return bad("the port range ends before it starts");
        }
        Ok(())
    }
}

impl fmt::Display for Rule {
    /// As `ip rule` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = self.priority {
            write!(f, "pref {p} ")?;
        }
        f.write_str("from all")?;
        if let Some(dst) = self.dst {
            write!(f, " to {dst}")?;
        }
        if let Some(iif) = &self.iif {
            write!(f, " iif {iif}")?;
        }
        match self.ip_proto {
            Some(6) => f.write_str(" ipproto tcp")?,
            Some(17) => f.write_str(" ipproto udp")?,
            Some(p) => write!(f, " ipproto {p}")?,
            None => {}
        }
        match self.dport {
            Some(p) if p.first == p.last => write!(f, " dport {}", p.first)?,
            Some(p) => write!(f, " dport {}-{}", p.first, p.last)?,
            None => {}
        }
        match self.table {
            MAIN_TABLE => f.write_str(" lookup main"),
            LOCAL_TABLE => f.write_str(" lookup local"),
            t => write!(f, " lookup {t}"),
        }
    }
}

impl Netlink {
    /// The rules of `family` that look routes up in a table, in the kernel's order.
    pub fn rules(&mut self, family: RuleFamily) -> Result<Vec<Rule>, HostError> {
        let fixed = fib_rule_hdr(family.af(), 0, 0, 0);
        self.sock
            .dump(
                || Request::new(wire::RTM_GETRULE, wire::NLM_F_DUMP, &fixed),
                wire::RTM_NEWRULE,
                parse_rule,
            )
            .map_err(|f| f.into_host(format!("list {family:?} rules")))
    }

    /// Adds `rule` (`ip rule add`). Ok if the same rule, with the same priority, is there
    /// already.
    pub fn add_rule(&mut self, rule: &Rule) -> Result<(), HostError> {
        rule.check()?;
        let req = rule_request(
            wire::RTM_NEWRULE,
            wire::NLM_F_ACK | wire::NLM_F_CREATE | wire::NLM_F_EXCL,
            rule,
        );
        self.change_unless(req, libc::EEXIST, |_| format!("add rule \"{rule}\""))
    }

    /// Deletes the first rule that `rule` matches (`ip rule del`: the selectors given must be
    /// equal, the ones left `None` match any). Ok if there is none.
    pub fn del_rule(&mut self, rule: &Rule) -> Result<(), HostError> {
        rule.check()?;
        let req = rule_request(wire::RTM_DELRULE, wire::NLM_F_ACK, rule);
        self.change_unless(req, libc::ENOENT, |_| format!("delete rule \"{rule}\""))
    }
}

/// `struct fib_rule_hdr`: family, dst_len, src_len, tos, table, two reserved bytes, action,
/// flags.
fn fib_rule_hdr(family: u8, dst_len: u8, table: u8, action: u8) -> [u8; FIB_RULE_HDR_LEN] {
    let mut b = [0u8; FIB_RULE_HDR_LEN];
    b[0] = family;
    b[1] = dst_len;
    b[4] = table;
    b[7] = action;
    b
}

/// An `RTM_NEWRULE` or `RTM_DELRULE` request for `rule`. The table goes in `FRA_TABLE`
/// always, and in the header too when it fits, as iproute2 sends it.
fn rule_request(kind: u16, flags: u16, rule: &Rule) -> Request {
    let fixed = fib_rule_hdr(
        rule.family.af(),
        rule.dst.map_or(0, |d| d.prefix_len()),
        u8::try_from(rule.table).unwrap_or(0),
        FR_ACT_TO_TBL,
    );
    let mut req = Request::new(kind, flags, &fixed).attr_u32(FRA_TABLE, rule.table);
    if let Some(p) = rule.priority {
        req = req.attr_u32(FRA_PRIORITY, p);
    }
    if let Some(iif) = &rule.iif {
        req = req.attr_str(FRA_IIFNAME, iif);
    }
    if let Some(dst) = rule.dst {
        req = req.attr_ip(FRA_DST, dst.addr());
    }
    if let Some(proto) = rule.ip_proto {
        req = req.attr(FRA_IP_PROTO, &[proto]);
    }
    if let Some(p) = rule.dport {
        // struct fib_rule_port_range: start, end, in host byte order.
        let mut range = [0u8; 4];
        range[..2].copy_from_slice(&p.first.to_ne_bytes());
        range[2..].copy_from_slice(&p.last.to_ne_bytes());
        req = req.attr(FRA_DPORT_RANGE, &range);
    }
    req
}

/// Reads an `RTM_NEWRULE` payload; `None` for families other than IPv4 and IPv6 and for rules
/// that do something else than look up a table (goto, blackhole, ...).
fn parse_rule(payload: &[u8]) -> Result<Option<Rule>, WireError> {
    let fixed = payload
        .get(..FIB_RULE_HDR_LEN)
        .ok_or_else(|| malformed("rule message shorter than struct fib_rule_hdr"))?;
    let (af, dst_len, action) = (fixed[0], fixed[1], fixed[7]);
    let family = match af {
        AF_INET => RuleFamily::Ipv4,
        AF_INET6 => RuleFamily::Ipv6,
        _ => return Ok(None),
    };
    if action != FR_ACT_TO_TBL {
        return Ok(None);
    }
    let mut rule = Rule::lookup(family, u32::from(fixed[4]));
    // The kernel leaves FRA_PRIORITY out for priority 0.
    rule.priority = Some(0);
    for a in attrs(&payload[FIB_RULE_HDR_LEN..]) {
        let (attr, value) = a?;
        let word =
            |what: &str| u32_of(value).ok_or_else(|| malformed(format!("{what} not 4 bytes")));
        match attr {
            FRA_TABLE => rule.table = word("FRA_TABLE")?,
            FRA_PRIORITY => rule.priority = Some(word("FRA_PRIORITY")?),
            FRA_IIFNAME => rule.iif = Some(c_string(value)),
            FRA_DST => {
                let ip = ip_of(af, value, "FRA_DST")?;
                rule.dst = Some(IpNet::new(ip, dst_len).map_err(|_| {
                    malformed(format!(
                        "rule destination {ip} with prefix length {dst_len}"
                    ))
                })?);
            }
            FRA_IP_PROTO => rule.ip_proto = value.first().copied(),
            FRA_DPORT_RANGE => {
                let (Some(first), Some(last)) = (u16_at(value, 0), u16_at(value, 2)) else {
                    return Err(malformed("FRA_DPORT_RANGE not 4 bytes"));
                };
                rule.dport = Some(PortRange { first, last });
            }
            _ => {}
        }
    }
    Ok(Some(rule))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::wire::NLMSG_HDRLEN;
    use proptest::prelude::*;

    /// The rule hnsd's claims add: TCP to port 30080 of the node's own address, made on this
    /// host, looked up in table 4242.
    fn claim() -> Rule {
        Rule {
            priority: Some(500),
            iif: Some("lo".into()),
            dst: Some("192.168.77.11/32".parse().expect("net")),
            ip_proto: Some(6),
            dport: Some(PortRange::single(30080)),
            ..Rule::lookup(RuleFamily::Ipv4, 4242)
        }
    }

    /// The attributes of a request, by type.
    fn attributes(bytes: &[u8]) -> Vec<(u16, Vec<u8>)> {
        attrs(&bytes[NLMSG_HDRLEN + FIB_RULE_HDR_LEN..])
            .map(|a| a.expect("attribute"))
            .map(|(k, v)| (k, v.to_vec()))
            .collect()
    }

    #[test]
    fn a_claim_rule_is_sent_as_iproute2_sends_it() {
        let bytes = rule_request(wire::RTM_NEWRULE, wire::NLM_F_ACK, &claim()).finish(1);
        let hdr = &bytes[NLMSG_HDRLEN..NLMSG_HDRLEN + FIB_RULE_HDR_LEN];
        // family AF_INET, dst_len 32, table 0 (4242 does not fit), action FR_ACT_TO_TBL.
        assert_eq!(hdr, [AF_INET, 32, 0, 0, 0, 0, 0, FR_ACT_TO_TBL, 0, 0, 0, 0]);
        let mut port = 30080u16.to_ne_bytes().to_vec();
        port.extend_from_slice(&30080u16.to_ne_bytes());
        assert_eq!(
            attributes(&bytes),
            [
                (FRA_TABLE, 4242u32.to_ne_bytes().to_vec()),
                (FRA_PRIORITY, 500u32.to_ne_bytes().to_vec()),
                (FRA_IIFNAME, b"lo\0".to_vec()),
                (FRA_DST, vec![192, 168, 77, 11]),
                (FRA_IP_PROTO, vec![6]),
                (FRA_DPORT_RANGE, port),
            ]
        );
    }

    #[test]
    fn the_local_table_fits_the_header_and_a_bare_rule_has_only_its_table() {
        let local = Rule {
            priority: Some(0),
            ..Rule::lookup(RuleFamily::Ipv4, LOCAL_TABLE)
        };
        let bytes = rule_request(wire::RTM_NEWRULE, 0, &local).finish(1);
        assert_eq!(bytes[NLMSG_HDRLEN + 4], 255);
        assert_eq!(
            attributes(&bytes),
            [
                (FRA_TABLE, 255u32.to_ne_bytes().to_vec()),
                (FRA_PRIORITY, 0u32.to_ne_bytes().to_vec()),
            ]
        );
        assert_eq!(local.to_string(), "pref 0 from all lookup local");
    }

    #[test]
    fn rules_print_as_ip_rule_does_and_bad_ones_are_refused() {
        assert_eq!(
            claim().to_string(),
            "pref 500 from all to 192.168.77.11/32 iif lo ipproto tcp dport 30080 lookup 4242"
        );
        let v6_dst = Rule {
            dst: Some("fd00::1/128".parse().expect("net")),
            ..claim()
        };
        assert!(matches!(v6_dst.check(), Err(HostError::Invalid(_))));
        assert!(matches!(
            Rule::lookup(RuleFamily::Ipv4, 0).check(),
            Err(HostError::Invalid(_))
        ));
        let reversed = Rule {
            dport: Some(PortRange {
                first: 90,
                last: 80,
            }),
            ..claim()
        };
        assert!(matches!(reversed.check(), Err(HostError::Invalid(_))));
        let bad_iif = Rule {
            iif: Some("a/b".into()),
            ..claim()
        };
        assert!(bad_iif.check().is_err());
        assert!(claim().check().is_ok());
    }

    #[test]
    fn rules_of_other_actions_and_families_are_skipped() {
        let mut payload =
            rule_request(wire::RTM_NEWRULE, 0, &claim()).finish(1)[NLMSG_HDRLEN..].to_vec();
        assert_eq!(parse_rule(&payload), Ok(Some(claim())));
        payload[7] = 6; // FR_ACT_BLACKHOLE
        assert_eq!(parse_rule(&payload), Ok(None));
        payload[7] = FR_ACT_TO_TBL;
        payload[0] = 7; // AF_BRIDGE
        assert_eq!(parse_rule(&payload), Ok(None));
    }

    fn any_rule() -> impl Strategy<Value = Rule> {
        (
            any::<bool>(),
            any::<u32>(),
            1u32..,
            proptest::option::of("[a-z0-9]{1,15}"),
            proptest::option::of((any::<u32>(), 0u8..=32)),
            proptest::option::of(any::<u8>()),
            proptest::option::of((any::<u16>(), any::<u16>())),
        )
            .prop_map(|(v6, priority, table, iif, dst, ip_proto, ports)| {
                let family = if v6 {
                    RuleFamily::Ipv6
                } else {
                    RuleFamily::Ipv4
                };
                let dst = dst.map(|(a, len)| match family {
                    RuleFamily::Ipv4 => IpNet::new(IpAddr::from(a.to_be_bytes()), len),
                    RuleFamily::Ipv6 => IpNet::new(
                        IpAddr::from(u128::from(a).to_be_bytes()),
                        len.saturating_mul(4),
                    ),
                });
                Rule {
                    family,
                    priority: Some(priority),
                    table,
                    iif,
                    dst: dst.and_then(Result::ok),
                    ip_proto,
                    dport: ports.map(|(a, b)| PortRange {
                        first: a.min(b),
                        last: a.max(b),
                    }),
                }
            })
    }

    proptest! {
        #[test]
        fn a_rule_request_reads_back_as_the_rule(rule in any_rule()) {
            let bytes = rule_request(wire::RTM_NEWRULE, 0, &rule).finish(1);
            prop_assert_eq!(parse_rule(&bytes[NLMSG_HDRLEN..]), Ok(Some(rule)));
        }

        #[test]
        fn no_rule_payload_makes_the_reader_panic(
            rule in any_rule(),
            bytes in proptest::collection::vec(any::<u8>(), 0..128),
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let _ = parse_rule(&bytes);
            let mut payload = rule_request(wire::RTM_NEWRULE, 0, &rule).finish(1)[NLMSG_HDRLEN..].to_vec();
            let i = at % payload.len();
            payload[i] = byte;
            payload.truncate(cut % (payload.len() + 1));
            let _ = parse_rule(&payload);
        }
    }
}
