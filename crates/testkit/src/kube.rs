//! Kubernetes objects as the proxy reads them (from a manifest folder, a snapshot, or an API
//! server's list and watch): Services and EndpointSlices in namespace `default`.

use serde_json::{Value, json};

/// Service `name` in `default` with `spec`.
pub fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion":"v1","kind":"Service","metadata":{"name":name,"namespace":"default"},"spec":spec})
}

/// A ClusterIP Service `name` at `cluster_ip` with one TCP port named `http`: `port` to the
/// pods' `target_port`.
pub fn cluster_ip(name: &str, cluster_ip: &str, port: u16, target_port: u16) -> Value {
    service(
        name,
        json!({"clusterIP":cluster_ip,
            "ports":[{"name":"http","port":port,"targetPort":target_port,"protocol":"TCP"}]}),
    )
}

/// EndpointSlice `name` of Service `service` in `default`; `family` is its address type
/// (`IPv4` or `IPv6`).
pub fn endpoint_slice(
    name: &str,
    service: &str,
    family: &str,
    ports: Value,
    endpoints: Vec<Value>,
) -> Value {
    json!({"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice",
        "metadata":{"name":name,"namespace":"default","labels":{"kubernetes.io/service-name":service}},
        "addressType":family,"ports":ports,"endpoints":endpoints})
}

/// The ports of a slice of a [`cluster_ip`] Service: TCP `port`, named `http`.
pub fn http_port(port: u16) -> Value {
    json!([{"name":"http","port":port,"protocol":"TCP"}])
}

/// A ready endpoint: address `ip`, on node `node`.
pub fn ready(ip: &str, node: &str) -> Value {
    json!({"addresses":[ip],"nodeName":node,"conditions":{"ready":true}})
}

/// An endpoint with all three conditions given.
pub fn endpoint(ip: &str, node: &str, ready: bool, serving: bool, terminating: bool) -> Value {
    json!({"addresses":[ip],"nodeName":node,
        "conditions":{"ready":ready,"serving":serving,"terminating":terminating}})
}

/// `objects` as one multi-document YAML file (JSON is YAML), as a manifest folder holds them.
pub fn yaml_stream(objects: &[Value]) -> String {
    objects.iter().map(|o| format!("---\n{o}\n")).collect()
}
