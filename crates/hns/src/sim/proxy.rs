//! What kube-proxy (winkernel) makes for a Service on every node, through hnsd: a remote
//! endpoint for each backend on another node (on Overlay with its node's provider address,
//! and one for the ClusterIP itself), then the load balancers of reference §5.4: ClusterIP
//! (DSR with `--enable-dsr`), NodePort (no frontend VIP, flags LocalRoutedVIP|VipExternalIP),
//! LoadBalancer ingress IP (VipExternalIP); ExternalTrafficPolicy Local makes the last two DSR
//! with local backends only; ClientIP affinity is `DistributionType` SourceIP.

use std::net::IpAddr;

use hcn::error::HnsError;
use hcn::loadbalancer::{
    LoadBalancerDistribution, LoadBalancerFlags, LoadBalancerPortMapping, PortMappingFlags,
};
use hcn::policy::ProviderAddressPolicySetting;
use hcn::{Endpoint, EndpointFlags, EndpointPolicy, Guid, IpConfig, LoadBalancer, MacAddress};

use super::cluster::{Cluster, Who, addr};
use crate::state::Object;

/// A Service port as kube-proxy sees it.
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
    /// `--enable-dsr` (the ClusterIP load balancer).
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
        cluster_ip: &str,
        port: u16,
        target_port: u16,
        backends: Vec<Who>,
    ) -> Service {
        Service {
            name: name.into(),
            protocol: 6,
            port,
            target_port,
            cluster_ip: cluster_ip.parse().unwrap_or(IpAddr::from([10, 96, 0, 1])),
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
        cluster_ip: &str,
        port: u16,
        target_port: u16,
        backends: Vec<Who>,
    ) -> Service {
        Service {
            protocol: 17,
            ..Service::tcp(name, cluster_ip, port, target_port, backends)
        }
    }

    fn linux_service(&self, port: u16) -> String {
        format!("{}:{port}", self.name)
    }
}

/// The load balancers of one Service on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceLbs {
    pub cluster_ip: Option<Guid>,
    pub node_port: Option<Guid>,
    pub ingress: Option<Guid>,
}

impl Cluster {
    /// Programs `svc` on every node as kube-proxy would; returns each node's load balancers.
    pub fn add_service(&mut self, svc: &Service) -> Result<Vec<ServiceLbs>, HnsError> {
        (0..self.nodes.len())
            .map(|n| self.program(n, svc))
            .collect()
    }

    fn program(&mut self, n: usize, svc: &Service) -> Result<ServiceLbs, HnsError> {
        let mut all = Vec::new();
        let mut local = Vec::new();
        for b in &svc.backends {
            let Who::Pod(m, ep) = *b else { continue };
            if m == n {
                all.push(ep);
                local.push(ep);
            } else if let Some(ip) = self.ip_of(*b) {
                all.push(self.remote_endpoint(n, ip, Some(addr::node(m)))?);
            }
        }
        let node = &mut self.nodes[n];
        let Some(net) = node.network.clone() else {
            return Ok(ServiceLbs::default());
        };
        if net.network_type == hcn::NetworkType::Overlay {
            // kube-proxy's placeholder for the ClusterIP: remote, behind this node.
            self.remote_endpoint(n, svc.cluster_ip, Some(addr::node(n)))?;
        }
        let node = &mut self.nodes[n];
        let distribution = if svc.client_ip_affinity {
            LoadBalancerDistribution::SOURCE_IP
        } else {
            LoadBalancerDistribution::NONE
        };
        let pm = |external: u16, flags: u32| LoadBalancerPortMapping {
            protocol: svc.protocol,
            internal_port: svc.target_port,
            external_port: external,
            distribution_type: distribution,
            flags,
        };
        let lb = |vips: Vec<IpAddr>,
                  backends: &Vec<Guid>,
                  pm: LoadBalancerPortMapping,
                  dsr: bool,
                  port: u16| {
            LoadBalancer {
                host_compute_endpoints: backends.clone(),
                source_vip: net.source_vip,
                frontend_vips: vips,
                port_mappings: vec![pm],
                flags: if dsr { LoadBalancerFlags::DSR } else { 0 },
                linux_service: svc.linux_service(port),
                ..LoadBalancer::default()
            }
        };
        let external_backends = if svc.external_local { &local } else { &all };
        let mut out = ServiceLbs::default();
        if !all.is_empty() {
            let o = lb(
                vec![svc.cluster_ip],
                &all,
                pm(svc.port, 0),
                svc.dsr,
                svc.port,
            );
            out.cluster_ip = Some(node.create(Object::LoadBalancer(o))?);
        }
        if let Some(np) = svc.node_port
            && !external_backends.is_empty()
        {
            let flags = PortMappingFlags::LOCAL_ROUTED_VIP | PortMappingFlags::VIP_EXTERNAL_IP;
            let o = lb(
                vec![],
                external_backends,
                pm(np, flags),
                svc.external_local,
                np,
            );
            out.node_port = Some(node.create(Object::LoadBalancer(o))?);
        }
        if let Some(ingress) = svc.ingress_ip
            && !external_backends.is_empty()
        {
            let flags = PortMappingFlags::VIP_EXTERNAL_IP;
            let o = lb(
                vec![ingress],
                external_backends,
                pm(svc.port, flags),
                svc.external_local,
                svc.port,
            );
            out.ingress = Some(node.create(Object::LoadBalancer(o))?);
        }
        Ok(out)
    }

    /// The remote endpoint of `ip` on node `n` (made if missing), as kube-proxy creates it:
    /// MAC `02-11-<ip>`, `Flags` 1, on Overlay the provider address of the node hosting it.
    pub fn remote_endpoint(
        &mut self,
        n: usize,
        ip: IpAddr,
        pa: Option<IpAddr>,
    ) -> Result<Guid, HnsError> {
        let node = &mut self.nodes[n];
        let Some(net) = node.network.clone() else {
            return Err(HnsError::new(hcn::HResult::E_INVALIDARG, "no pod network"));
        };
        if let Some(e) = node
            .state
            .endpoints()
            .find(|e| e.is_remote() && e.host_compute_network == net.id && e.ips().any(|a| a == ip))
        {
            return Ok(e.id);
        }
        let overlay = net.network_type == hcn::NetworkType::Overlay;
        let mac = match ip {
            IpAddr::V4(v) => {
                let o = v.octets();
                Some(MacAddress([0x02, 0x11, o[0], o[1], o[2], o[3]]))
            }
            IpAddr::V6(_) => None,
        };
        let policies = match (overlay, pa) {
            (true, Some(pa)) => vec![EndpointPolicy::ProviderAddress(
                ProviderAddressPolicySetting {
                    provider_address: pa,
                },
            )],
            _ => Vec::new(),
        };
        node.create(Object::Endpoint(Endpoint {
            name: format!("remote_{ip}"),
            host_compute_network: net.id,
            ip_configurations: vec![IpConfig {
                ip_address: Some(ip),
                prefix_length: 0,
            }],
            mac_address: mac,
            flags: EndpointFlags::REMOTE_ENDPOINT,
            policies,
            ..Endpoint::default()
        }))
    }
}
