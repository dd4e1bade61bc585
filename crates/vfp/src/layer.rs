//! A layer of a port: named groups of prioritised rules and a default action per direction.
//! The first group (in order) with a matching rule decides; within a group the best-priority
//! match wins, and when that is a `Pass` rule the group decides nothing and the next one is
//! asked. Rules are owned by the object that made them and replaced per owner.

use crate::action::Action;
use crate::counters::LayerCounters;
use crate::direction::Direction;
use crate::error::ConfigError;
use crate::headers::Headers;
use crate::rule::{Origin, Owner, Rule, StoredRule};
use crate::rule_index::RuleIndex;
use hashbrown::HashMap;
use std::sync::Arc;

/// Name of the ACL layer (endpoint `ACL` policies).
pub const ACL: &str = "acl";
/// Name of the load balancer layer (HostComputeLoadBalancer).
pub const SLB: &str = "slb";
/// Name of the NAT layer (`OutBoundNAT`, `PortMapping`).
pub const NAT: &str = "nat";
/// Name of the route/encap layer (`SDNRoute`, `RemoteSubnetRoute`).
pub const ROUTE: &str = "route";
/// Name of the MAC rewrite layer (L2Bridge, L2Tunnel).
pub const MAC: &str = "mac";
/// The default layer order, top (nearest the device) to bottom (nearest the switch).
pub const DEFAULT_ORDER: [&str; 5] = [ACL, SLB, NAT, ROUTE, MAC];
/// Name of the group every layer starts with.
pub const DEFAULT_GROUP: &str = "default";

/// What a layer does with a packet no rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DefaultAction {
    /// Pass it unchanged.
    Allow,
    /// Drop it.
    Block,
}

/// A named set of rules inside a layer, with its own index per direction.
#[derive(Debug, Clone)]
pub struct Group {
    name: String,
    rules: Vec<Option<StoredRule>>,
    free: Vec<u32>,
    by_owner: HashMap<Owner, Vec<u32>>,
    index: [RuleIndex; 2],
}

impl Group {
    fn new(name: &str) -> Group {
        Group {
            name: name.to_string(),
            rules: Vec::new(),
            free: Vec::new(),
            by_owner: HashMap::new(),
            index: Default::default(),
        }
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rules, in no particular order.
    pub fn rules(&self) -> impl Iterator<Item = &StoredRule> {
        self.rules.iter().flatten()
    }

    fn dirs(r: &StoredRule) -> &'static [Direction] {
        match r.rule.conditions.direction {
            Some(Direction::Out) => &[Direction::Out],
            Some(Direction::In) => &[Direction::In],
            None => &[Direction::Out, Direction::In],
        }
    }

    fn add(&mut self, r: StoredRule) -> u32 {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.rules.push(None);
                (self.rules.len() - 1) as u32
            }
        };
        for d in Group::dirs(&r) {
            self.index[d.idx()].insert(slot, &r, *d);
        }
        self.by_owner
            .entry(r.origin.owner.clone())
            .or_default()
            .push(slot);
        self.rules[slot as usize] = Some(r);
        slot
    }

    fn remove_owner(&mut self, owner: &Owner) -> usize {
        let Some(slots) = self.by_owner.remove(owner) else {
            return 0;
        };
        for &slot in &slots {
            if let Some(r) = self.rules.get_mut(slot as usize).and_then(Option::take) {
                for d in Group::dirs(&r) {
                    self.index[d.idx()].remove(slot, &r, *d);
                }
                self.free.push(slot);
            }
        }
        slots.len()
    }
}

/// The outcome of a layer lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A rule matched: its group and slot.
    Rule { group: usize, slot: u32 },
    /// No rule matched.
    Default(DefaultAction),
}

/// A layer in a port: ordered groups of rules and what to do when none matches.
#[derive(Debug, Clone)]
pub struct Layer {
    name: String,
    groups: Vec<Group>,
    defaults: [DefaultAction; 2],
    seq: u64,
    /// Slow-path decisions of this layer.
    pub counters: LayerCounters,
}

impl Layer {
    /// An empty layer with one group ("default") that allows what no rule matches.
    pub fn new(name: &str) -> Layer {
        Layer {
            name: name.to_string(),
            groups: vec![Group::new(DEFAULT_GROUP)],
            defaults: [DefaultAction::Allow; 2],
            seq: 0,
            counters: LayerCounters::default(),
        }
    }

    /// The layer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets what happens to packets in `dir` that no rule matches.
    pub fn set_default(&mut self, dir: Direction, action: DefaultAction) {
        self.defaults[dir.idx()] = action;
    }

    /// The default for `dir`.
    pub fn default_action(&self, dir: Direction) -> DefaultAction {
        self.defaults[dir.idx()]
    }

