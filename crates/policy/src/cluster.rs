//! What the agent knows of the cluster at one moment ([`Cluster`]), built from the shared
//! source's objects, and Kubernetes' own verdict for a connection ([`Cluster::allows`]): what a
//! Linux node enforces, against which each Windows style's skips are measured.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kubesrc::Objects;

use crate::model::{
    self, Direction, Labels, Namespaces, Peer, Pod, Policy, PortMatch, Protocol, Rule,
};

/// NetworkPolicies (by `namespace/name`), Pods and Namespaces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cluster {
    pub policies: Vec<Policy>,
    pub pods: Vec<Pod>,
    pub namespaces: BTreeMap<String, Labels>,
    /// Objects that could not be used, each with where it is and why; the rest is enforced.
    pub problems: Vec<String>,
    /// Reads of the source failing now; the objects are its last good ones meanwhile.
    pub source_errors: Vec<String>,
    /// Whether the source has been read whole once; nothing is programmed before.
    pub synced: bool,
}

/// One connection's first packet, as a policy judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: Protocol,
    pub port: u16,
}

impl Cluster {
    /// The agent's view of `objects`; objects that cannot be used become problems.
    pub fn from_objects(objects: &Objects) -> Cluster {
        let mut c = Cluster {
            problems: objects.problems.clone(),
            source_errors: objects.errors.clone(),
            synced: objects.synced,
            ..Cluster::default()
        };
        for p in objects.network_policies.values() {
            match Policy::from_k8s(&p.object) {
                Ok(policy) => c.policies.push(policy),
                Err(e) => c.problems.push(format!("{}: {e}; skipped", p.origin)),
            }
        }
        for p in objects.pods.values() {
            match Pod::from_k8s(&p.object) {
                Ok(Some(pod)) => c.pods.push(pod),
                Ok(None) => {}
                Err(e) => c.problems.push(format!("{}: {e}; skipped", p.origin)),
            }
        }
        for n in objects.namespaces.values() {
            let (name, labels) = model::namespace_labels(&n.object);
            c.namespaces.insert(name, labels);
        }
        c.policies.sort_by_key(Policy::key);
        c
    }

    /// A namespace's labels; one not (yet) read has only its name label, as the API server
    /// would give it.
    pub fn namespace_labels(&self, namespace: &str) -> Labels {
        self.namespaces.get(namespace).cloned().unwrap_or_else(|| {
            Labels::from([(
                model::NAMESPACE_NAME_LABEL.to_string(),
                namespace.to_string(),
            )])
        })
    }

    pub fn pod_by_ip(&self, ip: IpAddr) -> Option<&Pod> {
        self.pods.iter().find(|p| p.ips.contains(&ip))
    }

    /// Whether `pod` is one of the pods `peer` of `policy` names.
    pub fn peer_has_pod(&self, policy: &Policy, peer: &Peer, pod: &Pod) -> bool {
        match peer {
            Peer::IpBlock { .. } => false,
            Peer::Pods { namespaces, pods } => {
                let in_namespace = match namespaces {
                    Namespaces::Own => pod.namespace == policy.namespace,
                    Namespaces::Selected(s) => s.matches(&self.namespace_labels(&pod.namespace)),
                };
                in_namespace && pods.as_ref().is_none_or(|s| s.matches(&pod.labels))
            }
        }
    }

    /// The pods `peer` of `policy` names.
    pub fn peer_pods<'a>(
        &'a self,
        policy: &'a Policy,
        peer: &'a Peer,
    ) -> impl Iterator<Item = &'a Pod> + 'a {
        self.pods
            .iter()
            .filter(move |p| self.peer_has_pod(policy, peer, p))
    }

    /// Whether `peer` of `policy` names address `ip` (a pod's, or one in an ipBlock).
    fn peer_has_ip(&self, policy: &Policy, peer: &Peer, ip: IpAddr) -> bool {
        match peer {
            Peer::IpBlock { cidr, except } => {
                cidr.contains(&ip) && !except.iter().any(|e| e.contains(&ip))
            }
            Peer::Pods { .. } => self
                .pod_by_ip(ip)
                .is_some_and(|pod| self.peer_has_pod(policy, peer, pod)),
        }
    }

    /// Kubernetes' verdict: the source's egress policies and the destination's ingress
    /// policies both allow `c` (a pod no policy isolates in that direction allows all).
    pub fn allows(&self, c: &Connection) -> bool {
        self.side_verdict(Direction::Egress, c) && self.side_verdict(Direction::Ingress, c)
    }

    /// Kubernetes' verdict of one side of `c`: the source pod's egress policies, or the
    /// destination pod's ingress policies (an address of no pod allows).
    pub fn side_verdict(&self, dir: Direction, c: &Connection) -> bool {
        let dst_pod = self.pod_by_ip(c.dst);
        let (pod, remote) = match dir {
            Direction::Egress => (self.pod_by_ip(c.src), c.dst),
            Direction::Ingress => (dst_pod, c.src),
        };
        pod.is_none_or(|pod| self.side_allows(dir, pod, remote, dst_pod, c))
    }

    /// Whether rule `rule` of `policy`'s `dir` rules names `c` (its peer and port), as
    /// Kubernetes reads it.
    pub fn rule_names(&self, policy: &Policy, dir: Direction, rule: usize, c: &Connection) -> bool {
        let Some(r) = policy.rules(dir).and_then(|rules| rules.get(rule)) else {
            return false;
        };
        let remote = match dir {
            Direction::Egress => c.dst,
            Direction::Ingress => c.src,
        };
        self.rule_allows(policy, r, remote, self.pod_by_ip(c.dst), c.protocol, c.port)
    }

    /// Whether `pod`'s policies of `dir` allow `c` with `remote` at the other end.
    fn side_allows(
        &self,
        dir: Direction,
        pod: &Pod,
        remote: IpAddr,
        dst_pod: Option<&Pod>,
        c: &Connection,
    ) -> bool {
        let mut isolated = false;
        for policy in self.policies.iter().filter(|p| p.selects(pod)) {
            let Some(rules) = policy.rules(dir) else {
                continue;
            };
            isolated = true;
            let allowed = rules
                .iter()
                .any(|r| self.rule_allows(policy, r, remote, dst_pod, c.protocol, c.port));
            if allowed {
                return true;
            }
        }
        !isolated
    }

    fn rule_allows(
        &self,
        policy: &Policy,
        rule: &Rule,
        remote: IpAddr,
        dst_pod: Option<&Pod>,
        protocol: Protocol,
        port: u16,
    ) -> bool {
        let peer_ok = rule.peers.is_empty()
            || rule
                .peers
                .iter()
                .any(|p| self.peer_has_ip(policy, p, remote));
        let port_ok = rule.ports.is_empty()
            || rule.ports.iter().any(|p| {
                p.protocol == protocol
                    && match &p.port {
                        PortMatch::Any => true,
                        PortMatch::Range { first, last } => (*first..=*last).contains(&port),
                        // Named ports resolve on the destination pod.
                        PortMatch::Named(name) => {
                            dst_pod.and_then(|d| d.named_port(name, protocol)) == Some(port)
                        }
                    }
            });
        peer_ok && port_ok
    }

    /// The pods of `node`.
    pub fn local_pods<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Pod> + 'a {
        self.pods
            .iter()
            .filter(move |p| p.node.as_deref() == Some(node))
    }
}
