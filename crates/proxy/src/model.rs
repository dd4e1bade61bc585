//! The parts of Services and EndpointSlices that the winkernel proxier uses, taken out of the
//! Kubernetes objects with a clear error for anything it cannot use.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service as K8sService;
use k8s_openapi::api::discovery::v1::EndpointSlice as K8sSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// `namespace/name` of a Service.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Service port's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    fn parse(s: Option<&str>) -> Result<Protocol, String> {
        match s.unwrap_or("TCP") {
            "TCP" => Ok(Protocol::Tcp),
            "UDP" => Ok(Protocol::Udp),
            "SCTP" => Ok(Protocol::Sctp),
            other => Err(format!("protocol \"{other}\" is not TCP, UDP or SCTP")),
        }
    }

    /// The HNS protocol number; SCTP has none on Windows.
    pub fn hns_number(self) -> Option<u32> {
        match self {
            Protocol::Tcp => Some(6),
            Protocol::Udp => Some(17),
            Protocol::Sctp => None,
        }
    }
}

/// The target of a Service port: a number, or a container port name resolved per endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

/// One port of a Service.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServicePort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub target_port: TargetPort,
    pub node_port: Option<u16>,
}

/// A Service's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceType {
    ClusterIp,
    NodePort,
    LoadBalancer,
    ExternalName,
}

/// What the proxier needs of a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    pub key: ServiceKey,
    pub service_type: ServiceType,
    /// Empty for a headless Service (`clusterIP: None`).
    pub cluster_ips: Vec<IpAddr>,
    pub ports: Vec<ServicePort>,
    pub external_ips: Vec<IpAddr>,
    pub ingress_ips: Vec<IpAddr>,
    pub session_affinity: bool,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
    pub health_check_node_port: Option<u16>,
    /// Annotation `preserve-destination: "true"`: no DNAT for ingress traffic.
    pub preserve_destination: bool,
}

/// One endpoint of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub node_name: Option<String>,
    /// Conditions, with the API's defaults for absent ones (ready and serving when unknown,
    /// not terminating).
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
}

/// A port of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicePort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// What the proxier needs of an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    pub name: String,
    pub service: ServiceKey,
    pub ipv6: bool,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<Endpoint>,
}

fn ip(s: &str, field: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("{field}: \"{s}\" is not an IP address"))
}

fn port(n: i32, field: &str) -> Result<u16, String> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("{field}: {n} is not a port (1-65535)"))
}

impl Service {
    /// Takes a Service apart; the error names the field.
    pub fn from_k8s(svc: &K8sService) -> Result<Service, String> {
        let name = svc
            .metadata
            .name
            .clone()
            .ok_or("metadata.name is missing")?;
        let namespace = svc
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let spec = svc.spec.as_ref().ok_or("spec is missing")?;
        let service_type = match spec.type_.as_deref().unwrap_or("ClusterIP") {
            "ClusterIP" => ServiceType::ClusterIp,
            "NodePort" => ServiceType::NodePort,
            "LoadBalancer" => ServiceType::LoadBalancer,
            "ExternalName" => ServiceType::ExternalName,
            other => return Err(format!("spec.type: \"{other}\" is not a Service type")),
        };
        let mut cluster_ips = Vec::new();
        let listed = spec.cluster_ips.clone().unwrap_or_default();
        let all = if listed.is_empty() {
            spec.cluster_ip.iter().cloned().collect()
        } else {
            listed
        };
        for (i, s) in all.iter().enumerate() {
            if s != "None" && !s.is_empty() {
                cluster_ips.push(ip(s, &format!("spec.clusterIPs[{i}]"))?);
            }
        }
        let mut ports = Vec::new();
        for (i, p) in spec.ports.iter().flatten().enumerate() {
            let at = format!("spec.ports[{i}]");
            let target_port = match &p.target_port {
                None => TargetPort::Number(port(p.port, &format!("{at}.port"))?),
                Some(IntOrString::Int(n)) => {
                    TargetPort::Number(port(*n, &format!("{at}.targetPort"))?)
                }
                Some(IntOrString::String(s)) => match s.parse::<i32>() {
                    Ok(n) => TargetPort::Number(port(n, &format!("{at}.targetPort"))?),
                    Err(_) => TargetPort::Name(s.clone()),
                },
            };
            ports.push(ServicePort {
                name: p.name.clone().unwrap_or_default(),
                protocol: Protocol::parse(p.protocol.as_deref())
                    .map_err(|e| format!("{at}.protocol: {e}"))?,
                port: port(p.port, &format!("{at}.port"))?,
                target_port,
                node_port: p
                    .node_port
                    .map(|n| port(n, &format!("{at}.nodePort")))
                    .transpose()?,
            });
        }
        let external_ips = spec
            .external_ips
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, s)| ip(s, &format!("spec.externalIPs[{i}]")))
            .collect::<Result<_, _>>()?;
        let ingress_ips = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, ing)| {
                ing.ip
                    .as_ref()
                    .map(|s| ip(s, &format!("status.loadBalancer.ingress[{i}].ip")))
            })
            .collect::<Result<_, _>>()?;
        let annotations: BTreeMap<String, String> =
            svc.metadata.annotations.clone().unwrap_or_default();
        Ok(Service {
            key: ServiceKey { namespace, name },
            service_type,
            cluster_ips,
            ports,
            external_ips,
            ingress_ips,
            session_affinity: spec.session_affinity.as_deref() == Some("ClientIP"),
            external_policy_local: spec.external_traffic_policy.as_deref() == Some("Local"),
            internal_policy_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            health_check_node_port: spec
                .health_check_node_port
                .map(|n| port(n, "spec.healthCheckNodePort"))
                .transpose()?,
            preserve_destination: annotations.get("preserve-destination").map(String::as_str)
                == Some("true"),
        })
    }
}

