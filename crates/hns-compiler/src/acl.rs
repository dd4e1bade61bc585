//! Endpoint `ACL` policies on the ACL layer: each policy one rule (priority, Allow/Block,
//! In/Out, protocols, local and remote address and port lists), each with its own owner so a
//! trace names the very policy that decided. Rules are stateful: the replies of an allowed
//! connection follow its flow without meeting the ACLs again.

use hcn::policy::{AclAction, AclDirection, AclList, AclPolicySetting};
use hcn::{Endpoint, EndpointPolicy};
use vfp::layer::ACL;
use vfp::{Action, Conditions, Direction, Origin, PortRange, Rule};

use crate::placement::{Compiled, Target};

/// The owner kind of ACL rules.
pub const KIND: &str = "Endpoint/ACL";

/// Adds a rule set per `ACL` policy of `ep` to its port.
pub fn compile(ep: &Endpoint, out: &mut Compiled) {
    let acls = ep.policies.iter().filter_map(|p| match p {
        EndpointPolicy::Acl(a) => Some(a),
        _ => None,
    });
    for (i, a) in acls.enumerate() {
        let origin = Origin::new(KIND, format!("{}/{i}", ep.id)).with_source(format!(
            "ACL {i} of endpoint {}: {}",
            name(ep),
            describe(a)
        ));
        out.place(Target::Endpoint(ep.id), ACL, origin, vec![rule(a)]);
    }
}

fn name(ep: &Endpoint) -> String {
    if ep.name.is_empty() {
        ep.id.to_string()
    } else {
        ep.name.clone()
    }
}

/// The policy in one line, as HNS would show its settings.
pub fn describe(a: &AclPolicySetting) -> String {
    let mut s = format!("{} {} priority {}", a.action, a.direction, a.priority);
    for (k, v) in [
        ("protocols", a.protocols.as_str()),
        ("local", a.local_addresses.as_str()),
        ("remote", a.remote_addresses.as_str()),
        ("local ports", a.local_ports.as_str()),
        ("remote ports", a.remote_ports.as_str()),
    ] {
        if !v.is_empty() {
            s.push_str(&format!(" {k} {v}"));
        }
    }
    s
}

/// One ACL policy as a rule. "Local" is the endpoint's side: the source of what it sends
/// (`Out`), the destination of what it receives (`In`). The lists were parsed when the policy
/// was decoded; each becomes a condition entry for entry, so the rule matches exactly what the
/// policy names (an empty list, and only an empty list, matches anything).
pub fn rule(a: &AclPolicySetting) -> Rule {
    let dir = match a.direction {
        AclDirection::In => Direction::In,
        AclDirection::Out => Direction::Out,
    };
    let mut c = Conditions::any().direction(dir);
    c.protocols = restriction(&a.protocols, |p| *p);
    let local = restriction(&a.local_addresses, |n| *n);
    let remote = restriction(&a.remote_addresses, |n| *n);
    let local_ports = restriction(&a.local_ports, port_range);
    let remote_ports = restriction(&a.remote_ports, port_range);
    match dir {
        Direction::Out => {
            (c.src, c.dst) = (local, remote);
            (c.src_ports, c.dst_ports) = (local_ports, remote_ports);
        }
        Direction::In => {
            (c.dst, c.src) = (local, remote);
            (c.dst_ports, c.src_ports) = (local_ports, remote_ports);
        }
    }
    let action = match a.action {
        AclAction::Block => Action::Block,
        AclAction::Allow | AclAction::Pass => Action::Allow,
    };
    Rule::new(a.priority, c, action)
}

/// A list as a rule condition: `None` (anything) for an empty list, else every entry.
fn restriction<T, U>(list: &AclList<T>, entry: impl Fn(&T) -> U) -> Option<Vec<U>> {
    (!list.is_any()).then(|| list.entries().iter().map(entry).collect())
}

