//! Upstream's netpol e2e cases (kubernetes `test/e2e/network/netpol/network_policy.go`) on the
//! local cluster with real packets: namespaces x, y, z with pods a, b, c in each, spread over
//! two Windows nodes and a Linux node, every pod serving TCP and UDP 80 and 81. Each case
//! applies its NetworkPolicies with `winnet cluster apply`, asserts the reachability table of
//! `winnet cluster probe` (rows from, columns to), and deletes them; the cluster stays up
//! across cases, under `--style calico` then `--style npm` (ws2025: NPM needs SetPolicy).
//! As upstream's `Summary(ignoreLoopback)`, a pod's probe of itself is not judged. Root only.

mod local_cluster;

use local_cluster::{one_at_a_time, require_root, text, winnet};

/// Takes the cluster down when dropped (a failing test leaves nothing).
struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        let _ = winnet(&["cluster", "down"]);
    }
}

const NAMESPACES: [&str; 3] = ["x", "y", "z"];
const PODS: [&str; 3] = ["a", "b", "c"];

fn topology(style: &str) -> String {
    let pod = |ns: &str, p: &str| {
        format!(
            "{{name: {p}, namespace: {ns}, labels: {{pod: {p}}}, serve: [tcp/80, tcp/81, udp/80, udp/81]}}"
        )
    };
    // Each node holds one pod of each namespace, a different name in each.
    let node = |name: &str, os: &str, k: usize| {
        let pods: Vec<String> = NAMESPACES
            .iter()
            .enumerate()
            .map(|(i, ns)| pod(ns, PODS[(i + k) % 3]))
            .collect();
        format!(
            "  - {{name: {name}, os: {os}, pods: [{}]}}\n",
            pods.join(", ")
        )
    };
    format!(
        "mode: l2bridge\nprofile: ws2025\nnetworkPolicyStyle: {style}\nnamespaces:\n\
         \x20 - {{name: x, labels: {{ns: x}}}}\n  - {{name: y, labels: {{ns: y}}}}\n  - {{name: z, labels: {{ns: z}}}}\n\
         nodes:\n{}{}{}",
        node("win-1", "windows", 0),
        node("win-2", "windows", 1),
        node("lin-1", "linux", 2)
    )
}

/// Probes `port`/`protocol` and compares every cell but the diagonal with `expect(from, to)`;
/// the differing cells, as `from -> to: probed X, expected .`.
fn mismatches(port: u16, protocol: &str, expect: &dyn Fn(&str, &str) -> bool) -> Vec<String> {
    let out = winnet(&[
        "cluster",
        "probe",
        "--port",
        &port.to_string(),
        "--protocol",
        protocol,
        "--json",
    ]);
    assert!(out.status.success(), "probe: {}", text(&out));
    let cells: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("probe json");
    assert_eq!(cells.len(), 81, "every pod to every pod");
    let mark = |b: bool| if b { "." } else { "X" };
    cells
        .iter()
        .filter(|c| c["from"] != c["to"])
        .filter_map(|c| {
            let (from, to) = (c["from"].as_str()?, c["to"].as_str()?);
            let got = c["connected"].as_bool()?;
            let want = expect(from, to);
            (got != want).then(|| {
                format!(
                    "{from} -> {to} {protocol}/{port}: probed {}, expected {}",
                    mark(got),
                    mark(want)
                )
            })
        })
        .collect()
}

/// Whether a probe from the first pod to the second connects.
type Expect = Box<dyn Fn(&str, &str) -> bool>;

/// One ported case: its policies, then the expectations per (port, protocol).
struct Case {
    /// Upstream's `ginkgo.It` name.
    name: &'static str,
    policies: &'static str,
    /// The pods its policies select for ingress only (not egress): under `--style npm` on
    /// ws2025 a Windows one loses its egress too (see [`npm_on_ws2025`]).
    ingress_only: &'static [&'static str],
    /// The pods its policies select for egress only: under `--style npm` on ws2025 a Windows
    /// one can no longer be reached.
    egress_only: &'static [&'static str],
    expect: Vec<(u16, &'static str, Expect)>,
}

