//! `winnet trace`'s NetworkPolicy lines: beside each ACL layer the packet crosses, the
//! NetworkPolicy and rule that made the deciding ACL, the constructs the node's agent skipped in
//! the policies that judge the packet, and what a Linux node decides for it. The deciding ACL is
//! read from the endpoint (the rule's owner is `<endpoint ID>/<n>`, its n-th ACL); its source
//! comes from the agent's own plan over the same NetworkPolicies, Pods and Namespaces
//! (`--manifests`, the local cluster's by default), or, with no objects, from its `Id` alone.

use std::net::IpAddr;
use std::path::Path;

use hcn::Endpoint;
use hcn::policy::{AclAction, AclPolicySetting};
use hns_client::TraceAnswer;
use hns_client::acl::endpoint_acls;
use hns_client::trace::answer::{LayerStep, StepDirection};
use policy::explain::{self, Source};
use policy::model::{Direction, Protocol};
use policy::{Cluster, Connection, NodeContext, Style};
use serde::Serialize;

/// The NetworkPolicies, Pods and Namespaces the node's agent reads. (Where they came from is
/// not shown: a trace replayed from a bundle reads the same as the live one.)
pub struct PolicySource {
    pub cluster: Cluster,
}

impl PolicySource {
    /// The objects of a manifests folder (as `winnet policy --manifests` reads it); an error
    /// naming the flag when the folder cannot be read.
    pub fn from_dir(dir: &Path) -> anyhow::Result<PolicySource> {
        if !dir.is_dir() {
            anyhow::bail!(
                "--manifests {}: not a folder; give the folder of NetworkPolicies, Pods and Namespaces the node's policy agent reads",
                dir.display()
            );
        }
        let objects = kubesrc::manifests::load(dir);
        if let Some(e) = objects.errors.first() {
            anyhow::bail!("--manifests {}: {e}", dir.display());
        }
        Ok(PolicySource {
            cluster: Cluster::from_objects(&objects),
        })
    }

    /// The objects of a bundle's manifest files; `None` when it has none.
    pub fn from_files(files: &std::collections::BTreeMap<String, String>) -> Option<PolicySource> {
        if files.is_empty() {
            return None;
        }
        let mut objects = kubesrc::Objects::default();
        for (name, text) in files {
            kubesrc::manifests::load_text(text, name, &mut objects);
        }
        Some(PolicySource {
            cluster: Cluster::from_objects(&objects),
        })
    }
}

/// What the trace says of one ACL layer step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct AclExplanation {
    /// The trace's step it explains (1 is the first, as the trace numbers them).
    pub step: usize,
    /// The port (endpoint) whose ACL layer it is.
    pub port_name: String,
    /// The deciding ACL's `Id`, when an ACL decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acl_id: Option<String>,
    /// What made it, in words ("NetworkPolicy x/web rule spec.ingress[0]", ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
    /// The NetworkPolicy (`namespace/name`), the direction and the rule index, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<usize>,
    /// How the source was found, and what cannot be known.
    pub how: String,
    /// What the agent skipped in the policies judging this packet, in its own words.
    pub skipped: Vec<String>,
    /// Kubernetes' verdict of this side (the source's egress at an `out` step, the
    /// destination's ingress at an `in` step) over the same objects: a Linux node's. `None`
    /// when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub linux_allows: Option<bool>,
    /// Whether this node's ACL layer let the packet through.
    pub windows_allows: bool,
}

impl AclExplanation {
    /// The lines under the step in the detailed trace.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.made_by {
            Some(m) => out.push(format!("{m} ({})", self.how)),
            None => out.push(self.how.clone()),
        }
        for s in &self.skipped {
            out.push(format!("skipped by the agent: {s}"));
        }
        if let Some(linux) = self.linux_allows {
            let word = |allows: bool| if allows { "allows" } else { "blocks" };
            let side = self.direction.as_deref().unwrap_or_default();
            if linux == self.windows_allows {
                out.push(format!("a Linux node {} it too ({side})", word(linux)));
            } else {
                out.push(format!(
                    "a Linux node {} it ({side}); this node {} it",
                    word(linux),
                    word(self.windows_allows)
                ));
            }
        }
        out
    }
}

/// The explanation of every ACL layer step of `answer`; `endpoints` are the node's HNS
/// endpoints, `source` the objects when known.
pub fn explain(
    answer: &TraceAnswer,
    endpoints: &[Endpoint],
    source: Option<&PolicySource>,
) -> Vec<AclExplanation> {
    answer
        .trace
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.layer == "acl")
        .map(|(i, step)| AclExplanation {
            step: i + 1,
            ..explain_step(&answer.trace.node, step, endpoints, source)
        })
        .collect()
}

