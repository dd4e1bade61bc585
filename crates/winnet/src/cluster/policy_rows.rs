//! The NetworkPolicy rows of the flow matrix: flows between the pods of the topology's policy
//! lab (namespaces `x` and `y`, examples/cluster.yaml), each from a real client, each expected
//! as the cluster's nodes enforce the topology's NetworkPolicies ([`Enforcement`]), and the rows
//! of the build's ACL semantics (a lone Block, an ACL update across a live connection). Nothing
//! here is a per-row answer: change a policy or the profile and the expectations follow.

use std::net::IpAddr;

use hns::{Limitation, Profile};
use policy::Connection;
use policy::model::Protocol;
use serde::Serialize;

use super::enforcement::Enforcement;
use super::flows::{Flow, Proto, flow};
use super::topology::{HTTP_PORT, OUTSIDE_IP, Os};
use super::{NodeState, PodState, State};

/// Where a row goes.
#[derive(Clone, Copy)]
enum Target {
    /// A pod, by `namespace/name`, on `port`.
    Pod(&'static str, u16),
    /// The external host, on its HTTP port.
    External,
}

/// One row: what it shows, from which pod (`namespace/name`), to where.
struct Case {
    name: &'static str,
    from: &'static str,
    to: Target,
}

/// The rows, over the policy lab's pods: `x/a` (win-2) and `x/n` (the Linux node) serve TCP 80
/// and 81 behind `x/deny-ingress` (role: server); `x/allow-from-y` and `x/allow-from-b` let
/// namespace `y` and pod `b` reach `x/a` on 80; `x/allow-named-port` lets pod `b` reach the
/// servers on `serve-81-tcp`; `x/egress-to-external` lets `x/e` (win-1) send only to the
/// external host's block. A row whose pods the topology lacks is left out.
const CASES: [Case; 8] = [
    Case {
        name: "NetworkPolicy: default-deny ingress",
        from: "default/client-1",
        to: Target::Pod("x/a", 80),
    },
    Case {
        name: "NetworkPolicy: from a namespace selector",
        from: "y/b",
        to: Target::Pod("x/a", 80),
    },
    Case {
        name: "NetworkPolicy: from a pod selector",
        from: "x/b",
        to: Target::Pod("x/a", 80),
    },
    Case {
        name: "NetworkPolicy: TCP 80 only, to 81",
        from: "y/b",
        to: Target::Pod("x/a", 81),
    },
    Case {
        name: "NetworkPolicy: egress to an ipBlock only",
        from: "x/e",
        to: Target::External,
    },
    Case {
        name: "NetworkPolicy: egress to an ipBlock only, to a pod",
        from: "x/e",
        to: Target::Pod("default/web-2", HTTP_PORT),
    },
    Case {
        name: "NetworkPolicy: named port, Windows pod",
        from: "x/b",
        to: Target::Pod("x/a", 81),
    },
    Case {
        name: "NetworkPolicy: named port, Linux pod",
        from: "x/b",
        to: Target::Pod("x/n", 81),
    },
];

/// The Kubernetes objects the cluster's agents read (the Pods and Namespaces with their labels,
/// and the topology's NetworkPolicies), made as the real cluster writes its manifests.
pub fn objects(state: &State) -> anyhow::Result<kubesrc::Objects> {
    let Some(t) = state.topology.as_ref() else {
        return Ok(kubesrc::Objects::default());
    };
    let mut objects = kubesrc::Objects::default();
    let workloads = super::build::policy::workload_objects(t, &state.nodes)?;
    kubesrc::manifests::load_text(&workloads.to_string(), "the workloads", &mut objects);
    for (i, v) in t.network_policies.iter().enumerate() {
        let p = lab::workloads::network_policy(v)?;
        let origin = format!("networkPolicies[{i}]");
        kubesrc::manifests::load_text(&serde_json::to_string(&p)?, &origin, &mut objects);
    }
    if let Some(p) = objects.problems.first() {
        anyhow::bail!("the policy lab's objects: {p}");
    }
    Ok(objects)
}

/// What is done around a policy row's flow, by the matrix's runner (real or in memory).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// For the flow, the destination endpoint's ACLs on `node` are replaced with one Block ACL
    /// of another port ([`lone_block`], through HNS as a hand-written policy is: no agent
    /// programs a lone Block), then restored.
    LoneBlock { node: String },
    /// The flow is a TCP connection opened first; then [`update_policy`] is added through the
    /// agents (the destination's ACLs change, this connection's verdict does not); then data
    /// goes on the connection. The policy is removed afterwards.
    AclUpdate,
}