    /// Inserts a group at place `at` of the evaluation order (the end when past it).
    pub fn insert_group(&mut self, name: &str, at: usize) -> Result<(), ConfigError> {
        if self.groups.iter().any(|g| g.name == name) {
            return Err(ConfigError::Duplicate(name.to_string()));
        }
        let at = at.min(self.groups.len());
        self.groups.insert(at, Group::new(name));
        Ok(())
    }

    /// Appends a group, evaluated after the existing ones.
    pub fn add_group(&mut self, name: &str) -> Result<(), ConfigError> {
        if self.groups.iter().any(|g| g.name == name) {
            return Err(ConfigError::Duplicate(name.to_string()));
        }
        self.groups.push(Group::new(name));
        Ok(())
    }

    /// The groups in evaluation order.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Replaces every rule the origin's owner has in the first group with `rules`.
    pub fn set_rules(&mut self, origin: Origin, rules: Vec<Rule>) {
        self.set_rules_at(0, origin, rules);
    }

    /// Replaces every rule the origin's owner has in group `group` with `rules`.
    pub fn set_group_rules(
        &mut self,
        group: &str,
        origin: Origin,
        rules: Vec<Rule>,
    ) -> Result<(), ConfigError> {
        let g = self
            .groups
            .iter()
            .position(|g| g.name == group)
            .ok_or_else(|| ConfigError::UnknownGroup(group.to_string()))?;
        self.set_rules_at(g, origin, rules);
        Ok(())
    }

    fn set_rules_at(&mut self, g: usize, origin: Origin, rules: Vec<Rule>) {
        self.groups[g].remove_owner(&origin.owner);
        let origin = Arc::new(origin);
        for (i, rule) in rules.into_iter().enumerate() {
            self.seq += 1;
            self.groups[g].add(StoredRule {
                rule,
                origin: origin.clone(),
                index: i as u32,
                seq: self.seq,
                hits: 0,
            });
        }
    }

    /// Removes every rule of `owner` in every group; returns how many were removed.
    pub fn remove_owner(&mut self, owner: &Owner) -> usize {
        self.groups.iter_mut().map(|g| g.remove_owner(owner)).sum()
    }

    /// Number of rules in the layer.
    pub fn rule_count(&self) -> usize {
        self.groups.iter().map(|g| g.rules().count()).sum()
    }

    /// True when the layer has no rules (and so only its defaults apply).
    pub fn is_empty(&self) -> bool {
        self.groups.iter().all(|g| g.by_owner.is_empty())
    }

    /// Finds the deciding rule for a packet.
    pub(crate) fn lookup(&self, h: &Headers, vni: Option<u32>, dir: Direction) -> Verdict {
        for (gi, g) in self.groups.iter().enumerate() {
            if let Some(slot) = g.index[dir.idx()].lookup(h, vni, dir, &g.rules) {
                let pass = g
                    .rules
                    .get(slot as usize)
                    .and_then(Option::as_ref)
                    .is_some_and(|r| r.rule.action == Action::Pass);
                if pass {
                    continue;
                }
                return Verdict::Rule { group: gi, slot };
            }
        }
        Verdict::Default(self.defaults[dir.idx()])
    }

    /// The rule a verdict names.
    pub(crate) fn rule(&self, group: usize, slot: u32) -> Option<&StoredRule> {
        self.groups.get(group)?.rules.get(slot as usize)?.as_ref()
    }

