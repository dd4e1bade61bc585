//! What a topology runs beside its nodes when it is a NetworkPolicy lab: Kubernetes namespaces
//! with labels, pods with a namespace, labels and the ports they serve (as upstream's netpol
//! e2e model serves TCP and UDP 80 and 81), the NetworkPolicies, and which agent style the
//! Windows nodes run. A pod given as a plain name is a pod of `default` serving as always.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::topology::{HTTP_PORT, NAMESPACE, UDP_PORT};

/// Labels of a namespace or a pod.
pub type Labels = BTreeMap<String, String>;

/// A Kubernetes namespace of the lab (`namespaces: [{name, labels}]`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceSpec {
    pub name: String,
    #[serde(default)]
    pub labels: Labels,
}

/// A transport protocol a pod serves on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    /// As Kubernetes spells it (`TCP`, `UDP`).
    pub fn k8s(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Protocol, String> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            _ => Err(format!("protocol {s:?}: write tcp or udp")),
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

/// A port a pod serves: `tcp/80`, `udp/81`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServePort {
    pub protocol: Protocol,
    pub port: u16,
}

impl ServePort {
    /// The container port's name, as upstream's netpol model names them (`serve-80-tcp`):
    /// what a named port in a NetworkPolicy refers to.
    pub fn name(&self) -> String {
        format!("serve-{}-{}", self.port, self.protocol)
    }
}

impl std::str::FromStr for ServePort {
    type Err = String;
    fn from_str(s: &str) -> Result<ServePort, String> {
        let (proto, port) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: write protocol/port, as tcp/80"))?;
        let protocol = proto.parse()?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{s:?}: the port must be 1-65535"))?;
        if port == 0 {
            return Err(format!("{s:?}: the port must be 1-65535"));
        }
        Ok(ServePort { protocol, port })
    }
}

impl std::fmt::Display for ServePort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.protocol, self.port)
    }
}

impl Serialize for ServePort {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ServePort {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ServePort, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(|e| serde::de::Error::custom(format!("serve: {e}")))
    }
}

/// A pod as the file gives it: a plain name (a pod of `default` serving the cluster's HTTP and
/// UDP echo ports) or `{name, namespace, labels, serve}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub labels: Labels,
    /// The ports it serves; `None` for a plain pod ([`PodSpec::ports`]).
    pub serve: Option<Vec<ServePort>>,
}

/// The long form's fields.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct PodFields {
    name: String,
    #[serde(default = "default_namespace")]
    namespace: String,
    #[serde(default)]
    labels: Labels,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    serve: Option<Vec<ServePort>>,
}

fn default_namespace() -> String {
    NAMESPACE.to_string()
}

impl PodSpec {
    /// Pod `name` of `default`, as a plain name in the file gives it.
    pub fn plain(name: &str) -> PodSpec {
        PodSpec {
            name: name.to_string(),
            namespace: NAMESPACE.to_string(),
            labels: Labels::new(),
            serve: None,
        }
    }

    /// `namespace/name`: a pod's name in the cluster.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The ports it serves: the file's, or the cluster's HTTP and UDP echo ports.
    pub fn ports(&self) -> Vec<ServePort> {
        self.serve.clone().unwrap_or_else(|| {
            vec![
                ServePort {
                    protocol: Protocol::Tcp,
                    port: HTTP_PORT,
                },
                ServePort {
                    protocol: Protocol::Udp,
                    port: UDP_PORT,
                },
            ]
        })
    }

    /// What the pod's network namespace and files are named after on its node: its name in
    /// `default` (as always), `<namespace>_<name>` elsewhere. Names hold only a-z, 0-9 and
    /// '-', so the '_' keeps `x_a` apart from a pod `x-a` of `default`.
    pub fn stem(&self) -> String {
        stem(&self.namespace, &self.name)
    }

    fn is_plain(&self) -> bool {
        self.namespace == NAMESPACE && self.labels.is_empty() && self.serve.is_none()
    }
}

