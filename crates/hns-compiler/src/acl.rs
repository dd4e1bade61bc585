//! Endpoint `ACL` policies on the ACL layer, in VFP's groups per address family and direction
//! (`ACL_ENDPOINT_GROUP_IPV4_IN`, ..., as `vfpctrl /layer ACL_ENDPOINT_LAYER` lists them), each
//! policy its own rules and owner, so that a trace names the very policy that decided (its `Id`,
//! priority, action and direction, and the endpoint). Set IDs in the addresses stand for their
//! members, a nested set's recursively. The lower `Priority` number wins; on a tie Block wins,
//! then the policy listed first (HNS documents no order: felix bumps its priorities whenever the
//! action changes so that no tie decides, reference windows-network-policy.md takeaway 3; a
//! Block that loses a tie would let through what a deny was written for). Rules are stateful:
//! the replies of an allowed connection follow its flow without meeting the ACLs again.
//!
//! An ACL of `RuleType` `Host` is the host firewall's (WFP), not the switch's: it is noted, not
//! placed. `TierAcl` tiers follow the plain ACLs, each a group of its own in `Order` ([`tiers`]).
//! Under [`Limitation::AclDefaultDeny`] (ws2025) an endpoint with any ACL blocks what no ACL
//! allows; elsewhere the layer lets through what no ACL names.

use std::collections::{BTreeMap, BTreeSet};

use hcn::policy::{
    AclAction, AclAddresses, AclDirection, AclList, AclPolicySetting, AclRuleType, SetPolicySetting,
};
use hcn::{Endpoint, EndpointPolicy, Network, NetworkPolicy};
use hns::profile::{Limitation, Profile};
use ipnet::IpNet;
use vfp::layer::{ACL, DefaultAction};
use vfp::{Action, Conditions, Direction, Origin, PortRange, Rule};

use crate::placement::{Compiled, LayerDefault, Target};

/// The owner kind of ACL rules.
pub const KIND: &str = "Endpoint/ACL";

/// Windows' name of the layer endpoint ACLs are in (`vfpctrl /layer ACL_ENDPOINT_LAYER`).
pub const LAYER_NAME: &str = "ACL_ENDPOINT_LAYER";

/// The group of rules of one family and direction, as VFP names it.
pub fn group(v6: bool, dir: Direction) -> &'static str {
    match (v6, dir) {
        (false, Direction::In) => "ACL_ENDPOINT_GROUP_IPV4_IN",
        (false, Direction::Out) => "ACL_ENDPOINT_GROUP_IPV4_OUT",
        (true, Direction::In) => "ACL_ENDPOINT_GROUP_IPV6_IN",
        (true, Direction::Out) => "ACL_ENDPOINT_GROUP_IPV6_OUT",
    }
}

/// Adds the rules of every `ACL` policy of `ep` (on `net`, whose sets its addresses may name)
/// to its port, and the default-deny where `profile` has it.
pub fn compile(ep: &Endpoint, net: &Network, profile: Profile, out: &mut Compiled) {
    let sets = Sets::of(net);
    let mut acls: Vec<(usize, &AclPolicySetting)> = ep
        .policies
        .iter()
        .filter_map(|p| match p {
            EndpointPolicy::Acl(a) => Some(a),
            _ => None,
        })
        .enumerate()
        .collect();
    // Installed in the order ties are decided in (the switch breaks ties by insertion).
    acls.sort_by_key(|(i, a)| (a.priority, a.action != AclAction::Block, *i));
    for (i, a) in &acls {
        let mut origin = Origin::new(KIND, format!("{}/{i}", ep.id)).with_source(format!(
            "ACL {} of endpoint {}: {}",
            shown_id(a, *i),
            name(ep),
            describe(a)
        ));
        if !a.id.is_empty() {
            origin = origin.with_name(a.id.clone());
        }
        if a.rule_type == Some(AclRuleType::Host) {
            // Calico's allow-all Host rule at priority 0 would otherwise decide everything.
            out.notice(
                &origin.owner,
                format!(
                    "ACL {} of endpoint {} has RuleType Host: the host's firewall (WFP) enforces it, not the switch, and winnet does not model WFP; only Switch (and unset) rules are on the ACL layer",
                    shown_id(a, *i),
                    name(ep)
                ),
            );
            continue;
        }
        for (v6, r) in rules(a, &sets) {
            let dir = r.conditions.direction.unwrap_or(Direction::In);
            out.place_in_group(
                Target::Endpoint(ep.id),
                ACL,
                group(v6, dir),
                origin.clone(),
                vec![r],
            );
        }
    }
    let tiers = tiers(ep, &sets, out);
    if (!acls.is_empty() || tiers > 0) && profile.imposes(Limitation::AclDefaultDeny) {
        out.defaults.push(LayerDefault {
            target: Target::Endpoint(ep.id),
            layer: ACL,
            action: DefaultAction::Block,
        });
    }
}

