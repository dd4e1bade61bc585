//! The agent's view of NetworkPolicies, Pods and Namespaces: read once from the k8s-openapi
//! objects, with every default Kubernetes applies (policyTypes, protocol TCP, the
//! `kubernetes.io/metadata.name` label), and a clear error naming the field when an object
//! cannot be used. Planners and the Linux semantics work on these, never on raw objects.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Namespace as K8sNamespace, Pod as K8sPod};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy as K8sPolicy, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Labels of a Pod or Namespace.
pub type Labels = BTreeMap<String, String>;

/// The label the API server puts on every Namespace: its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A label selector's operator (`matchExpressions[].operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// One requirement of a selector; `matchLabels` entries are `In` with one value.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: BTreeSet<String>,
}

impl Requirement {
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }

    /// Whether it matches by absence (`NotIn`, `DoesNotExist`): what Azure NPM cannot
    /// express on Windows.
    pub fn is_negative(&self) -> bool {
        matches!(self.operator, Operator::NotIn | Operator::DoesNotExist)
    }
}

/// A label selector: every requirement must hold; none selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Selector {
    pub requirements: Vec<Requirement>,
}

impl Selector {
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn has_negative(&self) -> bool {
        self.requirements.iter().any(Requirement::is_negative)
    }

    /// Reads a selector; `field` names it in errors (`spec.podSelector`).
    pub fn from_k8s(s: &LabelSelector, field: &str) -> Result<Selector, String> {
        let mut requirements = Vec::new();
        for (k, v) in s.match_labels.iter().flatten() {
            requirements.push(Requirement {
                key: k.clone(),
                operator: Operator::In,
                values: BTreeSet::from([v.clone()]),
            });
        }
        for (i, e) in s.match_expressions.iter().flatten().enumerate() {
            let at = format!("{field}.matchExpressions[{i}]");
            let operator = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(format!(
                        "{at}.operator: \"{other}\" is not an operator; use In, NotIn, Exists or DoesNotExist"
                    ));
                }
            };
            let values: BTreeSet<String> = e.values.iter().flatten().cloned().collect();
            let needs_values = matches!(operator, Operator::In | Operator::NotIn);
            if needs_values && values.is_empty() {
                return Err(format!(
                    "{at}.values: {} needs at least one value",
                    e.operator
                ));
            }
            if !needs_values && !values.is_empty() {
                return Err(format!(
                    "{at}.values: {} takes no values; remove them",
                    e.operator
                ));
            }
            requirements.push(Requirement {
                key: e.key.clone(),
                operator,
                values,
            });
        }
        Ok(Selector { requirements })
    }
}

/// Which namespaces a pod peer's pods are taken from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Namespaces {
    /// The policy's own namespace (a peer with only `podSelector`).
    Own,
    /// The namespaces `namespaceSelector` selects.
    Selected(Selector),
}

/// A `from` / `to` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// Pods: those `pods` selects (all when `None`) in `namespaces`.
    Pods {
        namespaces: Namespaces,
        pods: Option<Selector>,
    },
    /// Addresses in `cidr` but not in any of `except`.
    IpBlock { cidr: IpNet, except: Vec<IpNet> },
}

/// An L4 protocol NetworkPolicy can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    fn parse(s: &str, field: &str) -> Result<Protocol, String> {
        match s {
            "TCP" => Ok(Protocol::Tcp),
            "UDP" => Ok(Protocol::Udp),
            "SCTP" => Ok(Protocol::Sctp),
            other => Err(format!(
                "{field}: \"{other}\" is not a protocol; use TCP, UDP or SCTP"
            )),
        }
    }
}

/// Which destination ports a `ports` entry allows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PortMatch {
    /// Every port of the protocol.
    Any,
    /// `port` (to `endPort` when given).
    Range { first: u16, last: u16 },
    /// A container port name of the destination pod.
    Named(String),
}

/// A `ports` entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Port {
    pub protocol: Protocol,
    pub port: PortMatch,
}

/// One ingress or egress rule: traffic from/to any of `peers` (anyone when empty) on any of
/// `ports` (every port and protocol when empty).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Rule {
    pub peers: Vec<Peer>,
    pub ports: Vec<Port>,
}

/// A direction of traffic as a policy sees it from the pods it selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        }
    }
}

/// A NetworkPolicy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    /// `spec.podSelector`: the pods of `namespace` it isolates.
    pub selector: Selector,
    /// The ingress rules when the policy isolates ingress (`policyTypes` holds Ingress).
    pub ingress: Option<Vec<Rule>>,
    /// The egress rules when the policy isolates egress.
    pub egress: Option<Vec<Rule>>,
}

