//! The Kubernetes objects the local cluster writes into its manifests folder, typed with
//! k8s-openapi: Services, their EndpointSlices over the cluster's pods, and the `v1 List`
//! that holds several of them in one file, as `kubectl get -o json` prints objects of more
//! than one kind. kube-proxy and the cluster DNS read them back through `kubesrc`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::{ObjectReference, Service, ServicePort};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::topology::EndpointState;

/// The label that ties an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// One object of a [`List`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    Service(Box<Service>),
    EndpointSlice(Box<EndpointSlice>),
}

impl From<Service> for Object {
    fn from(s: Service) -> Object {
        Object::Service(Box::new(s))
    }
}

impl From<EndpointSlice> for Object {
    fn from(s: EndpointSlice) -> Object {
        Object::EndpointSlice(Box::new(s))
    }
}

/// A `kind: List` of objects of any kind (k8s-openapi's `List<T>` holds one kind only).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct List {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    pub items: Vec<Object>,
}

impl List {
    /// The list of `items`.
    pub fn new(items: Vec<Object>) -> List {
        List {
            api_version: "v1",
            kind: "List",
            items,
        }
    }
}

/// A map of labels or a selector from `(key, value)` pairs.
pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The metadata of object `name` in `namespace`.
pub fn meta(name: &str, namespace: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..ObjectMeta::default()
    }
}

/// A port of a Service: `port` of `protocol` named `name`, sent to `target` when given.
pub fn service_port(name: &str, protocol: &str, port: u16, target: Option<u16>) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        protocol: Some(protocol.into()),
        port: i32::from(port),
        target_port: target.map(|t| IntOrString::Int(i32::from(t))),
        ..ServicePort::default()
    }
}

/// A port of an EndpointSlice: `port` of `protocol`, named as the Service's port it serves.
pub fn endpoint_port(name: &str, protocol: &str, port: u16) -> EndpointPort {
    EndpointPort {
        name: Some(name.into()),
        protocol: Some(protocol.into()),
        port: Some(i32::from(port)),
        ..EndpointPort::default()
    }
}

/// Pod `pod` on node `node` in `namespace` as a ready, serving endpoint, with the DNS
/// `hostname` a StatefulSet's pod gets when given.
pub fn pod_endpoint(
    node: &str,
    pod: &str,
    ip: IpAddr,
    namespace: &str,
    hostname: bool,
) -> Endpoint {
    Endpoint {
        addresses: vec![ip.to_string()],
        hostname: hostname.then(|| pod.to_string()),
        conditions: Some(conditions(EndpointState::Ready)),
        node_name: Some(node.into()),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            name: Some(pod.to_string()),
            namespace: Some(namespace.into()),
            ..ObjectReference::default()
        }),
        ..Endpoint::default()
    }
}

/// An endpoint's conditions when its pod is in `state`.
pub fn conditions(state: EndpointState) -> EndpointConditions {
    let (ready, serving, terminating) = state.conditions();
    EndpointConditions {
        ready: Some(ready),
        serving: Some(serving),
        terminating: Some(terminating),
    }
}

/// The (one) IPv4 EndpointSlice of Service `service` in `namespace`, as the EndpointSlice
/// controller names its first: `<service>-1`.
pub fn endpoint_slice(
    service: &str,
    namespace: &str,
    endpoints: Vec<Endpoint>,
    ports: Vec<EndpointPort>,
) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            labels: Some(labels(&[(SERVICE_NAME_LABEL, service)])),
            ..meta(&format!("{service}-1"), namespace)
        },
        address_type: "IPv4".into(),
        endpoints,
        ports: Some(ports),
    }
}

/// The ClusterIP (both `clusterIP` and `clusterIPs`) of a Service: an address, or `None`
/// for a headless one.
pub fn cluster_ips(ip: Option<Ipv4Addr>) -> (Option<String>, Option<Vec<String>>) {
    let ip = ip.map_or_else(|| "None".to_string(), |ip| ip.to_string());
    (Some(ip.clone()), Some(vec![ip]))
}