/// [`PodSpec::stem`] of pod `name` in `namespace`.
pub fn stem(namespace: &str, name: &str) -> String {
    if namespace == NAMESPACE {
        name.to_string()
    } else {
        format!("{namespace}_{name}")
    }
}

impl Serialize for PodSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.is_plain() {
            return s.serialize_str(&self.name);
        }
        PodFields {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            labels: self.labels.clone(),
            serve: self.serve.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for PodSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PodSpec, D::Error> {
        d.deserialize_any(PodVisitor)
    }
}

struct PodVisitor;

impl<'de> serde::de::Visitor<'de> for PodVisitor {
    type Value = PodSpec;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a pod's name, or {name, namespace, labels, serve}")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PodSpec, E> {
        Ok(PodSpec::plain(v))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<PodSpec, A::Error> {
        let f = PodFields::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        Ok(PodSpec {
            name: f.name,
            namespace: f.namespace,
            labels: f.labels,
            serve: f.serve,
        })
    }
}

/// Which agent the Windows nodes run (`networkPolicyStyle`).
pub type Style = policy::Style;

/// `networkPolicyStyle` as the file spells it.
pub mod style_name {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &super::Style, ser: S) -> Result<S::Ok, S::Error> {
        ser.serialize_str(s.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<super::Style, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("networkPolicyStyle {s:?}: {e}")))
    }
}

/// Checks the namespaces: names as pod names are, each once (`default` is always there).
pub fn check_namespaces(namespaces: &[NamespaceSpec]) -> anyhow::Result<BTreeSet<String>> {
    let mut names = BTreeSet::from([NAMESPACE.to_string()]);
    for n in namespaces {
        crate::topology::check_name("namespaces[].name", &n.name)?;
        if n.name != NAMESPACE && !names.insert(n.name.clone()) {
            bail!("namespaces: the name {} is given twice", n.name);
        }
        check_labels(&format!("namespaces[{}].labels", n.name), &n.labels)?;
    }
    Ok(names)
}

/// Checks a pod's own fields against the file's namespaces.
pub fn check_pod(node: &str, p: &PodSpec, namespaces: &BTreeSet<String>) -> anyhow::Result<()> {
    let at = format!("nodes[{node}].pods[{}]", p.name);
    crate::topology::check_name("nodes[].pods[].name", &p.name)?;
    if !namespaces.contains(&p.namespace) {
        bail!(
            "{at}.namespace: {:?} is not in namespaces:; add {{name: {}}} there",
            p.namespace,
            p.namespace
        );
    }
    check_labels(&format!("{at}.labels"), &p.labels)?;
    if let Some(serve) = &p.serve {
        if serve.is_empty() {
            bail!("{at}.serve: give at least one port (as tcp/80), or leave serve out");
        }
        let unique: BTreeSet<&ServePort> = serve.iter().collect();
        if unique.len() != serve.len() {
            bail!("{at}.serve: a port is given twice");
        }
    }
    Ok(())
}

/// Kubernetes' label syntax: a key of at most 63 characters (after an optional DNS prefix
/// and '/'), a value of at most 63, both of alphanumerics, '-', '_' and '.', starting and
/// ending alphanumeric (a value may be empty).
fn check_labels(at: &str, labels: &Labels) -> anyhow::Result<()> {
    let part = |s: &str| {
        s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && s.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
    };
    for (k, v) in labels {
        let name = k.rsplit_once('/').map_or(k.as_str(), |(_, n)| n);
        let prefix_ok = k
            .rsplit_once('/')
            .is_none_or(|(p, _)| !p.is_empty() && p.len() <= 253 && part(p));
        if name.is_empty() || !part(name) || !prefix_ok {
            bail!(
                "{at}: the key {k:?} is not a Kubernetes label key (alphanumerics, '-', '_', '.', at most 63)"
            );
        }
        if !part(v) {
            bail!(
                "{at}: the value {v:?} of {k:?} is not a Kubernetes label value (alphanumerics, '-', '_', '.', at most 63)"
            );
        }
    }
    Ok(())
}

