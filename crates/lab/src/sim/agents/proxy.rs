//! kube-proxy on every node: the real winkernel proxier (`proxy::Proxy`) on the node's
//! in-process hnsd, syncing the cluster's Services and EndpointSlices as a kube API would
//! hand them to it. A [`Service`] here is what a test or the demo asks for; it becomes the
//! Kubernetes objects a user would write (and the EndpointSlice the control plane would make
//! from the ready backends), and every node's proxy programs them.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hcn::NetworkType;
use hcn::error::{HResult, HnsError};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Service as KubeService, ServicePort, ServiceSpec,
    ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubesrc::{Objects, Sourced};
use proxy::proxier::{Config, FeatureGates, SourceConfig};
use proxy::source::Snapshot;

use super::super::cluster::{Cluster, Who};
use super::super::node::block_on;
use super::flannel::CLUSTER_CIDR;
use crate::objects;

/// A Service port as a user asks for it, over the pods that back it.
#[derive(Clone, Debug)]
pub struct Service {
    /// `namespace/name`.
    pub name: String,
    /// 6 TCP, 17 UDP.
    pub protocol: u32,
    pub port: u16,
    pub target_port: u16,
    pub cluster_ip: IpAddr,
    pub node_port: Option<u16>,
    pub ingress_ip: Option<IpAddr>,
    /// The ready backend pods.
    pub backends: Vec<Who>,
    /// kube-proxy's `--enable-dsr`: a per-node flag, so asking for it turns it on for every
    /// node's proxy (and so for every Service of the cluster).
    pub dsr: bool,
    /// `sessionAffinity: ClientIP`.
    pub client_ip_affinity: bool,
    /// `externalTrafficPolicy: Local`.
    pub external_local: bool,
}

impl Service {
    /// A TCP Service `name` on `port` -> `target_port` at `cluster_ip` over `backends`.
    pub fn tcp(
        name: &str,
        cluster_ip: IpAddr,
        port: u16,
        target_port: u16,
        backends: Vec<Who>,
    ) -> Service {
        Service {
            name: name.into(),
            protocol: 6,
            port,
            target_port,
            cluster_ip,
            node_port: None,
            ingress_ip: None,
            backends,
            dsr: false,
            client_ip_affinity: false,
            external_local: false,
        }
    }

    /// A UDP Service `name` on `port` -> `target_port` at `cluster_ip` over `backends`.
    pub fn udp(
        name: &str,
        cluster_ip: IpAddr,
        port: u16,
        target_port: u16,
        backends: Vec<Who>,
    ) -> Service {
        Service {
            protocol: 17,
            ..Service::tcp(name, cluster_ip, port, target_port, backends)
        }
    }

    fn namespace_and_name(&self) -> (String, String) {
        match self.name.split_once('/') {
            Some((ns, n)) => (ns.to_string(), n.to_string()),
            None => ("default".to_string(), self.name.clone()),
        }
    }

    /// The Service object and the EndpointSlice of its ready backends (`backends`: each
    /// backend's pod name, address and node name), made by the objects the real cluster's
    /// manifests are made of ([`crate::objects`]); the one port is unnamed, as a user writes a
    /// single-port Service.
    pub fn objects(&self, backends: &[(String, IpAddr, String)]) -> (KubeService, EndpointSlice) {
        let (namespace, name) = self.namespace_and_name();
        let protocol = if self.protocol == 17 { "UDP" } else { "TCP" };
        let service_type = if self.ingress_ip.is_some() {
            "LoadBalancer"
        } else if self.node_port.is_some() {
            "NodePort"
        } else {
            "ClusterIP"
        };
        let external = service_type != "ClusterIP";
        let port = ServicePort {
            name: None,
            node_port: self.node_port.map(i32::from),
            ..objects::service_port("", protocol, self.port, Some(self.target_port))
        };
        let svc = KubeService {
            metadata: objects::meta(&name, &namespace),
            spec: Some(ServiceSpec {
                type_: Some(service_type.into()),
                cluster_ip: Some(self.cluster_ip.to_string()),
                cluster_ips: Some(vec![self.cluster_ip.to_string()]),
                ports: Some(vec![port]),
                session_affinity: Some(
                    if self.client_ip_affinity {
                        "ClientIP"
                    } else {
                        "None"
                    }
                    .into(),
                ),
                external_traffic_policy: external.then(|| {
                    if self.external_local {
                        "Local"
                    } else {
                        "Cluster"
                    }
                    .into()
                }),
                ..ServiceSpec::default()
            }),
            status: self.ingress_ip.map(|ip| ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(vec![LoadBalancerIngress {
                        ip: Some(ip.to_string()),
                        ..LoadBalancerIngress::default()
                    }]),
                }),
                ..ServiceStatus::default()
            }),
        };
        let endpoints = backends
            .iter()
            .map(|(pod, ip, node)| objects::pod_endpoint(node, pod, *ip, &namespace, false))
            .collect();
        let mut slice = objects::endpoint_slice(
            &name,
            &namespace,
            endpoints,
            vec![EndpointPort {
                name: None,
                ..objects::endpoint_port("", protocol, self.target_port)
            }],
        );
        if self.cluster_ip.is_ipv6() {
            slice.address_type = "IPv6".into();
        }
        (svc, slice)
    }
}