    pub(crate) fn rule_mut(&mut self, group: usize, slot: u32) -> Option<&mut StoredRule> {
        self.groups
            .get_mut(group)?
            .rules
            .get_mut(slot as usize)?
            .as_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;
    use crate::rule::Conditions;
    use crate::wire::proto;
    use std::net::IpAddr;

    fn pkt(dst: &str, port: u16) -> Headers {
        Headers {
            dst_ip: dst.parse().unwrap(),
            src_ip: "10.0.0.9".parse().unwrap(),
            proto: proto::TCP,
            src_port: 40000,
            dst_port: port,
            ..Headers::empty()
        }
    }

    fn vip_rule(vip: &str, port: u16, prio: u16) -> Rule {
        let c = Conditions::any()
            .protocol(proto::TCP)
            .dst_ip(vip.parse().unwrap())
            .dst_port(port);
        Rule::new(prio, c, Action::Allow)
    }

    fn matched(l: &Layer, h: &Headers, dir: Direction) -> Option<(String, u32)> {
        match l.lookup(h, None, dir) {
            Verdict::Rule { group, slot } => {
                let r = l.rule(group, slot).unwrap();
                Some((r.origin.owner.id.clone(), r.index))
            }
            Verdict::Default(_) => None,
        }
    }

    #[test]
    fn best_priority_wins_across_buckets_and_ties_go_to_the_first_added() {
        let mut l = Layer::new(ACL);
        let any = Rule::new(100, Conditions::any(), Action::Block);
        l.set_rules(Origin::new("ACL", "a"), vec![any.clone()]);
        l.set_rules(Origin::new("LB", "b"), vec![vip_rule("10.96.0.1", 80, 50)]);
        l.set_rules(Origin::new("ACL", "c"), vec![any]);
        let h = pkt("10.96.0.1", 80);
        assert_eq!(matched(&l, &h, Direction::Out), Some(("b".into(), 0)));
        assert_eq!(
            matched(&l, &pkt("10.96.0.1", 81), Direction::Out),
            Some(("a".into(), 0))
        );
        l.remove_owner(&Owner::new("ACL", "a"));
        assert_eq!(
            matched(&l, &pkt("10.96.0.1", 81), Direction::Out),
            Some(("c".into(), 0))
        );
    }

    #[test]
    fn set_rules_replaces_only_the_owners_rules() {
        let mut l = Layer::new(SLB);
        l.set_rules(Origin::new("LB", "x"), vec![vip_rule("10.96.0.1", 80, 1)]);
        l.set_rules(Origin::new("LB", "y"), vec![vip_rule("10.96.0.2", 80, 1)]);
        l.set_rules(Origin::new("LB", "x"), vec![vip_rule("10.96.0.3", 80, 1)]);
        assert_eq!(l.rule_count(), 2);
        assert_eq!(matched(&l, &pkt("10.96.0.1", 80), Direction::Out), None);
        assert!(matched(&l, &pkt("10.96.0.2", 80), Direction::In).is_some());
        assert!(matched(&l, &pkt("10.96.0.3", 80), Direction::In).is_some());
    }

    #[test]
    fn routes_take_the_longest_prefix() {
        let mut l = Layer::new(ROUTE);
        let r = |n: &str| Rule::route(n.parse().unwrap(), Action::Allow);
        l.set_rules(Origin::new("Route", "8"), vec![r("10.0.0.0/8")]);
        l.set_rules(Origin::new("Route", "24"), vec![r("10.244.2.0/24")]);
        l.set_rules(Origin::new("Route", "0"), vec![r("0.0.0.0/0")]);
        l.set_rules(Origin::new("Route", "v6"), vec![r("fd00::/8")]);
        let id = |d: &str| matched(&l, &pkt(d, 1), Direction::Out).map(|m| m.0);
        assert_eq!(id("10.244.2.9").as_deref(), Some("24"));
        assert_eq!(id("10.1.2.3").as_deref(), Some("8"));
        assert_eq!(id("192.0.2.1").as_deref(), Some("0"));
        assert_eq!(id("fd00::1").as_deref(), Some("v6"));
        assert_eq!(id("2001:db8::1"), None);
    }

    #[test]
    fn groups_are_evaluated_in_order_and_direction_filters() {
        let mut l = Layer::new(ACL);
        l.add_group("user").unwrap();
        assert!(l.add_group("user").is_err());
        let inbound = Rule::new(1, Conditions::any().direction(Direction::In), Action::Block);
        l.set_group_rules("user", Origin::new("ACL", "in"), vec![inbound])
            .unwrap();
        let h = pkt("10.0.0.1", 22);
        assert_eq!(matched(&l, &h, Direction::Out), None);
        assert_eq!(matched(&l, &h, Direction::In).unwrap().0, "in");
        let first = Rule::new(9, Conditions::any(), Action::Allow);
        l.set_rules(Origin::new("ACL", "first"), vec![first]);
        assert_eq!(matched(&l, &h, Direction::In).unwrap().0, "first");
        assert!(
            l.set_group_rules("nope", Origin::new("a", "b"), vec![])
                .is_err()
        );
        let _: IpAddr = h.dst_ip;
    }

    #[test]
    fn ten_thousand_vips_each_find_their_own_rule() {
        let mut l = Layer::new(SLB);
        for i in 0..10_000u32 {
            let vip = IpAddr::from((0x0a60_0000u32 + i).to_be_bytes());
            let c = Conditions::any()
                .protocol(proto::TCP)
                .dst_ip(vip)
                .dst_port(80);
            l.set_rules(
                Origin::new("LB", i.to_string()),
                vec![Rule::new(1, c, Action::Allow)],
            );
        }
        for i in (0..10_000u32).step_by(997) {
            let vip = IpAddr::from((0x0a60_0000u32 + i).to_be_bytes());
            let mut h = pkt("0.0.0.0", 80);
            h.dst_ip = vip;
            assert_eq!(matched(&l, &h, Direction::Out).unwrap().0, i.to_string());
        }
    }
}