/// The pods on the Windows nodes (win-1: x/a y/b z/c, win-2: x/b y/c z/a; lin-1 holds the rest).
const WINDOWS_PODS: [&str; 6] = ["x/a", "y/b", "z/c", "x/b", "y/c", "z/a"];

/// The Windows deviation of `--style npm` on ws2025: NPM programs ACLs for the directions a
/// policy isolates only (Allow at 222, Block at 3000), and on ws2025 any ACL on an endpoint
/// turns the endpoint to default-deny both ways (Windows-Containers#616; the profile applies
/// it to both directions): a Windows pod selected for ingress only can open no connection.
/// Calico is not affected: felix programs both directions of every endpoint it polices.
fn npm_on_ws2025(style: &str, case: &Case, from: &str, to: &str) -> bool {
    let windows =
        |pod: &str, selected: &[&str]| selected.contains(&pod) && WINDOWS_PODS.contains(&pod);
    style == "npm" && (windows(from, case.ingress_only) || windows(to, case.egress_only))
}

fn ns(pod: &str) -> &str {
    pod.split('/').next().unwrap_or_default()
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            // It("should support a 'default-deny-ingress' policy")
            name: "default-deny-ingress",
            egress_only: &[],
            ingress_only: &["x/a", "x/b", "x/c"],
            policies: "metadata: {name: deny-ingress, namespace: x}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n",
            expect: vec![(80, "tcp", Box::new(|_, to| ns(to) != "x"))],
        },
        Case {
            // It("should support a 'default-deny-all' policy")
            name: "default-deny-all",
            egress_only: &[],
            ingress_only: &[],
            policies: "metadata: {name: deny-all, namespace: x}\nspec: {podSelector: {}, policyTypes: [Ingress, Egress]}\n",
            expect: vec![(
                80,
                "tcp",
                Box::new(|from, to| ns(from) != "x" && ns(to) != "x"),
            )],
        },
        Case {
            // It("should enforce policy to allow traffic from pods within server namespace
            // based on PodSelector")
            name: "allow-from-pod-selector",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-from-b, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{from: [{podSelector: {matchLabels: {pod: b}}}]}]}\n",
            expect: vec![(80, "tcp", Box::new(|from, to| to != "x/a" || from == "x/b"))],
        },
        Case {
            // It("should enforce policy based on Ports")
            name: "ports",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-from-y-81, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}}}], ports: [{port: 81, protocol: TCP}]}]}\n",
            expect: vec![
                (80, "tcp", Box::new(|_, to| to != "x/a")),
                (
                    81,
                    "tcp",
                    Box::new(|from, to| to != "x/a" || ns(from) == "y"),
                ),
            ],
        },
        Case {
            // It("should not allow access by TCP when a policy specifies only UDP")
            name: "udp-only",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-udp-81, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{ports: [{port: 81, protocol: UDP}]}]}\n",
            expect: vec![
                (81, "tcp", Box::new(|_, to| to != "x/a")),
                (81, "udp", Box::new(|_, _| true)),
            ],
        },
        Case {
            // It("should enforce policy to allow ingress traffic from pods in all namespaces")
            name: "allow-from-all-namespaces",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-from-all, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{from: [{namespaceSelector: {}}]}]}\n",
            expect: vec![(80, "tcp", Box::new(|_, _| true))],
        },
        Case {
            // It("should enforce policy to allow traffic based on NamespaceSelector with
            // MatchLabels using default ns label")
            name: "allow-from-default-ns-label",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-from-y, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}}]}]}\n",
            expect: vec![(
                80,
                "tcp",
                Box::new(|from, to| to != "x/a" || ns(from) == "y"),
            )],
        },
        Case {
            // It("should enforce policy based on PodSelector and NamespaceSelector")
            name: "pod-and-namespace-selector",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-from-y-b, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}}, podSelector: {matchLabels: {pod: b}}}]}]}\n",
            expect: vec![(80, "tcp", Box::new(|from, to| to != "x/a" || from == "y/b"))],
        },
        Case {
            // It("should enforce policy based on PodSelector or NamespaceSelector")
            name: "pod-or-namespace-selector",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-from-y-or-b, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{from: [{namespaceSelector: {matchLabels: {ns: y}}}, {podSelector: {matchLabels: {pod: b}}}]}]}\n",
            expect: vec![(
                80,
                "tcp",
                Box::new(|from, to| to != "x/a" || ns(from) == "y" || from == "x/b"),
            )],
        },
        Case {
            // It("should support allow-all policy")
            name: "allow-all",
            egress_only: &[],
            ingress_only: &["x/a", "x/b", "x/c"],
            policies: "metadata: {name: allow-all, namespace: x}\nspec: {podSelector: {}, ingress: [{}]}\n",
            expect: vec![(80, "tcp", Box::new(|_, _| true))],
        },
        Case {
            // It("should deny egress from pods based on PodSelector")
            name: "deny-egress-pod-selector",
            egress_only: &["x/a"],
            ingress_only: &[],
            policies: "metadata: {name: x-a-no-egress, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress]}\n",
            expect: vec![(80, "tcp", Box::new(|from, _| from != "x/a"))],
        },
        Case {
            // It("should deny egress from all pods in a namespace")
            name: "deny-egress-namespace",
            egress_only: &["x/a", "x/b", "x/c"],
            ingress_only: &[],
            policies: "metadata: {name: x-no-egress, namespace: x}\nspec: {podSelector: {}, policyTypes: [Egress]}\n",
            expect: vec![(80, "tcp", Box::new(|from, _| ns(from) != "x"))],
        },
        Case {
            // It("should enforce ingress policy allowing any port traffic to a server on a
            // specific protocol")
            name: "any-port-one-protocol",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-tcp, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, ingress: [{ports: [{protocol: TCP}]}]}\n",
            expect: vec![
                (80, "tcp", Box::new(|_, _| true)),
                (80, "udp", Box::new(|_, to| to != "x/a")),
            ],
        },
        Case {
            // It("should deny ingress from pods on other namespaces")
            name: "deny-other-namespaces",
            egress_only: &[],
            ingress_only: &["x/a", "x/b", "x/c"],
            policies: "metadata: {name: x-from-x, namespace: x}\n\
                       spec: {podSelector: {}, ingress: [{from: [{podSelector: {}}]}]}\n",
            expect: vec![(
                80,
                "tcp",
                Box::new(|from, to| ns(to) != "x" || ns(from) == "x"),
            )],
        },
        Case {
            // It("should enforce policy to allow ingress traffic for a target")
            name: "allow-ingress-for-target",
            egress_only: &[],
            ingress_only: &["x/a", "x/b", "x/c"],
            policies: "metadata: {name: deny-ingress, namespace: x}\nspec: {podSelector: {}, policyTypes: [Ingress]}\n---\n\
                       metadata: {name: x-a-from-all, namespace: x}\nspec: {podSelector: {matchLabels: {pod: a}}, ingress: [{}]}\n",
            expect: vec![(80, "tcp", Box::new(|_, to| ns(to) != "x" || to == "x/a"))],
        },
        Case {
            // It("should enforce multiple ingress policies with ingress allow-all policy
            // taking precedence")
            name: "ingress-allow-all-precedence",
            egress_only: &[],
            ingress_only: &["x/a"],
            policies: "metadata: {name: x-a-81, namespace: x}\nspec: {podSelector: {matchLabels: {pod: a}}, ingress: [{ports: [{port: 81}]}]}\n---\n\
                       metadata: {name: x-a-all, namespace: x}\nspec: {podSelector: {matchLabels: {pod: a}}, ingress: [{}]}\n",
            expect: vec![(80, "tcp", Box::new(|_, _| true))],
        },
        Case {
            // It("should enforce multiple egress policies with egress allow-all policy taking
            // precedence")
            name: "egress-allow-all-precedence",
            egress_only: &["x/a"],
            ingress_only: &[],
            policies: "metadata: {name: x-a-out-81, namespace: x}\nspec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress], egress: [{ports: [{port: 81}]}]}\n---\n\
                       metadata: {name: x-a-out-all, namespace: x}\nspec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress], egress: [{}]}\n",
            expect: vec![(80, "tcp", Box::new(|_, _| true))],
        },
        Case {
            // It("should support denying of egress traffic on the client side (even if the
            // server explicitly allows this traffic)")
            name: "client-side-egress-deny",
            egress_only: &["x/a"],
            ingress_only: &["z/a", "z/b", "z/c"],
            policies: "metadata: {name: x-a-to-y, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {matchLabels: {ns: y}}}]}]}\n---\n\
                       metadata: {name: z-from-x-a, namespace: z}\n\
                       spec: {podSelector: {}, ingress: [{from: [{namespaceSelector: {matchLabels: {ns: x}}, podSelector: {matchLabels: {pod: a}}}]}]}\n",
            expect: vec![(
                80,
                "tcp",
                Box::new(|from, to| {
                    (from != "x/a" || ns(to) == "y") && (ns(to) != "z" || from == "x/a")
                }),
            )],
        },
        Case {
            // It("should enforce egress policy allowing traffic to a server in a different
            // namespace based on PodSelector and NamespaceSelector")
            name: "egress-pod-and-namespace-selector",
            egress_only: &["x/a"],
            ingress_only: &[],
            policies: "metadata: {name: x-a-to-y-b, namespace: x}\n\
                       spec: {podSelector: {matchLabels: {pod: a}}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {matchLabels: {ns: y}}, podSelector: {matchLabels: {pod: b}}}]}]}\n",
            expect: vec![(80, "tcp", Box::new(|from, to| from != "x/a" || to == "y/b"))],
        },
    ]
}

