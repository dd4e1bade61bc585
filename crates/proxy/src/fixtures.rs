//! Objects for unit tests: a ClusterIP Service, its one EndpointSlice, a snapshot of them.

use crate::model::{
    Endpoint, Protocol, Service, ServiceKey, ServicePort, ServiceType, Slice, SlicePort, TargetPort,
};
use crate::source::Snapshot;

/// `default/NAME`.
pub fn key(name: &str) -> ServiceKey {
    ServiceKey {
        namespace: "default".into(),
        name: name.into(),
    }
}

/// ClusterIP `vip`, TCP 80 to 8080.
pub fn service(name: &str, vip: &str) -> Service {
    Service {
        key: key(name),
        service_type: ServiceType::ClusterIp,
        cluster_ips: vec![vip.parse().expect("vip")],
        ports: vec![ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            target_port: TargetPort::Number(8080),
            node_port: None,
        }],
        external_ips: Vec::new(),
        ingress_ips: Vec::new(),
        session_affinity: false,
        external_policy_local: false,
        internal_policy_local: false,
        health_check_node_port: None,
        preserve_destination: false,
    }
}

/// A ready endpoint on `node`.
pub fn endpoint(ip: &str, node: &str) -> Endpoint {
    Endpoint {
        ip: ip.parse().expect("ip"),
        node_name: Some(node.into()),
        ready: true,
        serving: true,
        terminating: false,
    }
}

/// The Services, and for each `(name, endpoints)` the slice `NAME-1` of Service `name`.
pub fn snapshot(services: Vec<Service>, endpoints: &[(&str, Vec<Endpoint>)]) -> Snapshot {
    let mut snap = Snapshot::default();
    for s in services {
        snap.services.insert(s.key.clone(), s);
    }
    for (name, eps) in endpoints {
        snap.slices.insert(
            format!("default/{name}-1"),
            Slice {
                name: format!("{name}-1"),
                service: key(name),
                ipv6: false,
                ports: vec![SlicePort {
                    name: "http".into(),
                    protocol: Protocol::Tcp,
                    port: 8080,
                }],
                endpoints: eps.clone(),
            },
        );
    }
    snap
}
