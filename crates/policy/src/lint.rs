//! `winnet policy --lint FILE`: offline, what each Windows style skips or changes in the
//! NetworkPolicies of a manifest file, per policy and rule, and what a Linux node does instead.

use std::fmt::Write;

use kubesrc::Objects;

use crate::cluster::Cluster;
use crate::model::Direction;
use crate::planner::{calico, npm};
use crate::problem::{Problem, Style};

/// The report for the manifests in `text` (`origin` names the file); an error naming the
/// document and field when one cannot be read, or when there is no NetworkPolicy in it.
pub fn lint(text: &str, origin: &str) -> Result<String, String> {
    let mut objects = Objects::default();
    kubesrc::manifests::load_text(text, origin, &mut objects);
    let cluster = Cluster::from_objects(&objects);
    let unusable: Vec<&String> = cluster
        .problems
        .iter()
        .filter(|p| !p.contains("is not read"))
        .collect();
    if !unusable.is_empty() {
        let lines: Vec<&str> = unusable
            .iter()
            .map(|s| s.trim_end_matches("; skipped"))
            .collect();
        return Err(lines.join("\n"));
    }
    if cluster.policies.is_empty() {
        return Err(format!("{origin}: no NetworkPolicy in it; nothing to lint"));
    }
    let mut out = String::new();
    for policy in &cluster.policies {
        let mut problems: Vec<Problem> = npm::refused(policy);
        for dir in [Direction::Ingress, Direction::Egress] {
            if policy.rules(dir).is_some() {
                calico::calico_rules(&cluster, policy, dir, &mut problems);
            }
        }
        let isolates = |d| {
            if policy.rules(d).is_some() {
                "isolated"
            } else {
                "not isolated"
            }
        };
        let _ = writeln!(
            out,
            "{}: ingress {}, egress {}",
            policy.key(),
            isolates(Direction::Ingress),
            isolates(Direction::Egress)
        );
        for style in [Style::Calico, Style::Npm] {
            let mine: Vec<&Problem> = problems.iter().filter(|p| p.style == style).collect();
            if mine.is_empty() {
                let _ = writeln!(out, "  {}: enforced as on a Linux node", style.name());
            }
            for p in mine {
                let _ = writeln!(out, "  {}: {p}", style.name());
            }
        }
    }
    Ok(out)
}
