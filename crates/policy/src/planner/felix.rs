//! Felix's Windows rendering (`dataplane/windows/policysets`): Calico rules to v1 HNS ACLs.
//! A rule with what Windows cannot express (negative matches, ICMP type, named-port sets) is
//! skipped; an IPv6 rule on the IPv4 dataplane is a no-op; each direction's list starts at
//! priority 1000, steps up by one wherever the action changes (HNS's tie-break is not
//! Calico's first-rule-wins), and ends with a Block one step above its last rule.

use hcn::policy::{AclAction, AclDirection, PortRange};
use ipnet::IpNet;

use crate::acl::Acl;

/// Priority of the node -> endpoint allow rule.
pub const HOST_TO_ENDPOINT_PRIORITY: u16 = 900;
/// First priority of policy rules.
pub const POLICY_RULE_BASE_PRIORITY: u16 = 1000;
/// The node -> endpoint rule's `Id`.
pub const HOST_TO_ENDPOINT_ID: &str = "allow-host-to-endpoint";

/// A Calico rule's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleAction {
    Allow,
    Deny,
    /// `pass` / `next-tier`: rendered as a rule of its own action; HNS has none, and the
    /// endpoint's trailing Block then decides (a trailing Pass is enforced as Block).
    Pass,
    Log,
}

/// The parts of a Calico rule (`proto.Rule`) the Windows dataplane reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalicoRule {
    pub rule_id: String,
    pub action: RuleAction,
    /// 0 (both), 4 or 6.
    pub ip_version: u8,
    pub protocol: Option<u8>,
    pub src_net: Vec<IpNet>,
    pub dst_net: Vec<IpNet>,
    pub not_src_net: Vec<IpNet>,
    pub not_dst_net: Vec<IpNet>,
    /// Addresses of the selector IP sets a rule names (resolved); `None`: no set.
    pub src_ip_set: Option<Vec<IpNet>>,
    pub dst_ip_set: Option<Vec<IpNet>>,
    pub src_ports: Vec<PortRange>,
    pub dst_ports: Vec<PortRange>,
    /// The rule names named-port IP sets.
    pub named_ports: bool,
    /// The rule has an ICMP type or code.
    pub icmp: bool,
}

impl CalicoRule {
    /// An Allow rule matching everything.
    pub fn allow(rule_id: impl Into<String>) -> CalicoRule {
        CalicoRule {
            rule_id: rule_id.into(),
            action: RuleAction::Allow,
            ip_version: 0,
            protocol: None,
            src_net: Vec::new(),
            dst_net: Vec::new(),
            not_src_net: Vec::new(),
            not_dst_net: Vec::new(),
            src_ip_set: None,
            dst_ip_set: None,
            src_ports: Vec::new(),
            dst_ports: Vec::new(),
            named_ports: false,
            icmp: false,
        }
    }
}

/// Why a rule made no ACL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Windows cannot express it (felix warns "not supported on Windows").
    NotSupported,
    /// It can match nothing here (an IPv6 rule, an empty set, no overlap).
    NoOp,
}

/// A policy set: its ID (`policy-…` / `profile-…`) and rules of one direction.
pub struct PolicySet<'a> {
    pub id: &'a str,
    pub rules: &'a [CalicoRule],
}

