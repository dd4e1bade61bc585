//! How the nodes of a cluster enforce its NetworkPolicies under a profile: a Linux node by
//! Kubernetes' semantics (`policy::Cluster::allows`); a Windows node by what its agent could
//! program: the policies less what the style skipped (the planner's own report of it), nothing
//! where the style cannot run on the build (npm without SetPolicy), and with the build's ACL
//! semantics (ws2025's default-deny turns an npm endpoint isolated one way into one isolated
//! both ways). The policy rows of the matrix are expected from it.

use hns::{Limitation, Profile};
use policy::model::Direction;
use policy::{Connection, Construct, Effect, NodeContext, Problem, Style};

/// How the nodes of a cluster enforce its NetworkPolicies under a profile.
pub struct Enforcement {
    /// Kubernetes' semantics: what a Linux node enforces.
    linux: policy::Cluster,
    /// What a Windows node's agent programs.
    windows: policy::Cluster,
    /// What the style could not express, as its planner reports it.
    problems: Vec<Problem>,
    /// The style cannot run on the build (npm needs SetPolicy): Windows nodes enforce nothing.
    pub no_agent: bool,
    /// npm on a build where any ACL makes the endpoint default-deny: a pod isolated one way
    /// is isolated both ways.
    one_way_is_both: bool,
}

impl Enforcement {
    pub fn new(linux: policy::Cluster, style: Style, profile: Profile) -> Enforcement {
        let no_agent = style == Style::Npm && !profile.features().set_policy;
        let ctx = NodeContext {
            node: String::new(),
            host_addresses: Vec::new(),
        };
        let problems = policy::plan(&linux, &ctx, style).problems;
        let mut windows = linux.clone();
        if no_agent {
            windows.policies.clear();
        } else {
            without_skipped(&mut windows, &problems);
        }
        Enforcement {
            linux,
            windows,
            problems,
            no_agent,
            one_way_is_both: style == Style::Npm && profile.imposes(Limitation::AclDefaultDeny),
        }
    }

    /// Whether `c` is carried, the source on a Windows node or not (`src_windows`), the
    /// destination too; and the reason when it is not, or when Windows carries what
    /// Kubernetes would not.
    pub fn verdict(
        &self,
        c: &Connection,
        src_windows: bool,
        dst_windows: bool,
    ) -> (bool, Option<String>) {
        let k8s = self.linux.allows(c);
        let node = |windows: bool| if windows { &self.windows } else { &self.linux };
        let both_ways =
            self.one_way_is_both && self.isolated_the_other_way(c, src_windows, dst_windows);
        let carried = one_direction(node(src_windows), Direction::Egress).allows(c)
            && one_direction(node(dst_windows), Direction::Ingress).allows(c)
            && !both_ways;
        let why = match (carried, k8s) {
            (true, true) => None,
            (false, false) => Some("NetworkPolicy".to_string()),
            (false, true) if both_ways => Some(Limitation::AclDefaultDeny.as_str().to_string()),
            (_, _) if self.no_agent => Some("NoSetPolicy".to_string()),
            (_, _) => Some(
                self.problem_for(c, src_windows, dst_windows)
                    .map_or("NetworkPolicy".to_string(), |p| construct(&p.construct)),
            ),
        };
        (carried, why)
    }

    /// True when a Windows end of `c` has ACLs for the other direction only (an npm endpoint
    /// on ws2025 then blocks this direction too).
    fn isolated_the_other_way(&self, c: &Connection, src_windows: bool, dst_windows: bool) -> bool {
        let ends = [
            (src_windows, c.src, Direction::Egress, Direction::Ingress),
            (dst_windows, c.dst, Direction::Ingress, Direction::Egress),
        ];
        ends.into_iter().any(|(windows, ip, this, other)| {
            let Some(pod) = self.windows.pod_by_ip(ip).filter(|_| windows) else {
                return false;
            };
            let selecting = |d| {
                self.windows
                    .policies
                    .iter()
                    .any(|p| p.selects(pod) && p.rules(d).is_some())
            };
            selecting(other) && !selecting(this)
        })
    }

    /// The construct the style skipped in a policy that selects a Windows end of `c`.
    fn problem_for(
        &self,
        c: &Connection,
        src_windows: bool,
        dst_windows: bool,
    ) -> Option<&Problem> {
        let ends = [(src_windows, c.src), (dst_windows, c.dst)];
        let pods: Vec<&policy::model::Pod> = ends
            .iter()
            .filter(|(w, _)| *w)
            .filter_map(|(_, ip)| self.linux.pod_by_ip(*ip))
            .collect();
        self.problems.iter().find(|p| {
            self.linux
                .policies
                .iter()
                .any(|pol| pol.key() == p.policy && pods.iter().any(|pod| pol.selects(pod)))
        })
    }
}

/// A construct's name in the matrix.
fn construct(c: &Construct) -> String {
    match c {
        Construct::NamedPort(_) => "NamedPort",
        Construct::NegativeSelector => "NegativeSelector",
        Construct::Except => "IpBlockExcept",
        Construct::Sctp => "Sctp",
        Construct::Ipv6 => "Ipv6Peer",
    }
    .to_string()
}

/// `c` with what the style skipped taken out: a policy npm refused, a peer felix skipped (a
/// rule left without peers is gone: it allowed only what was skipped).
fn without_skipped(c: &mut policy::Cluster, problems: &[Problem]) {
    let refused: Vec<&str> = problems
        .iter()
        .filter(|p| p.effect == Effect::PolicySkipped)
        .map(|p| p.policy.as_str())
        .collect();
    c.policies.retain(|p| !refused.contains(&p.key().as_str()));
    let mut skipped: Vec<&Problem> = problems
        .iter()
        .filter(|p| p.effect == Effect::RuleSkipped)
        .collect();
    // Last places first, so that earlier indices stay right.
    skipped.sort_by_key(|p| std::cmp::Reverse((p.rule, p.peer)));
    for p in skipped {
        let (Some(dir), Some(r)) = (p.direction, p.rule) else {
            continue;
        };
        let Some(policy) = c.policies.iter_mut().find(|x| x.key() == p.policy) else {
            continue;
        };
        let rules = match dir {
            Direction::Ingress => policy.ingress.as_mut(),
            Direction::Egress => policy.egress.as_mut(),
        };
        let Some(rules) = rules.filter(|rules| r < rules.len()) else {
            continue;
        };
        match p.peer {
            Some(k) if k < rules[r].peers.len() && rules[r].peers.len() > 1 => {
                rules[r].peers.remove(k);
            }
            _ => {
                rules.remove(r);
            }
        }
    }
}

/// `c` judged in `dir` only (the other direction's rules left out: not isolated).
fn one_direction(c: &policy::Cluster, dir: Direction) -> policy::Cluster {
    let mut c = c.clone();
    for p in &mut c.policies {
        match dir {
            Direction::Ingress => p.egress = None,
            Direction::Egress => p.ingress = None,
        }
    }
    c
}