impl Slice {
    /// Takes an EndpointSlice apart; the error names the field.
    pub fn from_k8s(slice: &K8sSlice) -> Result<Slice, String> {
        let name = slice
            .metadata
            .name
            .clone()
            .ok_or("metadata.name is missing")?;
        let namespace = slice
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let service = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
            .cloned()
            .ok_or("metadata.labels[\"kubernetes.io/service-name\"] is missing: the slice belongs to no Service")?;
        let ipv6 = match slice.address_type.as_str() {
            "IPv4" => false,
            "IPv6" => true,
            other => {
                return Err(format!(
                    "addressType: \"{other}\" is not IPv4 or IPv6 (FQDN slices are not proxied)"
                ));
            }
        };
        let mut ports = Vec::new();
        for (i, p) in slice.ports.iter().flatten().enumerate() {
            let Some(n) = p.port else { continue };
            ports.push(SlicePort {
                name: p.name.clone().unwrap_or_default(),
                protocol: Protocol::parse(p.protocol.as_deref())
                    .map_err(|e| format!("ports[{i}].protocol: {e}"))?,
                port: port(n, &format!("ports[{i}].port"))?,
            });
        }
        let mut endpoints = Vec::new();
        for (i, ep) in slice.endpoints.iter().enumerate() {
            let Some(addr) = ep.addresses.first() else {
                return Err(format!("endpoints[{i}].addresses is empty"));
            };
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            endpoints.push(Endpoint {
                ip: ip(addr, &format!("endpoints[{i}].addresses[0]"))?,
                node_name: ep.node_name.clone(),
                ready,
                // The API reads an absent serving condition as true, as kube-proxy does.
                serving: c.and_then(|c| c.serving).unwrap_or(true),
                terminating: c.and_then(|c| c.terminating).unwrap_or(false),
            });
        }
        Ok(Slice {
            name,
            service: ServiceKey {
                namespace,
                name: service,
            },
            ipv6,
            ports,
            endpoints,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(conditions: serde_json::Value) -> Endpoint {
        let slice: K8sSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.1.10"], "conditions": conditions}],
        }))
        .expect("an EndpointSlice");
        let mut slice = Slice::from_k8s(&slice).expect("a usable slice");
        slice.endpoints.remove(0)
    }

    #[test]
    fn absent_conditions_read_as_the_api_defines_them() {
        let e = endpoint(serde_json::json!({}));
        assert_eq!((e.ready, e.serving, e.terminating), (true, true, false));
        // An absent serving is true even beside ready false (kube-proxy's endpointslicecache).
        let e = endpoint(serde_json::json!({"ready": false}));
        assert_eq!((e.ready, e.serving, e.terminating), (false, true, false));
        let e = endpoint(serde_json::json!({"ready": false, "serving": true, "terminating": true}));
        assert_eq!((e.ready, e.serving, e.terminating), (false, true, true));
    }
}