impl Policy {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The rules of `dir` when the policy isolates that direction.
    pub fn rules(&self, dir: Direction) -> Option<&[Rule]> {
        match dir {
            Direction::Ingress => self.ingress.as_deref(),
            Direction::Egress => self.egress.as_deref(),
        }
    }

    /// Whether it selects `pod` (same namespace, selector matches).
    pub fn selects(&self, pod: &Pod) -> bool {
        pod.namespace == self.namespace && self.selector.matches(&pod.labels)
    }

    /// Reads a NetworkPolicy, applying the API server's defaults.
    pub fn from_k8s(p: &K8sPolicy) -> Result<Policy, String> {
        let namespace = p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = p.metadata.name.clone().ok_or("metadata.name is missing")?;
        let spec = p
            .spec
            .as_ref()
            .ok_or("spec is missing; a NetworkPolicy needs spec.podSelector")?;
        // An absent podSelector is the empty one: every pod of the namespace.
        let selector = match &spec.pod_selector {
            Some(s) => Selector::from_k8s(s, "spec.podSelector")?,
            None => Selector::default(),
        };
        let ingress_rules = spec.ingress.as_deref().unwrap_or_default();
        let egress_rules = spec.egress.as_deref().unwrap_or_default();
        // Kubernetes' default: Ingress always, Egress when there are egress rules.
        let (mut isolates_ingress, mut isolates_egress) = (true, !egress_rules.is_empty());
        if let Some(types) = &spec.policy_types {
            (isolates_ingress, isolates_egress) = (false, false);
            for (i, t) in types.iter().enumerate() {
                match t.as_str() {
                    "Ingress" => isolates_ingress = true,
                    "Egress" => isolates_egress = true,
                    other => {
                        return Err(format!(
                            "spec.policyTypes[{i}]: \"{other}\" is not a policy type; use Ingress or Egress"
                        ));
                    }
                }
            }
        }
        let ingress = ingress_rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let at = format!("spec.ingress[{i}]");
                rule(r.from.as_deref(), r.ports.as_deref(), &at, "from")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let egress = egress_rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let at = format!("spec.egress[{i}]");
                rule(r.to.as_deref(), r.ports.as_deref(), &at, "to")
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy {
            namespace,
            name,
            selector,
            ingress: isolates_ingress.then_some(ingress),
            egress: isolates_egress.then_some(egress),
        })
    }
}

fn rule(
    peers: Option<&[NetworkPolicyPeer]>,
    ports: Option<&[NetworkPolicyPort]>,
    at: &str,
    peers_field: &str,
) -> Result<Rule, String> {
    let peers = peers
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, p)| peer(p, &format!("{at}.{peers_field}[{i}]")))
        .collect::<Result<_, _>>()?;
    let ports = ports
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, p)| port(p, &format!("{at}.ports[{i}]")))
        .collect::<Result<_, _>>()?;
    Ok(Rule { peers, ports })
}

fn peer(p: &NetworkPolicyPeer, at: &str) -> Result<Peer, String> {
    if let Some(block) = &p.ip_block {
        if p.pod_selector.is_some() || p.namespace_selector.is_some() {
            return Err(format!(
                "{at}: ipBlock cannot be combined with podSelector or namespaceSelector; make them separate peers"
            ));
        }
        let cidr: IpNet = block.cidr.parse().map_err(|_| {
            format!(
                "{at}.ipBlock.cidr: \"{}\" is not a CIDR; write e.g. 10.0.0.0/16",
                block.cidr
            )
        })?;
        let mut except = Vec::new();
        for (i, e) in block.except.iter().flatten().enumerate() {
            let net: IpNet = e.parse().map_err(|_| {
                format!("{at}.ipBlock.except[{i}]: \"{e}\" is not a CIDR; write e.g. 10.0.1.0/24")
            })?;
            if !cidr.contains(&net) || net.prefix_len() <= cidr.prefix_len() {
                return Err(format!(
                    "{at}.ipBlock.except[{i}]: {e} must be a strict subset of cidr {cidr}"
                ));
            }
            except.push(net);
        }
        return Ok(Peer::IpBlock {
            cidr: cidr.trunc(),
            except,
        });
    }
    let pods = p
        .pod_selector
        .as_ref()
        .map(|s| Selector::from_k8s(s, &format!("{at}.podSelector")))
        .transpose()?;
    let namespaces = match &p.namespace_selector {
        Some(s) => Namespaces::Selected(Selector::from_k8s(s, &format!("{at}.namespaceSelector"))?),
        None if pods.is_some() => Namespaces::Own,
        None => {
            return Err(format!(
                "{at}: a peer needs podSelector, namespaceSelector or ipBlock"
            ));
        }
    };
    Ok(Peer::Pods { namespaces, pods })
}

