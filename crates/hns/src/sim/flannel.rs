//! What flanneld on Windows makes on each node, through hnsd as it would: the host-gw backend's
//! L2Bridge network `cbr0` with the bridge endpoint `cbr0_ep` at .2 attached to the host and a
//! route to every other node's pod subnet via its node address; the vxlan backend's Overlay
//! network `flannel.4096` (VSID 4096, DR MAC, `HostRoute`, a `RemoteSubnetRoute` per other
//! node) and kube-proxy's source-VIP endpoint.

use std::net::IpAddr;

use hcn::error::HnsError;
use hcn::network::IpamType;
use hcn::policy::{
    DrMacAddressPolicySetting, HostRoutePolicySetting, IsolationIdSetting,
    NetAdapterNamePolicySetting, ProviderAddressPolicySetting, RemoteSubnetRoutePolicySetting,
};
use hcn::{
    Endpoint, Guid, IpConfig, Ipam, MacAddress, Network, NetworkPolicy, NetworkType, Route, Subnet,
    SubnetPolicy,
};
use ipnet::IpNet;

use super::cluster::{Cluster, addr};
use super::stack::StackRoute;
use crate::compiler::HostRoute;
use crate::state::Object;

/// The cluster's pod CIDR.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
/// The Service CIDR.
pub const SERVICE_CIDR: &str = "10.96.0.0/12";
/// flannel's VXLAN VNI on Windows.
pub const VNI: u32 = 4096;

/// Node `i`'s pod subnet: 10.244.(i+1).0/24.
pub fn pod_subnet(i: usize) -> IpNet {
    IpNet::new(IpAddr::from([10, 244, i as u8 + 1, 0]), 24).unwrap_or_default()
}

/// Address `host` of node `i`'s pod subnet.
pub fn pod_ip(i: usize, host: u8) -> IpAddr {
    IpAddr::from([10, 244, i as u8 + 1, host])
}

/// Node `i`'s distributed-router MAC (the one HNS reports and flannel leases as VtepMAC).
pub fn dr_mac(i: usize) -> MacAddress {
    MacAddress([0x00, 0x15, 0x5d, 0xdd, 0x00, i as u8 + 1])
}

/// The pod network of a node, as its CNI plugin needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNetwork {
    /// The HNS network.
    pub id: Guid,
    pub network_type: NetworkType,
    pub subnet: IpNet,
    /// The pods' gateway: .2 (the bridge endpoint) on L2Bridge, .1 on Overlay.
    pub gateway: IpAddr,
    /// The next host number handed to a pod.
    pub next_host: u8,
    /// kube-proxy's source VIP on Overlay.
    pub source_vip: Option<IpAddr>,
}

fn network(name: &str, t: NetworkType, subnet: IpNet, vsid: Option<u32>) -> Network {
    let gw = pod_gateway_1(subnet);
    Network {
        name: name.into(),
        network_type: t,
        ipams: vec![Ipam {
            ipam_type: Some(IpamType::Static),
            subnets: vec![Subnet {
                ip_address_prefix: Some(subnet),
                policies: vsid
                    .map(|v| SubnetPolicy::Vsid(IsolationIdSetting { isolation_id: v }))
                    .into_iter()
                    .collect(),
                routes: vec![Route {
                    next_hop: Some(gw),
                    destination_prefix: "0.0.0.0/0".parse().ok(),
                    metric: 0,
                }],
                flags: 0,
            }],
        }],
        policies: vec![NetworkPolicy::NetAdapterName(NetAdapterNamePolicySetting {
            network_adapter_name: "Ethernet".into(),
        })],
        ..Network::default()
    }
}

fn pod_gateway_1(subnet: IpNet) -> IpAddr {
    nth(subnet, 1)
}

/// Host number `n` of `subnet`.
pub fn nth(subnet: IpNet, n: u8) -> IpAddr {
    match subnet.network() {
        IpAddr::V4(a) => IpAddr::V4(std::net::Ipv4Addr::from(u32::from(a) + u32::from(n))),
        IpAddr::V6(a) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(a) + u128::from(n))),
    }
}

impl Cluster {
    /// flannel host-gw on every node: L2Bridge `cbr0`, `cbr0_ep` at .2 on the host, routes to
    /// the other nodes' pod subnets.
    pub fn flannel_host_gw(&mut self) -> Result<(), HnsError> {
        self.flannel_l2(NetworkType::L2Bridge)
    }