fn explain_step(
    node: &str,
    step: &LayerStep,
    endpoints: &[Endpoint],
    source: Option<&PolicySource>,
) -> AclExplanation {
    let ep = owner(step, endpoints).or_else(|| endpoints.iter().find(|e| e.name == step.port_name));
    let held = ep.and_then(|ep| deciding_acl(step, ep));
    let mut out = AclExplanation {
        port_name: step.port_name.clone(),
        acl_id: held.map(|a| a.id.clone()).filter(|id| !id.is_empty()),
        windows_allows: windows_allows(step, held),
        ..AclExplanation::default()
    };
    let style = ep.map_or(Style::Calico, agent_style);
    // The agent's plan for this node, once: the held ACL's source and the Linux side read it.
    let plan = source.map(|src| policy::plan(&src.cluster, &context(node, ep), style));
    let planned = match (source, &plan, ep, held) {
        (Some(src), Some(plan), Some(ep), Some(held)) => planned_source(src, plan, ep, held, style),
        _ => None,
    };
    let found = match (planned, held) {
        (Some(s), _) => {
            out.how = format!("the {} agent's plan from the same objects", style.name());
            Some(s)
        }
        (None, Some(held)) => {
            out.how = match source {
                Some(_) => format!(
                    "read from its Id: it is not among what the {} agent plans from the objects (changed by hand, or the agent has not synced; `winnet doctor` compares them)",
                    style.name()
                ),
                None => "read from its Id; no NetworkPolicy objects (--manifests DIR): the rule's objects, what the agent skipped and what a Linux node decides are not known".into(),
            };
            explain::source_of_id(&held.id, held.direction)
        }
        (None, None) => {
            out.how = match source {
                Some(_) => "no ACL decided".into(),
                None => "no ACL decided; no NetworkPolicy objects (--manifests DIR): what the agent skipped and what a Linux node decides are not known".into(),
            };
            None
        }
    };
    if let Some(s) = &found {
        set_source(&mut out, s);
    }
    if let (Some(src), Some(plan)) = (source, &plan) {
        linux_side(&mut out, src, plan, step);
    }
    out
}

/// The endpoint whose ACL made the deciding rule (its owner is `<endpoint ID>/<n>`).
fn owner<'a>(step: &LayerStep, endpoints: &'a [Endpoint]) -> Option<&'a Endpoint> {
    let origin = step.origin.as_ref()?;
    let (id, _) = origin.id.split_once('/')?;
    endpoints
        .iter()
        .find(|e| id.eq_ignore_ascii_case(&e.id.to_string()))
}

/// The ACL whose rule decided: the owner `<endpoint ID>/<n>` names the endpoint's n-th ACL.
fn deciding_acl<'a>(step: &LayerStep, ep: &'a Endpoint) -> Option<&'a AclPolicySetting> {
    let origin = step.origin.as_ref()?;
    if origin.kind != hns_compiler::acl::KIND {
        return None;
    }
    let (id, n) = origin.id.split_once('/')?;
    if !id.eq_ignore_ascii_case(&ep.id.to_string()) {
        return None;
    }
    endpoint_acls(ep).get(n.parse::<usize>().ok()?).copied()
}

/// Whether the ACL layer let the packet pass: the deciding ACL's action, else the default
/// the step names.
fn windows_allows(step: &LayerStep, held: Option<&AclPolicySetting>) -> bool {
    match held {
        Some(a) => a.action != AclAction::Block,
        None => !step.action.contains("default-deny"),
    }
}

/// The style of the endpoint's agent, told by its ACLs' Ids (NPM's all start `azure-acl-`).
fn agent_style(ep: &Endpoint) -> Style {
    endpoint_acls(ep)
        .iter()
        .map(|a| explain::style_of_id(&a.id))
        .find(|s| *s == Style::Npm)
        .unwrap_or(Style::Calico)
}

/// The source the agent's plan gives the held ACL, when the plan holds it.
fn planned_source(
    src: &PolicySource,
    plan: &policy::Plan,
    ep: &Endpoint,
    held: &AclPolicySetting,
    style: Style,
) -> Option<Source> {
    let explained = explain::explain_plan(&src.cluster, plan, style).ok()?;
    let planned = ep.ips().find_map(|ip| explained.get(&ip))?;
    planned
        .acls
        .iter()
        .find(|a| a.setting == *held)
        .map(|a| a.source.clone())
}

/// The agent's node context: felix's node -> pod Allow names the node's addresses, read back
/// from the endpoint (its remote addresses); none without an endpoint.
fn context(node: &str, ep: Option<&Endpoint>) -> NodeContext {
    NodeContext {
        node: node.to_string(),
        host_addresses: ep
            .map_or_else(Vec::new, |ep| explain::host_addresses_of(endpoint_acls(ep))),
    }
}

