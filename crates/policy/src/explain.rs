//! Where an endpoint's ACLs come from, read-only over the planner: each ACL of a plan as HNS
//! holds it, with the NetworkPolicy rule that made it, and Kubernetes' own verdict for a
//! packet beside the constructs the style skipped. Felix's rule Ids name the policy and the
//! rule (`policy-<ns>/knp.default.<name>-in0.1.0-0`), so an Id alone says which rule made
//! an ACL; Azure NPM's (`azure-acl-<ns>-<name>`) name only the policy, so the rule is found by
//! planning the same objects again and finding the ACL among that policy's.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use hcn::policy::{AclDirection, AclPolicySetting};

use crate::acl::{Acl, hcn_acls};
use crate::cluster::{Cluster, Connection};
use crate::model::Direction;
use crate::planner::{Plan, felix, npm};
use crate::problem::{Effect, Problem, Style};

/// What made one ACL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A rule of a NetworkPolicy (`namespace/name`; the rule's index in its direction).
    Rule {
        policy: String,
        direction: Direction,
        rule: usize,
    },
    /// The Block closing a direction: after every policy's rules (calico, `policy` none), or
    /// one policy's (npm).
    Closing {
        direction: Direction,
        policy: Option<String>,
    },
    /// Calico's namespace profile Allow-all, on a direction no policy isolates.
    Profile {
        namespace: String,
        direction: Direction,
    },
    /// Calico's node -> endpoint Allow (readiness probes).
    HostToEndpoint,
    /// An NPM Id read without the objects: `<namespace>-<name>` of a policy, which cannot be
    /// split where either holds a `-`.
    NpmPolicy { namespace_and_name: String },
}

impl Source {
    /// The NetworkPolicy (`namespace/name`) it names, when it names one whole.
    pub fn policy(&self) -> Option<&str> {
        match self {
            Source::Rule { policy, .. } => Some(policy),
            Source::Closing { policy, .. } => policy.as_deref(),
            _ => None,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Rule {
                policy,
                direction,
                rule,
            } => write!(
                f,
                "NetworkPolicy {policy} rule spec.{}[{rule}]",
                direction.name()
            ),
            Source::Closing {
                direction,
                policy: Some(p),
            } => write!(
                f,
                "NetworkPolicy {p}: the Block closing its {}",
                direction.name()
            ),
            Source::Closing {
                direction,
                policy: None,
            } => write!(
                f,
                "the Block closing the endpoint's {} after its policies' rules (nothing they allow matched)",
                direction.name()
            ),
            Source::Profile {
                namespace,
                direction,
            } => write!(
                f,
                "namespace {namespace}'s profile: allow all {} (no NetworkPolicy isolates it)",
                direction.name()
            ),
            Source::HostToEndpoint => f.write_str("the node -> pod Allow (readiness probes)"),
            Source::NpmPolicy { namespace_and_name } => write!(
                f,
                "the NetworkPolicy whose namespace and name are \"{namespace_and_name}\""
            ),
        }
    }
}

fn direction_of(d: AclDirection) -> Direction {
    match d {
        AclDirection::In => Direction::Ingress,
        AclDirection::Out => Direction::Egress,
    }
}

/// What an ACL's `Id` alone says made it (`direction` is the ACL's); `None` for an Id
/// neither agent writes.
pub fn source_of_id(id: &str, direction: AclDirection) -> Option<Source> {
    let direction = direction_of(direction);
    if id == felix::HOST_TO_ENDPOINT_ID {
        return Some(Source::HostToEndpoint);
    }
    if let Some(rest) = id.strip_prefix("azure-acl-") {
        return Some(Source::NpmPolicy {
            namespace_and_name: rest.to_string(),
        });
    }
    if let Some(ns) = id
        .strip_prefix("profile-kns.")
        .and_then(|r| r.strip_suffix("-allow-all-0"))
    {
        return Some(Source::Profile {
            namespace: ns.to_string(),
            direction,
        });
    }
    // policy-<ns>/knp.default.<name>-<in|eg><rule>.<peer>.<group>-0
    let (namespace, rest) = id.strip_prefix("policy-")?.split_once("/knp.default.")?;
    let (name, rule_id) = rest.strip_suffix("-0")?.rsplit_once('-')?;
    let dir = match rule_id.get(..2)? {
        "in" => Direction::Ingress,
        "eg" => Direction::Egress,
        _ => return None,
    };
    let rule = rule_id.get(2..)?.split('.').next()?.parse().ok()?;
    Some(Source::Rule {
        policy: format!("{namespace}/{name}"),
        direction: dir,
        rule,
    })
}

/// One planned ACL: as the planner writes it, as HNS holds it, and what made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExplainedAcl {
    pub acl: Acl,
    pub setting: AclPolicySetting,
    pub source: Source,
}

/// One local pod's endpoint in a plan, each ACL explained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExplainedEndpoint {
    /// `namespace/name` of the pod.
    pub pod: String,
    pub acls: Vec<ExplainedAcl>,
}

/// Every endpoint of `plan` (made by [`crate::planner::plan`] from `cluster` under `style`),
/// each ACL with its source; an error when an ACL cannot be written as HNS reads it.
pub fn explain_plan(
    cluster: &Cluster,
    plan: &Plan,
    style: Style,
) -> Result<BTreeMap<IpAddr, ExplainedEndpoint>, String> {
    let mut npm_rules: BTreeMap<String, Vec<RuleAcl>> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for (ip, ep) in &plan.endpoints {
        let mut acls = Vec::with_capacity(ep.acls.len());
        for acl in &ep.acls {
            let setting = hcn_acls(std::slice::from_ref(acl), style)?
                .pop()
                .ok_or_else(|| format!("pod {}: ACL {} reads back as nothing", ep.pod, acl.id))?;
            let source = match style {
                Style::Calico => calico_source(acl),
                Style::Npm => npm_source(cluster, acl, &mut npm_rules),
            };
            acls.push(ExplainedAcl {
                acl: acl.clone(),
                setting,
                source,
            });
        }
        out.insert(
            *ip,
            ExplainedEndpoint {
                pod: ep.pod.clone(),
                acls,
            },
        );
    }
    Ok(out)
}