/// The endpoint's `TierAcl` policies, each a group after the plain ACLs' in the order of its
/// `Order` (then its name): in a tier the best-priority matching rule decides, `Pass` hands the
/// packet to the next tier, and a tier none of whose rules match hands it on too (HNS documents
/// no fall-through; hcsshim's tiers all end with a Block that matches everything). After the
/// last tier the layer's default decides. Returns how many tiers there are.
fn tiers(ep: &Endpoint, sets: &Sets, out: &mut Compiled) -> usize {
    let mut n = 0;
    for (t, p) in ep.policies.iter().enumerate() {
        let EndpointPolicy::TierAcl(tier) = p else {
            continue;
        };
        n += 1;
        let group = tier_group(tier);
        for (j, r) in tier.tier_acl_rules.iter().enumerate() {
            let a = AclPolicySetting {
                id: r.id.clone(),
                protocols: r.protocols.clone(),
                action: r.tier_acl_rule_action,
                direction: tier.direction,
                local_addresses: r.local_addresses.clone(),
                remote_addresses: r.remote_addresses.clone(),
                local_ports: r.local_ports.clone(),
                remote_ports: r.remote_ports.clone(),
                rule_type: None,
                priority: r.priority,
            };
            let mut origin =
                Origin::new(KIND, format!("{}/tier{t}/{j}", ep.id)).with_source(format!(
                    "TierAcl \"{}\" (Order {}) rule {} of endpoint {}: {}",
                    tier.name,
                    tier.order,
                    shown_id(&a, j),
                    name(ep),
                    describe(&a)
                ));
            if !a.id.is_empty() {
                origin = origin.with_name(a.id.clone());
            }
            let rules: Vec<Rule> = rules(&a, sets).into_iter().map(|(_, r)| r).collect();
            out.place_in_group(Target::Endpoint(ep.id), ACL, group.clone(), origin, rules);
        }
    }
    n
}

/// The group of a tier: ordered by `Order` (zero-padded, so names sort as orders do).
fn tier_group(tier: &hcn::policy::TierAclPolicySetting) -> String {
    let dir = match tier.direction {
        AclDirection::In => "IN",
        AclDirection::Out => "OUT",
    };
    format!("{TIER_PREFIX}{:05}_{}_{dir}", tier.order, tier.name)
}

/// The prefix of tier groups' names.
const TIER_PREFIX: &str = "ACL_ENDPOINT_TIER_";

/// Where a group of the ACL layer goes: the layer's first group, then the plain ACLs' groups,
/// then the tiers by order.
pub fn group_rank(name: &str) -> (u8, &str) {
    if name.starts_with(TIER_PREFIX) {
        (2, name)
    } else if name.starts_with("ACL_ENDPOINT_GROUP_") {
        (1, name)
    } else {
        (0, "")
    }
}

