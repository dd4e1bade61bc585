//! Rules: a priority, conditions on the packet, and an action; plus the origin that names the
//! object (HNS policy, load balancer, route, Kubernetes Service) a rule was compiled from.

use crate::action::Action;
use crate::direction::Direction;
use crate::headers::Headers;
use ipnet::IpNet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// Who owns a set of rules: the kind and id of the object that made them (e.g. kind
/// "LoadBalancer", id the HNS GUID). A compiler replaces or removes all rules of one owner at
/// once, so that changing one object touches only its own rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    /// Object kind, e.g. "LoadBalancer", "Endpoint/ACL", "Network/RemoteSubnetRoute".
    pub kind: String,
    /// Object identifier, e.g. an HNS GUID.
    pub id: String,
}

impl Owner {
    /// An owner from its kind and id.
    pub fn new(kind: impl Into<String>, id: impl Into<String>) -> Owner {
        Owner {
            kind: kind.into(),
            id: id.into(),
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.id)
    }
}

/// Where a rule came from, for traces: its owner plus an optional higher-level name (the
/// Kubernetes object, e.g. "Service default/web port 80").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The object that owns the rule.
    pub owner: Owner,
    /// The Kubernetes (or other user-facing) object behind the owner, if known.
    pub source: Option<String>,
    /// The rule's own name where its owner gave one (an HNS ACL's `Id`: VFP's friendly name).
    pub name: Option<String>,
}

impl Origin {
    /// An origin with no higher-level name.
    pub fn new(kind: impl Into<String>, id: impl Into<String>) -> Origin {
        Origin {
            owner: Owner::new(kind, id),
            source: None,
            name: None,
        }
    }

    /// Names the rules (VFP's friendly name).
    pub fn with_name(mut self, name: impl Into<String>) -> Origin {
        self.name = Some(name.into());
        self
    }

    /// Adds the user-facing object's name.
    pub fn with_source(mut self, source: impl Into<String>) -> Origin {
        self.source = Some(source.into());
        self
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.owner)?;
        if let Some(s) = &self.source {
            write!(f, " ({s})")?;
        }
        Ok(())
    }
}

/// An inclusive range of L4 ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (inclusive).
    pub last: u16,
}

impl PortRange {
    /// A single port.
    pub fn one(p: u16) -> PortRange {
        PortRange { first: p, last: p }
    }

    /// True if `p` is in the range.
    pub fn contains(&self, p: u16) -> bool {
        self.first <= p && p <= self.last
    }

    /// The port, if the range is a single port.
    pub fn single(&self) -> Option<u16> {
        (self.first == self.last).then_some(self.first)
    }
}

/// What a rule matches. Every `None` field matches anything; a list matches if any element
/// does. Address lists are prefixes (a host is a /32 or /128).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Conditions {
    /// Only packets crossing the port this way.
    pub direction: Option<Direction>,
    /// IP protocol numbers.
    pub protocols: Option<Vec<u8>>,
    /// Source prefixes.
    pub src: Option<Vec<IpNet>>,
    /// Destination prefixes.
    pub dst: Option<Vec<IpNet>>,
    /// Source port ranges (packets without ports never match a port condition).
    pub src_ports: Option<Vec<PortRange>>,
    /// Destination port ranges.
    pub dst_ports: Option<Vec<PortRange>>,
    /// VNI of an encapsulated packet (unencapsulated packets never match).
    pub vni: Option<u32>,
}

impl Conditions {
    /// Matches every packet.
    pub fn any() -> Conditions {
        Conditions::default()
    }

    /// Restricts to one direction.
    pub fn direction(mut self, d: Direction) -> Self {
        self.direction = Some(d);
        self
    }

    /// Restricts to one protocol.
    pub fn protocol(mut self, p: u8) -> Self {
        self.protocols = Some(vec![p]);
        self
    }

    /// Restricts the source to a prefix (added to any already given).
    pub fn src_net(mut self, n: IpNet) -> Self {
        self.src.get_or_insert_with(Vec::new).push(n);
        self
    }

    /// Restricts the destination to a prefix (added to any already given).
    pub fn dst_net(mut self, n: IpNet) -> Self {
        self.dst.get_or_insert_with(Vec::new).push(n);
        self
    }

    /// Restricts the destination to one address.
    pub fn dst_ip(self, ip: IpAddr) -> Self {
        self.dst_net(IpNet::from(ip))
    }

    /// Restricts the source to one address.
    pub fn src_ip(self, ip: IpAddr) -> Self {
        self.src_net(IpNet::from(ip))
    }

    /// Restricts the destination port to one port (added to any already given).
    pub fn dst_port(mut self, p: u16) -> Self {
        self.dst_ports
            .get_or_insert_with(Vec::new)
            .push(PortRange::one(p));
        self
    }

    /// Restricts the source port to one port (added to any already given).
    pub fn src_port(mut self, p: u16) -> Self {
        self.src_ports
            .get_or_insert_with(Vec::new)
            .push(PortRange::one(p));
        self
    }

    /// Restricts to encapsulated packets with this VNI.
    pub fn vni(mut self, vni: u32) -> Self {
        self.vni = Some(vni);
        self
    }