/// The port the lone Block names (no pod serves it).
pub const BLOCKED_PORT: u16 = 82;

/// The lone Block ACL of [`Step::LoneBlock`]: TCP [`BLOCKED_PORT`] in, nothing else, as a
/// v2 `ACL` policy's settings.
pub fn lone_block() -> anyhow::Result<hcn::policy::AclPolicySetting> {
    Ok(serde_json::from_value(serde_json::json!({
        "Id": "lone-block",
        "Protocols": "6",
        "Action": "Block",
        "Direction": "In",
        "LocalPorts": BLOCKED_PORT.to_string(),
        "RuleType": "Switch",
        "Priority": 100,
    }))?)
}

/// The NetworkPolicy of [`Step::AclUpdate`] for destination `to`: it selects `to` by its
/// labels and allows TCP [`BLOCKED_PORT`] from anywhere, which changes the ACLs of a pod
/// already isolated and not the verdict of a connection to another port.
pub fn update_policy(to: &PodState) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "acl-update", "namespace": to.namespace},
        "spec": {
            "podSelector": {"matchLabels": to.labels},
            "ingress": [{"ports": [{"protocol": "TCP", "port": BLOCKED_PORT}]}],
        },
    })
}

/// The policy rows of `state` under `profile`.
pub fn rows(state: &State, profile: Profile) -> Vec<Flow> {
    let Some(t) = state.topology.as_ref() else {
        return Vec::new();
    };
    if t.network_policies.is_empty() {
        return Vec::new();
    }
    let Ok(objects) = objects(state) else {
        return Vec::new();
    };
    let how = Enforcement::new(
        policy::Cluster::from_objects(&objects),
        t.network_policy_style,
        profile,
    );
    let mut out = static_rows(state, &how);
    out.extend(acl_rows(state, profile, &how));
    out
}

/// The rows of the ACL semantics of the build: a lone Block ACL on `web-2`'s endpoint (ws2025
/// makes the endpoint default-deny: its other ports fail too), and a live connection from `x/b`
/// to `x/a` across an ACL update (reset on the Windows builds, kept under `unrestricted`).
fn acl_rows(state: &State, profile: Profile, how: &Enforcement) -> Vec<Flow> {
    let mut out = Vec::new();
    let expected = |from: &PodState, from_os: Os, to: &PodState, to_os: Os, port: u16| {
        let conn = Connection {
            src: IpAddr::V4(from.ip),
            dst: IpAddr::V4(to.ip),
            protocol: Protocol::Tcp,
            port,
        };
        let (pass, why) = how.verdict(&conn, from_os == Os::Windows, to_os == Os::Windows);
        let mut f = flow("", &shown(from), &from.netns, conn.dst, port, Proto::Tcp);
        f.expect_pass = pass;
        f.limitation = why;
        f
    };
    if let (Some((from_node, from)), Some((to_node, to))) =
        (pod(state, "default/client-1"), pod(state, "default/web-2"))
        && to_node.os == Os::Windows
    {
        let mut f = expected(from, from_node.os, to, to_node.os, HTTP_PORT);
        f.name = format!("ACL: a lone Block (TCP {BLOCKED_PORT} in), to another port");
        if f.expect_pass {
            f = f.unless(profile, Limitation::AclDefaultDeny);
        }
        f.step = Some(Step::LoneBlock {
            node: to_node.name.clone(),
        });
        out.push(f);
    }
    if let (Some((from_node, from)), Some((to_node, to))) = (pod(state, "x/b"), pod(state, "x/a"))
        && to_node.os == Os::Windows
    {
        let mut f = expected(from, from_node.os, to, to_node.os, 80);
        f.name = "ACL update during a live TCP connection".into();
        if how.no_agent {
            // No agent on the Windows nodes: nothing updates the ACLs.
            f.limitation = Some("NoSetPolicy".into());
        } else if f.expect_pass {
            f = f.unless(profile, Limitation::AclUpdateResetsConnections);
        }
        f.step = Some(Step::AclUpdate);
        out.push(f);
    }
    out
}

