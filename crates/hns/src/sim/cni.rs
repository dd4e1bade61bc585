//! What the Windows CNI plugins make for a pod, through hnsd: win-bridge on L2Bridge (gateway
//! .2, OutBoundNAT with the cluster, Service and node subnets as exceptions, `SDNRoute`s with
//! `NeedEncap` for the Service CIDR and the node's address), win-overlay / sdnoverlay on
//! Overlay (MAC `0E-2A-<ip>`, gateway .1, `ProviderAddress`), optionally `loopbackDSR`; then a
//! namespace with the endpoint, and the pod's own IP stack.

use std::net::IpAddr;

use hcn::error::HnsError;
use hcn::policy::{OutboundNatPolicySetting, ProviderAddressPolicySetting, SdnRoutePolicySetting};
use hcn::{Endpoint, EndpointPolicy, IpConfig, MacAddress, Namespace, NamespaceType, NetworkType};
use ipnet::IpNet;

use super::cluster::{Cluster, Who, addr};
use super::flannel::{self, CLUSTER_CIDR, SERVICE_CIDR};
use super::stack::{Interface, Stack, StackRoute};
use crate::state::Object;

/// How to make a pod.
#[derive(Clone, Debug, Default)]
pub struct PodOptions {
    /// win-bridge / win-overlay `loopbackDSR`: OutBoundNAT `Destinations` = the pod's address.
    pub loopback_dsr: bool,
    /// More endpoint policies (ACLs, port mappings, ...).
    pub policies: Vec<EndpointPolicy>,
    /// Leave out the plugin's OutBoundNAT policy.
    pub no_outbound_nat: bool,
    /// Addresses the pod accepts as its own besides its endpoint's (a DSR VIP).
    pub extra_addresses: Vec<IpAddr>,
    /// The endpoint's DNS settings, as the plugin reads them from its config (`dns`,
    /// `runtimeConfig.dns`).
    pub dns: hcn::Dns,
}

/// TCP ports every pod answers on.
pub const POD_TCP: [u16; 2] = [80, 8080];
/// UDP ports every pod echoes on.
pub const POD_UDP: [u16; 2] = [53, 5353];

impl Cluster {
    /// A pod on node `node` with the CNI plugin of the node's network.
    pub fn add_pod(&mut self, node: usize, name: &str, opts: PodOptions) -> Result<Who, HnsError> {
        let Some(n) = self.nodes.get_mut(node) else {
            return Err(bad(format!("no node {node}")));
        };
        let Some(net) = n.network.clone() else {
            return Err(bad(format!(
                "{}: no pod network yet (run flannel first)",
                n.name
            )));
        };
        let ip = flannel::nth(net.subnet, net.next_host);
        if let Some(pn) = n.network.as_mut() {
            pn.next_host += 1;
        }
        let node_ip = addr::node(node);
        let mut policies = Vec::new();
        let overlay = net.network_type == NetworkType::Overlay;
        let mut exceptions = vec![CLUSTER_CIDR.to_string(), SERVICE_CIDR.to_string()];
        if !overlay {
            exceptions.push(addr::UNDERLAY.to_string());
        }
        if !opts.no_outbound_nat {
            policies.push(EndpointPolicy::OutBoundNat(OutboundNatPolicySetting {
                exceptions,
                ..OutboundNatPolicySetting::default()
            }));
        }
        policies.push(EndpointPolicy::SdnRoute(SdnRoutePolicySetting {
            destination_prefix: SERVICE_CIDR.parse().ok(),
            next_hop: None,
            need_encap: true,
        }));
        let mac = if overlay {
            policies.push(EndpointPolicy::ProviderAddress(
                ProviderAddressPolicySetting {
                    provider_address: node_ip,
                },
            ));
            match ip {
                IpAddr::V4(v) => {
                    let o = v.octets();
                    Some(MacAddress([0x0e, 0x2a, o[0], o[1], o[2], o[3]]))
                }
                IpAddr::V6(_) => None,
            }
        } else {
            policies.push(EndpointPolicy::SdnRoute(SdnRoutePolicySetting {
                destination_prefix: Some(IpNet::from(node_ip)),
                next_hop: None,
                need_encap: true,
            }));
            None
        };
        if opts.loopback_dsr {
            policies.push(EndpointPolicy::OutBoundNat(OutboundNatPolicySetting {
                destinations: vec![ip.to_string()],
                ..OutboundNatPolicySetting::default()
            }));
        }
        policies.extend(opts.policies.iter().cloned());
        let ep = Endpoint {
            name: format!("{name}_{}", if overlay { "flannel.4096" } else { "cbr0" }),
            host_compute_network: net.id,
            ip_configurations: vec![IpConfig {
                ip_address: Some(ip),
                prefix_length: 24,
            }],
            mac_address: mac,
            policies,
            dns: opts.dns.clone(),
            ..Endpoint::default()
        };
        self.add_pod_endpoint(
            node,
            name,
            ep,
            net.subnet,
            net.gateway,
            opts.extra_addresses,
        )
    }

    /// A pod on node `node` with an endpoint made by the caller: the endpoint is created, put
    /// in a new namespace, and the pod's stack set up with `gateway` as its default route.
    pub fn add_pod_endpoint(
        &mut self,
        node: usize,
        name: &str,
        ep: Endpoint,
        subnet: IpNet,
        gateway: IpAddr,
        extra_addresses: Vec<IpAddr>,
    ) -> Result<Who, HnsError> {
        let Some(n) = self.nodes.get_mut(node) else {
            return Err(bad(format!("no node {node}")));
        };
        let id = n.create(Object::Endpoint(ep))?;
        let ns = n.create(Object::Namespace(Namespace {
            namespace_type: Some(NamespaceType::Guest),
            ..Namespace::default()
        }))?;
        n.attach(ns, id)?;
        let Some(created) = n.state.endpoint(id).cloned() else {
            return Err(bad(format!("endpoint {id} vanished")));
        };
        let mac = created
            .mac_address
            .map(|m| vfp::wire::MacAddr(m.0))
            .unwrap_or_default();
        let addresses: Vec<IpNet> = created
            .ips()
            .filter_map(|ip| IpNet::new(ip, subnet.prefix_len()).ok())
            .collect();
        let mut s = Stack::new(name);
        s.interfaces.push(Interface {
            name: "eth0".into(),
            mac,
            addresses,
        });
        let any = if gateway.is_ipv4() {
            IpNet::V4(Default::default())
        } else {
            IpNet::V6(Default::default())
        };
        s.routes.push(StackRoute {
            destination: any,
            via: Some(gateway),
            dev: None,
        });
        s.tcp_listen.extend(POD_TCP);
        s.udp_listen.extend(POD_UDP);
        s.extra_addresses = extra_addresses;
        n.pods.insert(id, s);
        Ok(Who::Pod(node, id))
    }

    /// The address of a pod (its endpoint's first).
    pub fn ip_of(&self, who: Who) -> Option<IpAddr> {
        match who {
            Who::Pod(n, ep) => self.nodes.get(n)?.state.endpoint(ep)?.ips().next(),
            Who::Node(n) => Some(addr::node(n)),
            Who::External => addr::ROUTER.parse().ok(),
        }
    }
}

fn bad(msg: String) -> HnsError {
    HnsError::new(hcn::HResult::E_INVALIDARG, msg)
}