fn port(p: &NetworkPolicyPort, at: &str) -> Result<Port, String> {
    let protocol = Protocol::parse(
        p.protocol.as_deref().unwrap_or("TCP"),
        &format!("{at}.protocol"),
    )?;
    let port = match (&p.port, p.end_port) {
        (None, None) => PortMatch::Any,
        (None, Some(_)) => {
            return Err(format!("{at}.endPort: endPort needs port"));
        }
        (Some(IntOrString::Int(n)), end) => {
            let first = port_number(*n, &format!("{at}.port"))?;
            let last = match end {
                None => first,
                Some(e) => port_number(e, &format!("{at}.endPort"))?,
            };
            if last < first {
                return Err(format!(
                    "{at}.endPort: {last} is below port {first}; endPort must be at least port"
                ));
            }
            PortMatch::Range { first, last }
        }
        (Some(IntOrString::String(name)), end) => {
            if end.is_some() {
                return Err(format!(
                    "{at}.endPort: endPort cannot follow a named port (\"{name}\"); give a number"
                ));
            }
            match name.parse::<i32>() {
                // A number written as text is the number, as the API server reads it.
                Ok(n) => {
                    let n = port_number(n, &format!("{at}.port"))?;
                    PortMatch::Range { first: n, last: n }
                }
                Err(_) if name.is_empty() => {
                    return Err(format!("{at}.port: empty; give a number or a port name"));
                }
                Err(_) => PortMatch::Named(name.clone()),
            }
        }
    };
    Ok(Port { protocol, port })
}

fn port_number(n: i32, field: &str) -> Result<u16, String> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{field}: {n} is not a port; use 1-65535"))
}

/// A container port a named port can resolve to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerPort {
    pub name: String,
    pub port: u16,
    pub protocol: Protocol,
}

/// A Pod as policies see it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub ips: Vec<IpAddr>,
    pub node: Option<String>,
    pub ports: Vec<ContainerPort>,
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The port `name` resolves to for `protocol` on this pod, as Kubernetes resolves named
    /// ports (on the destination pod).
    pub fn named_port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.ports
            .iter()
            .find(|p| p.name == name && p.protocol == protocol)
            .map(|p| p.port)
    }

    /// Reads a Pod. `None` for pods policies do not apply to: host-network pods (their
    /// addresses are the node's), finished pods, and pods without an address yet.
    pub fn from_k8s(p: &K8sPod) -> Result<Option<Pod>, String> {
        let spec = p.spec.as_ref();
        if spec.and_then(|s| s.host_network).unwrap_or(false) {
            return Ok(None);
        }
        let status = p.status.as_ref();
        if matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            return Ok(None);
        }
        let mut ips = Vec::new();
        let listed = status.and_then(|s| s.pod_ips.as_ref());
        let single = status.and_then(|s| s.pod_ip.as_ref());
        for (i, text) in listed
            .into_iter()
            .flatten()
            .map(|a| &a.ip)
            .chain(single)
            .enumerate()
        {
            let ip: IpAddr = text
                .parse()
                .map_err(|_| format!("status.podIPs[{i}]: \"{text}\" is not an IP address"))?;
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
        if ips.is_empty() {
            return Ok(None);
        }
        let mut ports = Vec::new();
        for (c, container) in spec
            .map(|s| s.containers.as_slice())
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            for (i, cp) in container.ports.iter().flatten().enumerate() {
                let at = format!("spec.containers[{c}].ports[{i}]");
                let Some(name) = cp.name.clone() else {
                    continue;
                };
                ports.push(ContainerPort {
                    name,
                    port: port_number(cp.container_port, &format!("{at}.containerPort"))?,
                    protocol: Protocol::parse(
                        cp.protocol.as_deref().unwrap_or("TCP"),
                        &format!("{at}.protocol"),
                    )?,
                });
            }
        }
        Ok(Some(Pod {
            namespace: p
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: p.metadata.name.clone().unwrap_or_default(),
            labels: p.metadata.labels.clone().unwrap_or_default(),
            ips,
            node: spec.and_then(|s| s.node_name.clone()),
            ports,
        }))
    }
}

/// A Namespace's labels, with the name label the API server always sets.
pub fn namespace_labels(n: &K8sNamespace) -> (String, Labels) {
    let name = n.metadata.name.clone().unwrap_or_default();
    let mut labels = n.metadata.labels.clone().unwrap_or_default();
    labels
        .entry(NAMESPACE_NAME_LABEL.into())
        .or_insert_with(|| name.clone());
    (name, labels)
}