fn set_source(out: &mut AclExplanation, s: &Source) {
    out.made_by = Some(s.to_string());
    out.policy = s.policy().map(str::to_string);
    match s {
        Source::Rule {
            direction, rule, ..
        } => {
            out.direction = Some(direction.name().into());
            out.rule = Some(*rule);
        }
        Source::Closing { direction, .. } | Source::Profile { direction, .. } => {
            out.direction = Some(direction.name().into());
        }
        Source::HostToEndpoint | Source::NpmPolicy { .. } => {}
    }
}

/// Kubernetes' verdict for the packet as the ACL layer saw it (after any load balancing),
/// and the skipped constructs that judge it.
fn linux_side(out: &mut AclExplanation, src: &PolicySource, plan: &policy::Plan, step: &LayerStep) {
    let h = &step.before;
    let protocol = match h.protocol.as_str() {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        other => {
            out.how.push_str(&format!(
                "; a NetworkPolicy port names TCP, UDP or SCTP, so for {other} only the peers decide on Linux, which winnet does not judge"
            ));
            return;
        }
    };
    let c = Connection {
        src: h.src,
        dst: h.dst,
        protocol,
        port: h.dst_port,
    };
    let side = match step.direction {
        StepDirection::Out => Direction::Egress,
        StepDirection::In => Direction::Ingress,
    };
    out.direction = Some(side.name().into());
    let (allows, skipped) = explain::linux_verdict(&src.cluster, &plan.problems, &c, side);
    out.linux_allows = Some(allows);
    out.skipped = skipped.iter().map(ToString::to_string).collect();
    if src.cluster.pod_by_ip(local_side(step, h)).is_none() {
        out.how
            .push_str("; the endpoint's pod is not among the objects");
    }
}

/// The endpoint's own address in the packet: the destination of what its device receives,
/// the source of what it sends.
fn local_side(step: &LayerStep, h: &hns_client::trace::answer::TracedHeaders) -> IpAddr {
    match step.direction {
        StepDirection::Out => h.src,
        StepDirection::In => h.dst,
    }
}

#[cfg(test)]
mod tests {
    //! One ACL layer step explained against an endpoint holding what the calico agent plans:
    //! with the objects (the rule from the plan, a Linux verdict), without them (the Id
    //! alone, and what is not known), with an ACL the plan does not hold, and for ICMP.

    use super::*;
    use hcn::EndpointPolicy;
    use hns_client::trace::answer::{RuleOrigin, RuleRef, TracedHeaders};

    const OBJECTS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {namespace: x, name: a, labels: {pod: a}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {podIP: 10.244.1.2}
---
apiVersion: v1
kind: Pod
metadata: {namespace: x, name: b, labels: {pod: b}}
spec: {nodeName: n1, containers: [{name: c}]}
status: {podIP: 10.244.1.3}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: allow-b}
spec:
  podSelector: {matchLabels: {pod: a}}
  ingress:
  - from: [{podSelector: {matchLabels: {pod: b}}}]
    ports: [{protocol: TCP, port: 80}]
"#;

    fn source() -> PolicySource {
        let mut objects = kubesrc::Objects::default();
        kubesrc::manifests::load_text(OBJECTS, "t.yaml", &mut objects);
        PolicySource {
            cluster: Cluster::from_objects(&objects),
        }
    }

    /// Pod a's endpoint holding the calico agent's plan for it.
    fn endpoint_a() -> Endpoint {
        endpoint_a_of(Style::Calico)
    }

    /// Pod a's endpoint holding `style`'s agent's plan for it.
    fn endpoint_a_of(style: Style) -> Endpoint {
        let src = source();
        let ctx = NodeContext {
            node: "n1".into(),
            host_addresses: vec!["192.168.0.11/32".parse().unwrap()],
        };
        let plan = policy::plan(&src.cluster, &ctx, style);
        let a: IpAddr = "10.244.1.2".parse().unwrap();
        let acls = policy::acl::hcn_acls(&plan.endpoints[&a].acls, style).unwrap();
        Endpoint {
            id: hcn::Guid::new_v4(),
            name: "a_cbr0".into(),
            ip_configurations: vec![hcn::IpConfig {
                ip_address: Some(a),
                prefix_length: 24,
            }],
            policies: acls.into_iter().map(EndpointPolicy::Acl).collect(),
            ..Default::default()
        }
    }

    fn headers(protocol: &str) -> TracedHeaders {
        TracedHeaders {
            src_mac: String::new(),
            dst_mac: String::new(),
            src: "10.244.1.3".parse().unwrap(),
            dst: "10.244.1.2".parse().unwrap(),
            protocol: protocol.into(),
            src_port: 40000,
            dst_port: 80,
            encap: None,
            text: String::new(),
        }
    }