/// The rows of the topology's NetworkPolicies, each expected as [`Enforcement`] says.
fn static_rows(state: &State, how: &Enforcement) -> Vec<Flow> {
    CASES
        .iter()
        .filter_map(|c| {
            let (from_node, from) = pod(state, c.from)?;
            let from_os = from_node.os;
            let (to, port, to_os) = match c.to {
                Target::Pod(key, port) => {
                    let (node, p) = pod(state, key)?;
                    (IpAddr::V4(p.ip), port, Some(node.os))
                }
                Target::External => (IpAddr::V4(OUTSIDE_IP), HTTP_PORT, None),
            };
            let conn = Connection {
                src: IpAddr::V4(from.ip),
                dst: to,
                protocol: Protocol::Tcp,
                port,
            };
            let (pass, why) =
                how.verdict(&conn, from_os == Os::Windows, to_os == Some(Os::Windows));
            let mut f = flow(c.name, &shown(from), &from.netns, to, port, Proto::Tcp);
            f.expect_pass = pass;
            f.limitation = why;
            Some(f)
        })
        .collect()
}

/// A pod by `namespace/name`, with its node.
fn pod<'a>(state: &'a State, key: &str) -> Option<(&'a NodeState, &'a PodState)> {
    let (ns, name) = key.split_once('/')?;
    state.nodes.iter().find_map(|n| {
        n.pods
            .iter()
            .find(|p| p.namespace == ns && p.name == name)
            .map(|p| (n, p))
    })
}