    /// True if a packet with headers `h`, encapsulated with `vni`, crossing the port in
    /// direction `dir`, satisfies every condition.
    #[inline]
    pub fn matches(&self, h: &Headers, vni: Option<u32>, dir: Direction) -> bool {
        self.direction.is_none_or(|d| d == dir)
            && self
                .protocols
                .as_ref()
                .is_none_or(|ps| ps.contains(&h.proto))
            && self.vni.is_none_or(|v| vni == Some(v))
            && nets_match(&self.dst, h.dst_ip)
            && nets_match(&self.src, h.src_ip)
            && ports_match(&self.dst_ports, h, h.dst_port)
            && ports_match(&self.src_ports, h, h.src_port)
    }
}

fn nets_match(nets: &Option<Vec<IpNet>>, ip: IpAddr) -> bool {
    nets.as_ref()
        .is_none_or(|ns| ns.iter().any(|n| n.contains(&ip)))
}

fn ports_match(ranges: &Option<Vec<PortRange>>, h: &Headers, port: u16) -> bool {
    match ranges {
        None => true,
        Some(rs) => h.has_ports() && !h.is_icmp() && rs.iter().any(|r| r.contains(port)),
    }
}

/// Rule priority: lower values are evaluated first (as HNS ACL `Priority` and VFP rules).
pub type Priority = u16;

/// A rule in a layer group: the best-priority rule whose conditions match decides the action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Lower is evaluated first; ties go to the rule added first.
    pub priority: Priority,
    /// What the packet must look like.
    pub conditions: Conditions,
    /// What happens to it.
    pub action: Action,
    /// When true (the default) the decision is cached for the connection and its reverse
    /// direction follows it; when false, no reverse entry is made and replies are evaluated on
    /// their own (VFP's stateless rules).
    pub stateful: bool,
}

impl Rule {
    /// A stateful rule.
    pub fn new(priority: Priority, conditions: Conditions, action: Action) -> Rule {
        Rule {
            priority,
            conditions,
            action,
            stateful: true,
        }
    }

    /// A route: priority from the prefix length so that the longest prefix wins.
    pub fn route(dst: IpNet, action: Action) -> Rule {
        let max = if dst.addr().is_ipv4() { 32 } else { 128 };
        Rule::new(
            Priority::from(max - dst.prefix_len()),
            Conditions::any().dst_net(dst),
            action,
        )
    }

    /// Marks the rule stateless.
    pub fn stateless(mut self) -> Rule {
        self.stateful = false;
        self
    }
}

/// A rule as stored in a layer: with its origin, its position among its owner's rules, the
/// order it was added in (ties), and its hit counter.
#[derive(Debug, Clone)]
pub struct StoredRule {
    /// The rule.
    pub rule: Rule,
    /// The object that made it.
    pub origin: Arc<Origin>,
    /// Index in the list its owner passed to `set_rules`.
    pub index: u32,
    /// Insertion sequence number, breaking priority ties.
    pub(crate) seq: u64,
    /// Connections (new flows) this rule decided.
    pub hits: u64,
}

impl StoredRule {
    /// The sort key inside a group: priority, then insertion order.
    pub(crate) fn rank(&self) -> (Priority, u64) {
        (self.rule.priority, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::proto;

    fn tcp(dst: &str, port: u16) -> Headers {
        Headers {
            dst_ip: dst.parse().unwrap(),
            src_ip: "10.0.0.9".parse().unwrap(),
            proto: proto::TCP,
            src_port: 40000,
            dst_port: port,
            ..Headers::empty()
        }
    }

    #[test]
    fn conditions_combine_with_and_lists_with_or() {
        let c = Conditions::any()
            .direction(Direction::Out)
            .protocol(proto::TCP)
            .dst_net("10.96.0.0/12".parse().unwrap())
            .dst_port(80)
            .dst_port(443);
        assert!(c.matches(&tcp("10.96.0.10", 443), None, Direction::Out));
        assert!(!c.matches(&tcp("10.96.0.10", 443), None, Direction::In));
        assert!(!c.matches(&tcp("10.96.0.10", 8080), None, Direction::Out));
        assert!(!c.matches(&tcp("10.128.0.1", 80), None, Direction::Out));
        let mut udp = tcp("10.96.0.10", 80);
        udp.proto = proto::UDP;
        assert!(!c.matches(&udp, None, Direction::Out));
    }

    #[test]
    fn port_conditions_never_match_icmp_and_vni_needs_encap() {
        let mut h = tcp("10.0.0.1", 7);
        h.proto = proto::ICMP;
        assert!(
            !Conditions::any()
                .dst_port(7)
                .matches(&h, None, Direction::In)
        );
        assert!(!Conditions::any().vni(4096).matches(&h, None, Direction::In));
        assert!(
            Conditions::any()
                .vni(4096)
                .matches(&h, Some(4096), Direction::In)
        );
    }

    #[test]
    fn route_priority_prefers_longer_prefixes() {
        let a = Rule::route("10.0.0.0/8".parse().unwrap(), Action::Allow);
        let b = Rule::route("10.1.0.0/16".parse().unwrap(), Action::Allow);
        assert!(b.priority < a.priority);
    }
}