/// After `ep` was compiled: when its ACLs were applied again since the last time (its
/// `LinuxAclGeneration` moved) and the build has [`Limitation::AclUpdateResetsConnections`],
/// its TCP connections are reset. The first sight of an endpoint (a build from the store)
/// resets nothing.
pub(crate) fn reset_if_applied(c: &mut crate::Compiler, ep: &Endpoint) {
    let before = c.acl_generations.insert(ep.id, ep.linux_acl_generation);
    let applied = before.is_some_and(|g| g != ep.linux_acl_generation);
    if applied
        && c.facts
            .profile
            .imposes(Limitation::AclUpdateResetsConnections)
        && let Some(port) = c.endpoint_port(ep.id)
    {
        c.switch.reset_connections(port);
    }
}

/// The name a trace shows for an ACL: its `Id` quoted, or its place among the endpoint's ACLs
/// when it has none.
fn shown_id(a: &AclPolicySetting, i: usize) -> String {
    if a.id.is_empty() {
        i.to_string()
    } else {
        format!("\"{}\"", a.id)
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

/// The members of a network's sets, a nested set's flattened.
#[derive(Default)]
pub struct Sets<'a> {
    by_id: BTreeMap<&'a str, &'a SetPolicySetting>,
}

impl<'a> Sets<'a> {
    /// The sets of `net`.
    pub fn of(net: &'a Network) -> Sets<'a> {
        let by_id = net
            .policies
            .iter()
            .filter_map(|p| match p {
                NetworkPolicy::SetPolicy(s) => Some((s.id.as_str(), s)),
                _ => None,
            })
            .collect();
        Sets { by_id }
    }

    /// The prefixes set `id` holds (none for an unknown set: hnsd refuses ACLs naming one, and a
    /// rule that matched more than asked would be worse than one that matches nothing).
    fn members(&self, id: &str, seen: &mut BTreeSet<String>, out: &mut Vec<IpNet>) {
        if !seen.insert(id.to_string()) {
            return;
        }
        let Some(set) = self.by_id.get(id) else {
            return;
        };
        out.extend(set.values.prefixes());
        for inner in set.values.sets() {
            self.members(inner, seen, out);
        }
    }

    /// An address list with its sets replaced by their members; `None` for any address.
    fn expand(&self, list: &AclAddresses) -> Option<Vec<IpNet>> {
        if list.is_any() {
            return None;
        }
        let mut out: Vec<IpNet> = list.prefixes().collect();
        let mut seen = BTreeSet::new();
        for id in list.sets() {
            self.members(id, &mut seen, &mut out);
        }
        Some(out)
    }
}

/// One ACL policy as rules, one per address family it can match (`true` for IPv6). "Local" is
/// the endpoint's side: the source of what it sends (`Out`), the destination of what it
/// receives (`In`). An empty list, and only an empty list, matches anything; a list of sets
/// with no members matches nothing.
pub fn rules(a: &AclPolicySetting, sets: &Sets) -> Vec<(bool, Rule)> {
    let dir = match a.direction {
        AclDirection::In => Direction::In,
        AclDirection::Out => Direction::Out,
    };
    let (local, remote) = (
        sets.expand(&a.local_addresses),
        sets.expand(&a.remote_addresses),
    );
    let action = match a.action {
        AclAction::Block => Action::Block,
        AclAction::Allow => Action::Allow,
        AclAction::Pass => Action::Pass,
    };
    let mut out = Vec::new();
    for v6 in [false, true] {
        let of_family = |l: &Option<Vec<IpNet>>| {
            l.as_ref().map(|v| {
                v.iter()
                    .copied()
                    .filter(|n| n.addr().is_ipv6() == v6)
                    .collect::<Vec<_>>()
            })
        };
        let (mut l, mut r) = (of_family(&local), of_family(&remote));
        if l.as_ref().is_some_and(Vec::is_empty) || r.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        if l.is_none() && r.is_none() {
            // The family's whole space, so that the rule sits in one family's group only.
            r = Some(vec![whole_family(v6)]);
        }
        let mut c = Conditions::any().direction(dir);
        c.protocols = restriction(&a.protocols, |p| *p);
        let local_ports = restriction(&a.local_ports, port_range);
        let remote_ports = restriction(&a.remote_ports, port_range);
        match dir {
            Direction::Out => {
                (c.src, c.dst) = (l.take(), r.take());
                (c.src_ports, c.dst_ports) = (local_ports, remote_ports);
            }
            Direction::In => {
                (c.dst, c.src) = (l.take(), r.take());
                (c.dst_ports, c.src_ports) = (local_ports, remote_ports);
            }
        }
        out.push((v6, Rule::new(a.priority, c, action.clone())));
    }
    out
}

fn whole_family(v6: bool) -> IpNet {
    if v6 {
        IpNet::V6(ipnet::Ipv6Net::default())
    } else {
        IpNet::V4(ipnet::Ipv4Net::default())
    }
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
            id: String::new(),
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

    /// The one rule of a policy naming IPv4 addresses.
    fn only(a: &AclPolicySetting) -> Rule {
        let mut r = rules(a, &Sets::default());
        assert_eq!(r.len(), 1, "{r:?}");
        let (v6, rule) = r.remove(0);
        assert!(!v6);
        rule
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
        let inbound = only(&acl(AclDirection::In, "80,8000-8080", "10.244.2.0/24"));
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
        let outbound = only(&acl(AclDirection::Out, "53", "10.96.0.10"));
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

    fn network(sets: serde_json::Value) -> Network {
        hcn::decode_value(serde_json::json!({"Name": "n", "Type": "L2Bridge", "Policies": sets}))
            .unwrap()
    }

    fn set(id: &str, kind: &str, values: &str) -> serde_json::Value {
        serde_json::json!({"Type": "SetPolicy", "Settings": {"Id": id, "PolicyType": kind, "Values": values}})
    }

    /// Azure NPM's shape: an ACL naming a nested set matches the members of its sets, and only
    /// them; a set with no members matches nothing (not anything).
    #[test]
    fn set_ids_stand_for_their_members_nested_ones_recursively() {
        let net = network(serde_json::json!([
            set("pods-a", "IPSET", "10.244.1.5,10.244.1.6"),
            set("pods-b", "IPSET", "10.244.2.0/24"),
            set("empty", "IPSET", ""),
            set("ns-x", "NESTEDIPSET", "pods-a,pods-b"),
        ]));
        let sets = Sets::of(&net);
        let mut a = acl(AclDirection::In, "", "ns-x");
        a.local_ports = AclList::any();
        let r = rules(&a, &sets);
        assert_eq!(r.len(), 1, "IPv4 members only: {r:?}");
        let c = &r[0].1.conditions;
        for (src, hit) in [
            ("10.244.1.5", true),
            ("10.244.2.9", true),
            ("10.244.1.7", false),
        ] {
            assert_eq!(
                c.matches(&tcp(src, 1, "10.244.0.2", 80), None, Direction::In),
                hit,
                "{src}"
            );
        }
        let mut none = a.clone();
        none.remote_addresses = "empty".parse().unwrap();
        assert!(
            rules(&none, &sets).is_empty(),
            "an empty set matches nothing"
        );
    }

    /// A rule naming no address goes into both families' groups, each matching its family only.
    #[test]
    fn an_address_less_rule_is_one_rule_per_family() {
        let mut a = acl(AclDirection::Out, "", "");
        a.local_ports = AclList::any();
        let r = rules(&a, &Sets::default());
        assert_eq!(
            r.iter().map(|(v6, _)| *v6).collect::<Vec<_>>(),
            [false, true]
        );
        let v4 = tcp("10.0.0.1", 1, "10.0.0.2", 2);
        let v6 = tcp("fd00::1", 1, "fd00::2", 2);
        assert!(r[0].1.conditions.matches(&v4, None, Direction::Out));
        assert!(!r[0].1.conditions.matches(&v6, None, Direction::Out));
        assert!(r[1].1.conditions.matches(&v6, None, Direction::Out));
        assert_eq!(group(true, Direction::Out), "ACL_ENDPOINT_GROUP_IPV6_OUT");
    }

    /// The placements go in tie order (priority, Block first, then list order); the endpoint
    /// gets the layer's default-deny on ws2025 only, and only when it has an ACL.
    #[test]
    fn ties_go_to_block_and_ws2025_makes_an_endpoint_with_acls_default_deny() {
        let net = network(serde_json::json!([]));
        let mut allow = acl(AclDirection::In, "80", "");
        allow.action = AclAction::Allow;
        allow.id = "allow-80".into();
        let mut block = acl(AclDirection::In, "80", "");
        block.id = "block-80".into();
        let ep = Endpoint {
            policies: vec![EndpointPolicy::Acl(allow), EndpointPolicy::Acl(block)],
            ..Endpoint::default()
        };
        let mut out = Compiled::default();
        compile(&ep, &net, Profile::Ws2025, &mut out);
        let order: Vec<String> = out
            .placements
            .iter()
            .map(|p| p.origin.source.clone().unwrap_or_default())
            .collect();
        // One placement per family: the Block's two, then the Allow's.
        assert_eq!(order.len(), 4);
        assert!(
            order[..2].iter().all(|o| o.contains("\"block-80\""))
                && order[2..].iter().all(|o| o.contains("\"allow-80\"")),
            "{order:?}"
        );
        assert_eq!(out.defaults.len(), 1);
        assert_eq!(out.defaults[0].action, DefaultAction::Block);
        for (profile, policies) in [
            (Profile::Ws2022, ep.policies.clone()),
            (Profile::Ws2025, vec![]),
        ] {
            let mut out = Compiled::default();
            compile(
                &Endpoint {
                    policies,
                    ..ep.clone()
                },
                &net,
                profile,
                &mut out,
            );
            assert!(out.defaults.is_empty(), "{profile}");
        }
    }

    /// Calico's Host (WFP) allow at priority 0 is not the switch's: noted, not placed, so the
    /// Switch rules after it still decide.
    #[test]
    fn a_host_rule_is_noted_not_placed() {
        let net = network(serde_json::json!([]));
        let mut host = acl(AclDirection::In, "", "");
        host.action = AclAction::Allow;
        host.priority = 0;
        host.rule_type = Some(AclRuleType::Host);
        host.id = "allow-host".into();
        let block = acl(AclDirection::In, "80", "");
        let ep = Endpoint {
            policies: vec![EndpointPolicy::Acl(host), EndpointPolicy::Acl(block)],
            ..Endpoint::default()
        };
        let mut out = Compiled::default();
        compile(&ep, &net, Profile::Ws2022, &mut out);
        assert!(
            out.placements.iter().all(|p| p.origin.name.is_none()),
            "only the block"
        );
        assert_eq!(out.placements.len(), 2, "the Block, once per family");
        assert!(
            out.notices
                .iter()
                .any(|n| n.message.contains("RuleType Host"))
        );
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
                let rs = rules(&a, &Sets::default());
                let block = doc["Action"] == "Block";
                prop_assert!(rs.iter().all(|(_, r)| (r.action == Action::Block) == block));
                for (h, dir) in &packets {
                    let named = policy_names(&doc, h, *dir);
                    let matched = rs.iter().any(|(_, r)| r.conditions.matches(h, None, *dir));
                    prop_assert!(named || !matched, "broader than the policy {}: {} {:?}", doc, h, dir);
                    prop_assert!(matched || !named, "narrower than the policy {}: {} {:?}", doc, h, dir);
                }
            }
        }
    }
}