/// How the matrix names a pod: its name in `default`, else `namespace/name`.
pub fn shown(p: &PodState) -> String {
    if p.namespace == super::topology::NAMESPACE {
        p.name.clone()
    } else {
        format!("{}/{}", p.namespace, p.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeState;
    use crate::cluster::topology::Topology;

    /// examples/cluster.yaml as built, with addresses of its own (10.244.<node>.<10 + k>).
    fn state(profile: Profile, style: &str) -> State {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/cluster.yaml");
        let text = std::fs::read_to_string(path).expect("examples/cluster.yaml");
        let text = text.replace(
            "networkPolicyStyle: calico",
            &format!("networkPolicyStyle: {style}"),
        );
        let mut t = Topology::parse(&text, "examples/cluster.yaml").expect("topology");
        t.profile = profile;
        let nodes = t
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeState {
                name: n.name.clone(),
                os: n.os,
                netns: format!("wn-{}", n.name),
                ip: std::net::Ipv4Addr::new(192, 168, 77, 11 + i as u8),
                mac: String::new(),
                subnet: None,
                source_vip: None,
                pods: n
                    .pods
                    .iter()
                    .enumerate()
                    .map(|(k, p)| {
                        let ip = std::net::Ipv4Addr::new(10, 244, 1 + i as u8, 10 + k as u8);
                        PodState::new(p, format!("wn-{}-{}", n.name, p.stem()), ip, None)
                    })
                    .collect(),
            })
            .collect();
        State {
            topology: Some(t),
            nodes,
            ..State::default()
        }
    }

    fn expected(profile: Profile, style: &str) -> Vec<(String, String)> {
        rows(&state(profile, style), profile)
            .iter()
            .map(|f| {
                let e = match (f.expect_pass, &f.limitation) {
                    (true, None) => "works".to_string(),
                    (true, Some(l)) => format!("works ({l})"),
                    (false, Some(l)) => format!("fails ({l})"),
                    (false, None) => "fails".to_string(),
                };
                (f.name.clone(), e)
            })
            .collect()
    }

    fn of<'a>(rows: &'a [(String, String)], name: &str) -> &'a str {
        rows.iter()
            .find(|r| r.0.starts_with(name))
            .map(|r| r.1.as_str())
            .unwrap_or_else(|| panic!("no row {name}: {rows:?}"))
    }

    /// Kubernetes' semantics where the agent expresses the policy; the named port blocked on
    /// the Windows pod (felix skips the rule, NPM refuses the policy) and allowed on the Linux
    /// pod; the lone Block fails the endpoint's other ports only under ws2025; the live
    /// connection is reset by the ACL update on every Windows build, not under unrestricted.
    #[test]
    fn the_policy_rows_expect_what_the_style_and_the_build_enforce() {
        for style in ["calico", "npm"] {
            for profile in [Profile::Ws2025, Profile::Unrestricted] {
                let r = expected(profile, style);
                assert_eq!(r.len(), 10, "{r:?}");
                let at = |n| of(&r, n);
                assert_eq!(
                    at("NetworkPolicy: default-deny ingress"),
                    "fails (NetworkPolicy)"
                );
                assert_eq!(at("NetworkPolicy: from a namespace selector"), "works");
                assert_eq!(at("NetworkPolicy: from a pod selector"), "works");
                assert_eq!(at("NetworkPolicy: TCP 80 only"), "fails (NetworkPolicy)");
                assert_eq!(at("NetworkPolicy: egress to an ipBlock only"), "works");
                assert_eq!(
                    at("NetworkPolicy: egress to an ipBlock only, to a pod"),
                    "fails (NetworkPolicy)"
                );
                assert_eq!(
                    at("NetworkPolicy: named port, Windows pod"),
                    "fails (NamedPort)",
                    "{style}"
                );
                assert_eq!(at("NetworkPolicy: named port, Linux pod"), "works");
                let lifted = profile == Profile::Unrestricted;
                assert_eq!(
                    at("ACL: a lone Block"),
                    if lifted {
                        "works"
                    } else {
                        "fails (AclDefaultDeny)"
                    }
                );
                assert_eq!(
                    at("ACL update during"),
                    if lifted {
                        "works"
                    } else {
                        "fails (AclUpdateResetsConnections)"
                    }
                );
            }
        }
        let r = expected(Profile::Ws2022, "calico");
        assert_eq!(
            of(&r, "ACL: a lone Block"),
            "works",
            "ws2022 blocks only what the ACL names"
        );
        assert_eq!(
            of(&r, "ACL update during"),
            "fails (AclUpdateResetsConnections)"
        );
    }

    /// Azure NPM cannot run without SetPolicy (ws2019, ws2022): the Windows nodes enforce
    /// nothing, which the rows say, while the Linux node still enforces.
    #[test]
    fn without_set_policy_npm_enforces_nothing_on_windows_and_the_rows_say_so() {
        for profile in [Profile::Ws2019, Profile::Ws2022] {
            let r = expected(profile, "npm");
            let at = |n| of(&r, n);
            assert_eq!(
                at("NetworkPolicy: default-deny ingress"),
                "works (NoSetPolicy)"
            );
            assert_eq!(at("NetworkPolicy: TCP 80 only"), "works (NoSetPolicy)");
            assert_eq!(
                at("NetworkPolicy: egress to an ipBlock only, to a pod"),
                "works (NoSetPolicy)"
            );
            assert_eq!(at("NetworkPolicy: from a pod selector"), "works");
            assert_eq!(at("NetworkPolicy: named port, Linux pod"), "works");
            assert_eq!(at("ACL update during"), "works (NoSetPolicy)");
        }
    }

    /// The expectations follow the objects: a policy taken away or added changes them.
    #[test]
    fn the_expectations_follow_the_policies() {
        let mut st = state(Profile::Ws2025, "calico");
        let t = st.topology.as_mut().expect("topology");
        t.network_policies
            .retain(|p| p["metadata"]["name"] != "deny-ingress");
        let r: Vec<(String, String)> = rows(&st, Profile::Ws2025)
            .iter()
            .map(|f| (f.name.clone(), f.expect_pass.to_string()))
            .collect();
        // x/a is still isolated by the allow policies: only y and b get in, on 80.
        assert_eq!(of(&r, "NetworkPolicy: default-deny ingress"), "false");
        assert_eq!(of(&r, "NetworkPolicy: named port, Linux pod"), "true");
        let t = st.topology.as_mut().expect("topology");
        t.network_policies.clear();
        assert!(
            rows(&st, Profile::Ws2025).is_empty(),
            "no policy lab, no rows"
        );
    }
}