/// An NPM ACL with the direction and rule index that made it (`None`: the closing Block).
type RuleAcl = (Direction, Option<usize>, Acl);

/// Felix's ACLs name their rule; the one without an Id is the closing Block.
fn calico_source(acl: &Acl) -> Source {
    source_of_id(&acl.id, acl.direction).unwrap_or(Source::Closing {
        direction: direction_of(acl.direction),
        policy: None,
    })
}

/// The policy whose Id the ACL carries, and the rule among that policy's ACLs that is it.
fn npm_source(cluster: &Cluster, acl: &Acl, cache: &mut BTreeMap<String, Vec<RuleAcl>>) -> Source {
    let by_id = || source_of_id(&acl.id, acl.direction);
    let Some(policy) = cluster.policies.iter().find(|p| npm::acl_id(p) == acl.id) else {
        return by_id().unwrap_or(Source::Closing {
            direction: direction_of(acl.direction),
            policy: None,
        });
    };
    let made = cache.entry(policy.key()).or_insert_with(|| {
        let mut scratch = npm::Sets::default();
        npm::policy_acls_by_rule(&mut scratch, cluster, policy)
    });
    match made.iter().find(|(_, _, a)| a == acl) {
        Some((direction, Some(rule), _)) => Source::Rule {
            policy: policy.key(),
            direction: *direction,
            rule: *rule,
        },
        Some((direction, None, _)) => Source::Closing {
            direction: *direction,
            policy: Some(policy.key()),
        },
        None => by_id().unwrap_or(Source::Closing {
            direction: direction_of(acl.direction),
            policy: Some(policy.key()),
        }),
    }
}

/// The style whose agent writes an ACL with this Id: NPM's `azure-acl-` Ids, else felix's.
pub fn style_of_id(id: &str) -> Style {
    if id.starts_with("azure-acl-") {
        Style::Npm
    } else {
        Style::Calico
    }
}

/// The node's addresses as felix's node -> pod Allow among `held` names them (the agent's
/// `--host-address`, read back); empty when no endpoint holds that rule.
pub fn host_addresses_of<'a>(
    held: impl IntoIterator<Item = &'a AclPolicySetting>,
) -> Vec<ipnet::IpNet> {
    held.into_iter()
        .find(|a| a.id == felix::HOST_TO_ENDPOINT_ID)
        .map(|a| {
            let text = a.remote_addresses.as_str();
            text.split(',').filter_map(|s| s.parse().ok()).collect()
        })
        .unwrap_or_default()
}

/// What a Linux node decides for `c` on one side (`Egress`: the source pod's policies,
/// `Ingress`: the destination's), and what `style`'s agent skipped that bears on it: rules it
/// skipped that name `c`, policies it did not apply that would isolate that side.
pub fn linux_verdict<'a>(
    cluster: &Cluster,
    problems: &'a [Problem],
    c: &Connection,
    side: Direction,
) -> (bool, Vec<&'a Problem>) {
    let pod = match side {
        Direction::Egress => cluster.pod_by_ip(c.src),
        Direction::Ingress => cluster.pod_by_ip(c.dst),
    };
    // A skipped rule judges the packet when it names it; a policy not applied, when it
    // selects the pod (it would isolate it).
    let judging = |problem: &Problem| {
        let Some(policy) = cluster.policies.iter().find(|p| p.key() == problem.policy) else {
            return false;
        };
        let selects = pod.is_some_and(|pod| policy.selects(pod));
        let names = match (problem.effect, problem.rule) {
            (Effect::PolicySkipped, _) => policy.rules(side).is_some(),
            (Effect::RuleSkipped, Some(r)) => cluster.rule_names(policy, side, r, c),
            (Effect::RuleSkipped, None) => false,
        };
        selects && problem.direction.is_none_or(|d| d == side) && names
    };
    let skipped = problems.iter().filter(|p| judging(p)).collect();
    (cluster.side_verdict(side, c), skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn felix_ids_name_the_policy_and_the_rule() {
        let s = source_of_id(
            "policy-x/knp.default.allow-web-2-eg3.1.0-0",
            AclDirection::Out,
        );
        assert_eq!(
            s,
            Some(Source::Rule {
                policy: "x/allow-web-2".into(),
                direction: Direction::Egress,
                rule: 3
            })
        );
        assert_eq!(
            source_of_id("profile-kns.team-a-allow-all-0", AclDirection::In),
            Some(Source::Profile {
                namespace: "team-a".into(),
                direction: Direction::Ingress
            })
        );
        assert_eq!(
            source_of_id("allow-host-to-endpoint", AclDirection::In),
            Some(Source::HostToEndpoint)
        );
    }

    #[test]
    fn ids_no_agent_writes_name_nothing() {
        for id in [
            "",
            "deny-pa-into-pb",
            "policy-x",
            "policy-x/knp.default.web-zz0.0.0-0",
            "policy-x/knp.default.web-in0.0.0",
            "policy-x/knp.default.web-inX.0.0-0",
        ] {
            assert_eq!(source_of_id(id, AclDirection::In), None, "{id}");
        }
    }
}