/// The ACLs of one direction of an endpoint: each set's rules in order, then the Block.
pub fn direction_rules(sets: &[PolicySet<'_>], inbound: bool) -> Vec<Acl> {
    let mut priority = POLICY_RULE_BASE_PRIORITY;
    let mut out: Vec<Acl> = Vec::new();
    for set in sets {
        for rule in set.rules {
            let Ok(acls) = rule_acls(set.id, rule, inbound) else {
                continue;
            };
            for mut acl in acls {
                if out.last().is_some_and(|last| last.action != acl.action) {
                    priority += 1;
                }
                acl.priority = priority;
                out.push(acl);
            }
        }
    }
    out.push(Acl::any(AclAction::Block, direction(inbound), priority + 1));
    out
}

fn direction(inbound: bool) -> AclDirection {
    if inbound {
        AclDirection::In
    } else {
        AclDirection::Out
    }
}

/// One rule's ACLs (one per address/port combination), or why none.
pub fn rule_acls(set_id: &str, rule: &CalicoRule, inbound: bool) -> Result<Vec<Acl>, Skip> {
    if rule.ip_version == 6 {
        return Err(Skip::NotSupported);
    }
    let negative = !rule.not_src_net.is_empty() || !rule.not_dst_net.is_empty();
    if negative || rule.icmp || rule.named_ports {
        return Err(Skip::NotSupported);
    }
    let action = match rule.action {
        RuleAction::Allow => AclAction::Allow,
        RuleAction::Deny => AclAction::Block,
        RuleAction::Pass => AclAction::Pass,
        RuleAction::Log => return Err(Skip::NotSupported),
    };
    let src = addresses(&rule.src_net, rule.src_ip_set.as_deref())?;
    let dst = addresses(&rule.dst_net, rule.dst_ip_set.as_deref())?;
    let (local, remote) = if inbound { (dst, src) } else { (src, dst) };
    let (local_ports, remote_ports) = if inbound {
        (&rule.dst_ports, &rule.src_ports)
    } else {
        (&rule.src_ports, &rule.dst_ports)
    };
    let mut acl = Acl::any(action, direction(inbound), POLICY_RULE_BASE_PRIORITY);
    acl.id = format!("{set_id}-{}-0", rule.rule_id);
    acl.protocol = rule.protocol;
    acl.local_addresses = local;
    acl.remote_addresses = remote;
    acl.local_ports = local_ports.clone();
    acl.remote_ports = remote_ports.clone();
    Ok(vec![acl])
}

/// A side's addresses: its IPv4 CIDRs, intersected with its IP set's members when it names
/// one. Every address IPv6: a no-op rule.
fn addresses(nets: &[IpNet], set: Option<&[IpNet]>) -> Result<Vec<String>, Skip> {
    let v4 = |list: &[IpNet]| -> Vec<IpNet> {
        list.iter()
            .filter(|n| matches!(n, IpNet::V4(_)))
            .copied()
            .collect()
    };
    let nets_v4 = v4(nets);
    if !nets.is_empty() && nets_v4.is_empty() {
        return Err(Skip::NoOp);
    }
    let chosen = match set {
        None => nets_v4,
        Some(members) => {
            let members = v4(members);
            // A selector that selects no pod matches nothing (not everything).
            if members.is_empty() {
                return Err(Skip::NoOp);
            }
            if nets_v4.is_empty() {
                members
            } else {
                let both = intersect(&nets_v4, &members);
                if both.is_empty() {
                    return Err(Skip::NoOp);
                }
                both
            }
        }
    };
    Ok(chosen.iter().map(ToString::to_string).collect())
}

/// The parts of `a` and `b` both cover (each the narrower of an overlapping pair).
fn intersect(a: &[IpNet], b: &[IpNet]) -> Vec<IpNet> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            if x.contains(y) {
                out.push(*y);
            } else if y.contains(x) {
                out.push(*x);
            }
        }
    }
    out
}

/// The node -> endpoint Allow felix puts first on every endpoint (readiness probes).
pub fn host_to_endpoint(host_addresses: &[IpNet]) -> Option<Acl> {
    let v4: Vec<String> = host_addresses
        .iter()
        .filter(|n| matches!(n, IpNet::V4(_)))
        .map(ToString::to_string)
        .collect();
    if v4.is_empty() {
        return None;
    }
    let mut acl = Acl::any(
        AclAction::Allow,
        AclDirection::In,
        HOST_TO_ENDPOINT_PRIORITY,
    );
    acl.id = HOST_TO_ENDPOINT_ID.into();
    acl.remote_addresses = v4;
    Some(acl)
}