impl std::fmt::Debug for Proxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxies")
            .field("services", &self.objects.services.len())
            .field("dsr", &self.dsr)
            .finish_non_exhaustive()
    }
}

/// The cluster's kube-proxies and the objects they are given.
#[derive(Default)]
pub struct Proxies {
    /// What a kube API would hold.
    objects: Objects,
    /// Each node's proxy, once started.
    running: Vec<Option<proxy::Proxy>>,
    /// `--enable-dsr` of every proxy.
    dsr: bool,
    /// The health check node ports each node's host listens on for its proxy.
    health_ports: Vec<Vec<u16>>,
}

impl Cluster {
    /// Adds `svc` to the cluster's objects and lets every node's kube-proxy sync; an HNS
    /// error a proxy met while programming it is returned.
    pub fn add_service(&mut self, svc: &Service) -> Result<(), HnsError> {
        let backends: Vec<(String, IpAddr, String)> = svc
            .backends
            .iter()
            .filter_map(|b| {
                let Who::Pod(n, _) = *b else { return None };
                let pod = self.name(*b);
                Some((pod, self.ip_of(*b)?, self.nodes.get(n)?.name.clone()))
            })
            .collect();
        self.add_service_over(svc, &backends)
    }

    /// [`Cluster::add_service`] with the EndpointSlice's endpoints given as (pod name,
    /// address, node name), pods of this cluster or not (backends on nodes it does not
    /// simulate); `svc.backends` is not read.
    pub fn add_service_over(
        &mut self,
        svc: &Service,
        backends: &[(String, IpAddr, String)],
    ) -> Result<(), HnsError> {
        let (service, slice) = svc.objects(backends);
        let origin = format!("service {}", svc.name);
        let key = |meta: &ObjectMeta| {
            format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or("default"),
                meta.name.as_deref().unwrap_or_default()
            )
        };
        let objects = &mut self.proxies.objects;
        objects.services.insert(
            key(&service.metadata),
            Arc::new(Sourced {
                origin: origin.clone(),
                object: service,
            }),
        );
        objects.slices.insert(
            key(&slice.metadata),
            Arc::new(Sourced {
                origin,
                object: slice,
            }),
        );
        objects.synced = true;
        if svc.dsr && !self.proxies.dsr {
            // A restarted kube-proxy with --enable-dsr: its first sync adopts or replaces
            // every load balancer.
            self.proxies.dsr = true;
            self.proxies.running.clear();
        }
        self.sync_proxies(Some(&svc.name))
    }

    /// Sets every node's kube-proxy `--enable-dsr` (restarting those that run with the other
    /// setting: their first sync adopts or replaces every load balancer).
    pub fn set_proxy_dsr(&mut self, dsr: bool) {
        if self.proxies.dsr != dsr {
            self.proxies.dsr = dsr;
            self.proxies.running.clear();
        }
    }

    /// Gives every node's kube-proxy `objects` (what the kube API now holds) and lets it sync.
    pub fn set_objects(&mut self, objects: Objects) -> Result<(), HnsError> {
        self.proxies.objects = objects;
        self.proxies.objects.synced = true;
        self.sync_proxies(None)
    }

    /// Starts the proxies not running yet and syncs every one with the current objects;
    /// the first problem a proxy reports with `service` is returned.
    fn sync_proxies(&mut self, service: Option<&str>) -> Result<(), HnsError> {
        let snapshot = Snapshot::from_objects(&self.proxies.objects);
        self.proxies.running.resize_with(self.nodes.len(), || None);
        for i in 0..self.nodes.len() {
            if self.proxies.running[i].is_none() {
                let Some(config) = self.proxy_config(i)? else {
                    continue;
                };
                let hns = self.nodes[i].hns.clone();
                let started = block_on(proxy::Proxy::connect_with(config, hns))?
                    .map_err(|e| fail(format!("{}: kube-proxy: {e}", self.nodes[i].name)))?;
                self.proxies.running[i] = Some(started);
            }
            let Some(p) = self.proxies.running[i].as_mut() else {
                continue;
            };
            let report = block_on(p.sync(&snapshot))?;
            // The proxy's health check node ports listen on the node's host, as the daemon's
            // listeners do; what they answer is the proxy's ([`Cluster::health_check`]).
            let ports = p.health_check_node_ports();
            self.proxies
                .health_ports
                .resize_with(self.nodes.len(), Vec::new);
            let host = &mut self.nodes[i].host;
            for old in &self.proxies.health_ports[i] {
                host.tcp_listen.remove(old);
            }
            host.tcp_listen.extend(ports.iter().copied());
            self.proxies.health_ports[i] = ports;
            self.nodes[i].sync_host();
            if let Some(svc) = service
                && let Some(problem) = report.problems.iter().find(|m| m.contains(svc))
            {
                return Err(HnsError::new(
                    HResult::E_FAIL,
                    format!("{}: kube-proxy: {problem}", self.nodes[i].name),
                ));
            }
        }
        Ok(())
    }

    /// What node `i`'s kube-proxy answers on health check node port `port` (the HTTP status
    /// and the JSON body), from the proxy's own health code; `None` when it serves no such
    /// port.
    pub fn health_check(&self, i: usize, port: u16) -> Option<(u16, String)> {
        self.proxies.running.get(i)?.as_ref()?.health_check(port)
    }

    /// Node `i`'s kube-proxy flags, as the local cluster starts it; `None` before flanneld
    /// made the node's network.
    fn proxy_config(&mut self, i: usize) -> Result<Option<Config>, HnsError> {
        let node = &self.nodes[i];
        let Some(net) = node.network.clone() else {
            return Ok(None);
        };
        let overlay = net.network_type == NetworkType::Overlay;
        let source_vip = if overlay {
            Some(self.source_vip(i)?)
        } else {
            None
        };
        let node = &self.nodes[i];
        Ok(Some(Config {
            hostname: node.name.clone(),
            network_name: net.name.clone(),
            source_vip,
            enable_dsr: self.proxies.dsr,
            feature_gates: FeatureGates {
                win_dsr: true,
                win_overlay: true,
            },
            cluster_cidr: CLUSTER_CIDR.parse().ok(),
            // Both families on a dual-stack fabric, as kubelet reports the Node's addresses.
            node_ips: node.compiler().facts().ips().collect(),
            healthz_bind: None,
            metrics_bind: None,
            hns_socket: PathBuf::new(),
            root_hnsendpoint_name: "cbr0".into(),
            forward_healthcheck_vip: false,
            source: SourceConfig::Manifests(PathBuf::new()),
            retry_after: Duration::from_secs(1),
            host_mac: Some(hcn::MacAddress(node.mac.0)),
        }))
    }

    /// kube-proxy's source VIP on node `i`'s Overlay network, as reserved when flanneld made
    /// it.
    pub fn source_vip(&self, i: usize) -> Result<IpAddr, HnsError> {
        self.nodes[i]
            .source_vip
            .ok_or_else(|| fail(format!("{}: no source VIP reserved", self.nodes[i].name)))
    }
}

fn fail(message: String) -> HnsError {
    HnsError::new(HResult::E_FAIL, message)
}