#[test]
fn upstream_netpol_cases_hold_under_calico_and_npm() {
    require_root();
    let _lock = one_at_a_time();
    let dir = tempfile::tempdir().expect("dir");
    let mut failures = Vec::new();
    for style in ["calico", "npm"] {
        let file = dir.path().join(format!("{style}.yaml"));
        std::fs::write(&file, topology(style)).expect("topology");
        let _down = Down;
        let up = winnet(&["cluster", "up", &file.to_string_lossy()]);
        assert!(up.status.success(), "{style}: up: {}", text(&up));
        let none = mismatches(80, "tcp", &|_, _| true);
        assert!(none.is_empty(), "{style}: without policies: {none:#?}");
        for case in cases() {
            eprintln!("{style}: {}", case.name);
            let policy = dir.path().join(format!("{}.yaml", case.name));
            std::fs::write(&policy, case.policies).expect("policy");
            let p = policy.to_string_lossy();
            let out = winnet(&["cluster", "apply", "-f", &p]);
            assert!(
                out.status.success(),
                "{style} {}: apply: {}",
                case.name,
                text(&out)
            );
            for (port, protocol, expect) in &case.expect {
                let windows = |from: &str, to: &str| {
                    expect(from, to) && !npm_on_ws2025(style, &case, from, to)
                };
                for m in mismatches(*port, protocol, &windows) {
                    failures.push(format!("{style} {}: {m}", case.name));
                }
            }
            let out = winnet(&["cluster", "delete", "-f", &p]);
            assert!(
                out.status.success(),
                "{style} {}: delete: {}",
                case.name,
                text(&out)
            );
        }
        // It("should stop enforcing policies after they are deleted")
        for m in mismatches(80, "tcp", &|_, _| true) {
            failures.push(format!("{style} after every delete: {m}"));
        }
        let down = winnet(&["cluster", "down"]);
        assert!(down.status.success(), "{style}: down: {}", text(&down));
    }
    assert!(
        failures.is_empty(),
        "{} cells differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