/// Checks the NetworkPolicies as the agents will read them: each a NetworkPolicy the agent
/// accepts, in a namespace of the file, each `namespace/name` once.
pub fn check_policies(
    policies: &[serde_json::Value],
    namespaces: &BTreeSet<String>,
) -> anyhow::Result<()> {
    let mut seen = BTreeSet::new();
    for (i, v) in policies.iter().enumerate() {
        let at = format!("networkPolicies[{i}]");
        let p = network_policy(v).with_context(|| at.clone())?;
        let policy =
            policy::model::Policy::from_k8s(&p).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        if !namespaces.contains(&policy.namespace) {
            bail!(
                "{at}.metadata.namespace: {:?} is not in namespaces:; add it there",
                policy.namespace
            );
        }
        if !seen.insert(format!("{}/{}", policy.namespace, policy.name)) {
            bail!("{at}: {}/{} is given twice", policy.namespace, policy.name);
        }
    }
    Ok(())
}

/// `v` as a NetworkPolicy object (`kind` and `apiVersion` may be left out; when given they
/// must be NetworkPolicy's), namespace defaulted to `default` as kubectl does.
pub fn network_policy(
    v: &serde_json::Value,
) -> anyhow::Result<k8s_openapi::api::networking::v1::NetworkPolicy> {
    if let Some(kind) = v.get("kind")
        && kind.as_str() != Some("NetworkPolicy")
    {
        bail!("kind: {kind} is not NetworkPolicy");
    }
    if let Some(api) = v.get("apiVersion")
        && api.as_str() != Some("networking.k8s.io/v1")
    {
        bail!("apiVersion: {api}: write networking.k8s.io/v1");
    }
    let mut p: k8s_openapi::api::networking::v1::NetworkPolicy =
        serde_json::from_value(v.clone()).context("not a NetworkPolicy")?;
    p.metadata.namespace.get_or_insert_with(default_namespace);
    Ok(p)
}

#[cfg(test)]
mod tests {
    use crate::topology::Topology;

    const LAB: &str = "mode: l2bridge\nprofile: ws2025\n\
        namespaces:\n  - {name: x, labels: {ns: x}}\n  - {name: y, labels: {ns: y}}\n\
        nodes:\n  - name: win-1\n    os: windows\n    pods:\n      - web-1\n\
        \x20     - {name: a, namespace: x, labels: {pod: a}, serve: [tcp/80, tcp/81, udp/80, udp/81]}\n\
        \x20     - {name: a, namespace: y, labels: {pod: a}}\n";

    #[test]
    fn a_lab_topology_reads_with_plain_and_namespaced_pods() {
        let t = Topology::parse(LAB, "t").expect("lab");
        let pods = &t.nodes[0].pods;
        assert_eq!(pods[0].key(), "default/web-1");
        assert_eq!(
            pods[0].stem(),
            "web-1",
            "a plain pod keeps its files' names"
        );
        assert_eq!(pods[0].ports().len(), 2, "HTTP and the UDP echo, as always");
        assert_eq!(pods[1].key(), "x/a");
        assert_eq!(pods[1].stem(), "x_a");
        let ports: Vec<String> = pods[1].ports().iter().map(|p| p.to_string()).collect();
        assert_eq!(ports, ["tcp/80", "tcp/81", "udp/80", "udp/81"]);
        assert_eq!(pods[2].key(), "y/a", "pod names are unique per namespace");
        assert_eq!(t.network_policy_style, policy::Style::Calico);
    }