    /// The step into a's device where its ACL number `n` decided.
    fn step(ep: &Endpoint, n: usize, protocol: &str) -> LayerStep {
        let acl = endpoint_acls(ep)[n];
        LayerStep {
            port: 3,
            port_name: ep.name.clone(),
            direction: StepDirection::In,
            layer: "acl".into(),
            before: headers(protocol),
            after: headers(protocol),
            rewrite: Vec::new(),
            rule: Some(RuleRef {
                index: 0,
                group: "ACL_ENDPOINT_GROUP_IPV4_IN".into(),
                priority: acl.priority,
            }),
            action: "allow".into(),
            origin: Some(RuleOrigin {
                kind: hns_compiler::acl::KIND.into(),
                id: format!("{}/{n}", ep.id),
                source: None,
                object: None,
                kubernetes: None,
                limitation: None,
                name: Some(acl.id.clone()),
            }),
            backend: None,
        }
    }

    fn allow_b(ep: &Endpoint) -> usize {
        endpoint_acls(ep)
            .iter()
            .position(|a| a.id.contains("allow-b-in0"))
            .unwrap()
    }

    #[test]
    fn npm_ids_name_the_policy_and_the_plan_names_the_rule() {
        let ep = endpoint_a_of(Style::Npm);
        let n = endpoint_acls(&ep)
            .iter()
            .position(|a| a.action == AclAction::Allow)
            .unwrap();
        let src = source();
        let e = explain_step(
            "n1",
            &step(&ep, n, "tcp"),
            std::slice::from_ref(&ep),
            Some(&src),
        );
        assert_eq!(e.acl_id.as_deref(), Some("azure-acl-x-allow-b"));
        assert_eq!((e.policy.as_deref(), e.rule), (Some("x/allow-b"), Some(0)));
        assert_eq!(e.how, "the npm agent's plan from the same objects");
        // Without the objects the Id names the policy only, unsplit.
        let e = explain_step("n1", &step(&ep, n, "tcp"), std::slice::from_ref(&ep), None);
        assert_eq!((e.policy.as_deref(), e.rule), (None, None));
        assert_eq!(
            e.made_by.as_deref(),
            Some("the NetworkPolicy whose namespace and name are \"x-allow-b\"")
        );
    }

    #[test]
    fn with_the_objects_the_plan_names_the_rule_and_a_linux_node_agrees() {
        let ep = endpoint_a();
        let src = source();
        let e = explain_step(
            "n1",
            &step(&ep, allow_b(&ep), "tcp"),
            std::slice::from_ref(&ep),
            Some(&src),
        );
        assert_eq!(e.policy.as_deref(), Some("x/allow-b"));
        assert_eq!((e.direction.as_deref(), e.rule), (Some("ingress"), Some(0)));
        assert_eq!(e.how, "the calico agent's plan from the same objects");
        assert_eq!((e.windows_allows, e.linux_allows), (true, Some(true)));
        assert_eq!(
            e.lines(),
            [
                "NetworkPolicy x/allow-b rule spec.ingress[0] (the calico agent's plan from the same objects)",
                "a Linux node allows it too (ingress)"
            ]
        );
    }

    #[test]
    fn without_objects_the_id_names_the_rule_and_the_trace_says_what_it_cannot_know() {
        let ep = endpoint_a();
        let e = explain_step(
            "n1",
            &step(&ep, allow_b(&ep), "tcp"),
            std::slice::from_ref(&ep),
            None,
        );
        assert_eq!(e.policy.as_deref(), Some("x/allow-b"));
        assert_eq!(e.rule, Some(0));
        assert!(
            e.how.contains("no NetworkPolicy objects (--manifests DIR)"),
            "{}",
            e.how
        );
        assert_eq!(e.linux_allows, None);
    }

    #[test]
    fn an_acl_the_plan_does_not_hold_is_said_to_be_one() {
        let mut ep = endpoint_a();
        let n = allow_b(&ep);
        if let Some(EndpointPolicy::Acl(a)) = ep
            .policies
            .iter_mut()
            .filter(|p| matches!(p, EndpointPolicy::Acl(_)))
            .nth(n)
        {
            a.priority = 500;
        }
        let src = source();
        let e = explain_step(
            "n1",
            &step(&ep, n, "tcp"),
            std::slice::from_ref(&ep),
            Some(&src),
        );
        assert!(
            e.how.starts_with("read from its Id: it is not among"),
            "{}",
            e.how
        );
        assert_eq!(e.policy.as_deref(), Some("x/allow-b"));
    }

    #[test]
    fn icmp_gets_no_linux_verdict_and_says_why() {
        let ep = endpoint_a();
        let src = source();
        let e = explain_step(
            "n1",
            &step(&ep, allow_b(&ep), "icmp"),
            std::slice::from_ref(&ep),
            Some(&src),
        );
        assert_eq!(e.linux_allows, None);
        assert!(
            e.how.contains("for icmp only the peers decide"),
            "{}",
            e.how
        );
    }
}
