//! The proxy's Kubernetes objects as `winnet doctor` compares them with HNS: one reading of
//! Services and EndpointSlices (this crate's model), used by the doctor's gauges here and by
//! `winnet doctor`/`collect`.

use doctor::snapshot::{KubeView, Service, ServiceEndpoint, ServicePort};

use crate::model::{Protocol, ServiceType};
use crate::source::Snapshot;

/// The Services of `snapshot` with their endpoints (ExternalName Services have no load
/// balancer and are left out). Pods are not kube-proxy's objects: `pods_known` is false.
pub fn kube_view(snapshot: &Snapshot) -> KubeView {
    let slices = snapshot.slices_by_service();
    let services = snapshot
        .services
        .values()
        .filter_map(|svc| {
            let service_type = match svc.service_type {
                ServiceType::ClusterIp => "ClusterIP",
                ServiceType::NodePort => "NodePort",
                ServiceType::LoadBalancer => "LoadBalancer",
                ServiceType::ExternalName => return None,
            };
            let mut endpoints: Vec<ServiceEndpoint> = slices
                .get(&svc.key)
                .into_iter()
                .flatten()
                .flat_map(|sl| sl.endpoints.iter())
                .map(|e| ServiceEndpoint {
                    ip: e.ip,
                    node: e.node_name.clone(),
                    ready: e.ready,
                    serving: e.serving,
                })
                .collect();
            endpoints.sort_by_key(|e| e.ip);
            endpoints.dedup_by_key(|e| e.ip);
            Some(Service {
                namespace: svc.key.namespace.clone(),
                name: svc.key.name.clone(),
                service_type: service_type.into(),
                cluster_ips: svc.cluster_ips.clone(),
                external_ips: svc
                    .external_ips
                    .iter()
                    .chain(svc.ingress_ips.iter())
                    .copied()
                    .collect(),
                ports: svc
                    .ports
                    .iter()
                    .map(|p| ServicePort {
                        name: p.name.clone(),
                        protocol: match p.protocol {
                            Protocol::Tcp => "TCP",
                            Protocol::Udp => "UDP",
                            Protocol::Sctp => "SCTP",
                        }
                        .into(),
                        port: p.port,
                        node_port: p.node_port,
                    })
                    .collect(),
                external_policy_local: svc.external_policy_local,
                internal_policy_local: svc.internal_policy_local,
                health_check_node_port: svc.health_check_node_port,
                endpoints,
            })
        })
        .collect();
    KubeView {
        services_known: true,
        services,
        pods: Vec::new(),
        pods_known: false,
    }
}