    #[test]
    fn a_topology_survives_its_record() {
        let text = format!(
            "{LAB}networkPolicyStyle: npm\nnetworkPolicies:\n  - {{metadata: {{name: deny, namespace: x}}, spec: {{podSelector: {{}}}}}}\n"
        );
        let t = Topology::parse(&text, "t").expect("lab");
        assert_eq!(t.network_policy_style, policy::Style::Npm);
        let json = serde_json::to_string(&t).expect("record");
        let back: Topology = serde_json::from_str(&json).expect("read back");
        assert_eq!(back.nodes[0].pods, t.nodes[0].pods);
        assert_eq!(back.network_policies, t.network_policies);
        assert_eq!(back.network_policy_style, policy::Style::Npm);
        assert!(
            json.contains(r#""pods":["web-1","#),
            "a plain pod stays a name: {json}"
        );
    }

    #[test]
    fn bad_lab_input_names_the_field() {
        let pod = |p: &str| LAB.replace("{name: a, namespace: y, labels: {pod: a}}", p);
        let bad = [
            (
                pod("{name: b, namespace: z}"),
                "nodes[win-1].pods[b].namespace",
            ),
            (pod("{name: a, namespace: x}"), "x/a is given twice"),
            (
                pod("{name: b, namespace: x, serve: [sctp/80]}"),
                "tcp or udp",
            ),
            (pod("{name: b, namespace: x, serve: [tcp/0]}"), "1-65535"),
            (pod("{name: b, namespace: x, serve: []}"), "pods[b].serve"),
            (
                pod("{name: b, namespace: x, serve: [tcp/80, tcp/80]}"),
                "twice",
            ),
            (
                pod("{name: b, namespace: x, labels: {'a b': c}}"),
                "pods[b].labels",
            ),
            (pod("{name: b, namespace: x, color: red}"), "color"),
            (pod("{name: B, namespace: x}"), "nodes[].pods[].name"),
            (
                LAB.replace("{name: y, labels: {ns: y}}", "{name: x}"),
                "namespaces: the name x is given twice",
            ),
            (
                format!("{LAB}networkPolicyStyle: antrea\n"),
                "networkPolicyStyle",
            ),
            (
                format!("{LAB}networkPolicies: [{{kind: Pod, metadata: {{name: p}}}}]\n"),
                "networkPolicies[0]",
            ),
            (
                format!(
                    "{LAB}networkPolicies: [{{metadata: {{name: p, namespace: q}}, spec: {{podSelector: {{}}}}}}]\n"
                ),
                "networkPolicies[0].metadata.namespace",
            ),
            (
                format!("{LAB}networkPolicies: [{{metadata: {{name: p}}}}]\n"),
                "networkPolicies[0]: spec is missing",
            ),
        ];
        for (text, field) in bad {
            let e = format!("{:#}", Topology::parse(&text, "t").unwrap_err());
            assert!(e.contains(field), "{text}\n-> {e}");
        }
    }

    mod serve_port {
        use super::super::{Protocol, ServePort};
        use proptest::prelude::*;

        proptest! {
            /// Any text is a port or an error naming what to write, never a panic; what is
            /// taken prints back as the same port.
            #[test]
            fn any_text_is_a_port_or_an_error_that_says_how_to_write_one(s in "\\PC{0,12}") {
                match s.parse::<ServePort>() {
                    Ok(p) => {
                        prop_assert!(p.port >= 1);
                        prop_assert_eq!(p.to_string().parse::<ServePort>(), Ok(p));
                    }
                    Err(e) => prop_assert!(e.contains("tcp/80") || e.contains("1-65535") || e.contains("tcp or udp"), "{}", e),
                }
            }

            /// Every port of either protocol reads back, in any letter case.
            #[test]
            fn every_port_reads_back(port in 1u16.., udp in any::<bool>(), upper in any::<bool>()) {
                let p = ServePort { protocol: if udp { Protocol::Udp } else { Protocol::Tcp }, port };
                let text = if upper { p.to_string().to_uppercase() } else { p.to_string() };
                prop_assert_eq!(text.parse::<ServePort>(), Ok(p));
                prop_assert_eq!(p.name(), format!("serve-{}-{}", port, if udp { "udp" } else { "tcp" }));
            }
        }

        #[test]
        fn port_zero_and_past_65535_are_refused() {
            assert!("tcp/0".parse::<ServePort>().is_err());
            assert!("udp/65536".parse::<ServePort>().is_err());
            assert!("tcp/".parse::<ServePort>().is_err());
            assert!("sctp/80".parse::<ServePort>().is_err());
        }
    }
}