    /// As host-gw, with L2Tunnel networks (every pod packet goes to the router and back); the
    /// router learns the pod subnets.
    pub fn flannel_l2tunnel(&mut self) -> Result<(), HnsError> {
        self.flannel_l2(NetworkType::L2Tunnel)?;
        for i in 0..self.nodes.len() {
            self.external_route(pod_subnet(i), addr::node(i));
        }
        Ok(())
    }

    fn flannel_l2(&mut self, t: NetworkType) -> Result<(), HnsError> {
        let n = self.nodes.len();
        let router: IpAddr = addr::ROUTER
            .parse()
            .unwrap_or(IpAddr::from([192, 168, 1, 1]));
        for i in 0..n {
            let subnet = pod_subnet(i);
            let node = &mut self.nodes[i];
            let id = node.create(Object::Network(network("cbr0", t, subnet, None)))?;
            let ep = node.create(Object::Endpoint(Endpoint {
                name: "cbr0_ep".into(),
                host_compute_network: id,
                ip_configurations: vec![IpConfig {
                    ip_address: Some(nth(subnet, 2)),
                    prefix_length: 24,
                }],
                ..Endpoint::default()
            }))?;
            node.attach_to_host(ep)?;
            let mut routes = vec![HostRoute::new(IpNet::default(), router)];
            routes.extend(
                (0..n)
                    .filter(|j| *j != i)
                    .map(|j| HostRoute::new(pod_subnet(j), addr::node(j))),
            );
            node.set_routes(routes, Vec::new());
            node.network = Some(PodNetwork {
                id,
                network_type: t,
                subnet,
                gateway: nth(subnet, 2),
                next_host: 3,
                source_vip: None,
            });
        }
        Ok(())
    }

    /// flannel vxlan on every node: Overlay `flannel.4096` with VSID 4096, the node's DR MAC,
    /// `HostRoute`, a `RemoteSubnetRoute` per other node; kube-proxy's source-VIP endpoint at
    /// .2 with the host's MAC.
    pub fn flannel_vxlan(&mut self) -> Result<(), HnsError> {
        let n = self.nodes.len();
        let router: IpAddr = addr::ROUTER
            .parse()
            .unwrap_or(IpAddr::from([192, 168, 1, 1]));
        for i in 0..n {
            let subnet = pod_subnet(i);
            let mut net = network("flannel.4096", NetworkType::Overlay, subnet, Some(VNI));
            net.flags = hcn::NetworkFlags::ENABLE_NON_PERSISTENT;
            net.policies.extend([
                NetworkPolicy::DrMacAddress(DrMacAddressPolicySetting { address: dr_mac(i) }),
                NetworkPolicy::ProviderAddress(ProviderAddressPolicySetting {
                    provider_address: addr::node(i),
                }),
                NetworkPolicy::HostRoute(HostRoutePolicySetting {}),
            ]);
            net.policies.extend((0..n).filter(|j| *j != i).map(|j| {
                NetworkPolicy::RemoteSubnetRoute(RemoteSubnetRoutePolicySetting {
                    destination_prefix: pod_subnet(j),
                    isolation_id: VNI as u16,
                    provider_address: addr::node(j),
                    distributed_router_mac_address: dr_mac(j),
                })
            }));
            let node = &mut self.nodes[i];
            let id = node.create(Object::Network(net))?;
            let svip = nth(subnet, 2);
            node.create(Object::Endpoint(Endpoint {
                name: "source-vip".into(),
                host_compute_network: id,
                ip_configurations: vec![IpConfig {
                    ip_address: Some(svip),
                    prefix_length: 24,
                }],
                mac_address: Some(MacAddress(node.mac.0)),
                ..Endpoint::default()
            }))?;
            let mgmt = node
                .host
                .interfaces
                .first()
                .map(|i| i.name.clone())
                .unwrap_or_default();
            node.set_routes(
                vec![HostRoute::new(IpNet::default(), router)],
                vec![StackRoute {
                    destination: subnet,
                    via: None,
                    dev: Some(mgmt),
                }],
            );
            node.network = Some(PodNetwork {
                id,
                network_type: NetworkType::Overlay,
                subnet,
                gateway: nth(subnet, 1),
                next_host: 3,
                source_vip: Some(svip),
            });
        }
        Ok(())
    }
}