fn port_range(r: &hcn::policy::PortRange) -> PortRange {
    PortRange {
        first: r.first,
        last: r.last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hcn::policy::AclRuleType;
    use std::net::IpAddr;
    use vfp::Headers;
    use vfp::wire::proto;

    fn acl(direction: AclDirection, local_ports: &str, remote: &str) -> AclPolicySetting {
        AclPolicySetting {
            protocols: "6,17".parse().unwrap(),
            action: AclAction::Block,
            direction,
            local_addresses: AclList::any(),
            remote_addresses: remote.parse().unwrap(),
            local_ports: local_ports.parse().unwrap(),
            remote_ports: AclList::any(),
            rule_type: Some(AclRuleType::Switch),
            priority: 250,
        }
    }

    fn tcp(src: &str, sport: u16, dst: &str, dport: u16) -> Headers {
        Headers {
            src_ip: src.parse::<IpAddr>().unwrap(),
            dst_ip: dst.parse::<IpAddr>().unwrap(),
            proto: proto::TCP,
            src_port: sport,
            dst_port: dport,
            ..Headers::empty()
        }
    }

    #[test]
    fn local_is_the_destination_inbound_and_the_source_outbound() {
        let inbound = rule(&acl(AclDirection::In, "80,8000-8080", "10.244.2.0/24"));
        assert_eq!(inbound.priority, 250);
        assert_eq!(inbound.action, Action::Block);
        let h = tcp("10.244.2.7", 40000, "10.244.1.3", 8080);
        assert!(inbound.conditions.matches(&h, None, Direction::In));
        assert!(!inbound.conditions.matches(&h, None, Direction::Out));
        assert!(!inbound.conditions.matches(
            &tcp("10.244.3.7", 1, "10.244.1.3", 80),
            None,
            Direction::In
        ));
        assert!(!inbound.conditions.matches(
            &tcp("10.244.2.7", 1, "10.244.1.3", 81),
            None,
            Direction::In
        ));
        let outbound = rule(&acl(AclDirection::Out, "53", "10.96.0.10"));
        let h = tcp("10.244.1.3", 53, "10.96.0.10", 999);
        assert!(outbound.conditions.matches(&h, None, Direction::Out));
        let mut icmp = h;
        icmp.proto = proto::ICMP;
        assert!(!outbound.conditions.matches(&icmp, None, Direction::Out));
    }

    #[test]
    fn description_names_the_settings() {
        let d = describe(&acl(AclDirection::In, "80", ""));
        assert_eq!(d, "Block In priority 250 protocols 6,17 local ports 80");
    }

    mod exactness {
        //! The rule compiled from a policy matches exactly the packets the policy names: never
        //! more (a Block that widens blocks traffic the user allowed, an Allow that widens lets
        //! through what a later Block was for), never less. The reference reads the policy's
        //! own text, independently of `hcn`'s parser and of the compiler.
        use super::*;
        use ipnet::IpNet;
        use proptest::prelude::*;

        const PROTOCOLS: [u8; 4] = [proto::ICMP, proto::TCP, proto::UDP, proto::ICMPV6];

        fn address(v6: bool, host: u8) -> IpAddr {
            if v6 {
                IpAddr::V6(std::net::Ipv6Addr::new(
                    0xfd00,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0,
                    host.into(),
                ))
            } else {
                IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, host))
            }
        }

        /// An address or prefix as HNS clients write them, over a space small enough to hit.
        fn address_entry() -> impl Strategy<Value = String> {
            (any::<bool>(), 0u8..16, 0u8..5, any::<bool>()).prop_map(|(v6, host, shorter, bare)| {
                let a = address(v6, host);
                let max = if v6 { 128 } else { 32 };
                if bare {
                    a.to_string()
                } else {
                    format!("{a}/{}", max - shorter)
                }
            })
        }

        fn port_entry() -> impl Strategy<Value = String> {
            (0u16..20, 0u16..4).prop_map(|(p, width)| match width {
                0 => p.to_string(),
                w => format!("{p}-{}", p + w),
            })
        }

        fn list(entry: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
            (prop::collection::vec(entry, 0..3), any::<bool>())
                .prop_map(|(v, spaced)| v.join(if spaced { ", " } else { "," }))
        }

        fn policy() -> impl Strategy<Value = serde_json::Value> {
            (
                prop::sample::subsequence(PROTOCOLS.to_vec(), 0..3),
                any::<bool>(),
                any::<bool>(),
                [list(address_entry()), list(address_entry())],
                [list(port_entry()), list(port_entry())],
            )
                .prop_map(|(protocols, block, inbound, [local, remote], [lp, rp])| {
                    let protocols: Vec<String> = protocols.iter().map(u8::to_string).collect();
                    serde_json::json!({
                        "Protocols": protocols.join(","),
                        "Action": if block { "Block" } else { "Allow" },
                        "Direction": if inbound { "In" } else { "Out" },
                        "LocalAddresses": local, "RemoteAddresses": remote,
                        "LocalPorts": lp, "RemotePorts": rp, "Priority": 200,
                    })
                })
        }

        fn packet() -> impl Strategy<Value = (Headers, Direction)> {
            (
                prop::sample::select(PROTOCOLS.to_vec()),
                any::<bool>(),
                [0u8..16, 0u8..16],
                [0u16..24, 0u16..24],
                any::<bool>(),
            )
                .prop_map(|(proto, v6, [s, d], [sp, dp], inbound)| {
                    let h = Headers {
                        src_ip: address(v6, s),
                        dst_ip: address(v6, d),
                        proto,
                        src_port: sp,
                        dst_port: dp,
                        ..Headers::empty()
                    };
                    (
                        h,
                        if inbound {
                            Direction::In
                        } else {
                            Direction::Out
                        },
                    )
                })
        }

        /// True when `text` (a comma-separated list) is empty or an entry admits the value.
        fn admits(text: &str, entry: impl Fn(&str) -> bool) -> bool {
            let entries: Vec<&str> = text
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .collect();
            entries.is_empty() || entries.into_iter().any(entry)
        }

        fn net_has(e: &str, ip: IpAddr) -> bool {
            let net = e
                .parse::<IpNet>()
                .unwrap_or_else(|_| IpNet::from(e.parse::<IpAddr>().unwrap()));
            net.contains(&ip)
        }

        fn range_has(e: &str, h: &Headers, port: u16) -> bool {
            let (lo, hi) = e.split_once('-').unwrap_or((e, e));
            let carries_ports = h.proto == proto::TCP || h.proto == proto::UDP;
            carries_ports
                && (lo.parse::<u16>().unwrap()..=hi.parse::<u16>().unwrap()).contains(&port)
        }

        /// The policy's meaning, read from its JSON: "local" is the endpoint's side.
        fn policy_names(p: &serde_json::Value, h: &Headers, dir: Direction) -> bool {
            let field = |k: &str| p[k].as_str().unwrap().to_string();
            let inbound = field("Direction") == "In";
            if inbound != (dir == Direction::In) {
                return false;
            }
            let (local, remote) = if inbound {
                (h.dst_ip, h.src_ip)
            } else {
                (h.src_ip, h.dst_ip)
            };
            let (lport, rport) = if inbound {
                (h.dst_port, h.src_port)
            } else {
                (h.src_port, h.dst_port)
            };
            admits(&field("Protocols"), |e| e.parse::<u8>().unwrap() == h.proto)
                && admits(&field("LocalAddresses"), |e| net_has(e, local))
                && admits(&field("RemoteAddresses"), |e| net_has(e, remote))
                && admits(&field("LocalPorts"), |e| range_has(e, h, lport))
                && admits(&field("RemotePorts"), |e| range_has(e, h, rport))
        }

        proptest! {
            #[test]
            fn a_compiled_acl_matches_exactly_what_its_policy_names(
                doc in policy(),
                packets in prop::collection::vec(packet(), 32),
            ) {
                let a: AclPolicySetting = serde_json::from_value(doc.clone()).unwrap();
                let r = rule(&a);
                let block = doc["Action"] == "Block";
                prop_assert_eq!(r.action == Action::Block, block);
                for (h, dir) in &packets {
                    let named = policy_names(&doc, h, *dir);
                    let matched = r.conditions.matches(h, None, *dir);
                    prop_assert!(named || !matched, "broader than the policy {}: {} {:?}", doc, h, dir);
                    prop_assert!(matched || !named, "narrower than the policy {}: {} {:?}", doc, h, dir);
                }
            }
        }
    }
}
