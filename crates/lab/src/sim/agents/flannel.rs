//! flanneld on every node: the real Windows backend (`flannel::windows::WindowsBackend`) on the
//! node's in-process hnsd and simulated IP stack. host-gw makes `cbr0` with `cbr0_ep` at .2
//! and routes every other node's subnet via its address; vxlan makes `flannel.4096` with the
//! VSID and `HostRoute`, leases hnsd's DR MAC and adds a `RemoteSubnetRoute` per other node.
//! The leases come from flannel's own allocator as nodes started one by one get them from
//! etcd; each backend then learns the others' leases as its watch would deliver them.

use std::net::{IpAddr, Ipv4Addr};

use flannel::config::{BackendType, NetConf};
use flannel::lease::{Lease, LeaseAttrs};
use flannel::windows::WindowsBackend;
use hcn::error::{HResult, HnsError};
use hcn::{Guid, NetworkType};
use ipnet::{IpNet, Ipv4Net};

use super::super::cluster::{Cluster, addr};
use super::super::node::block_on;
use crate::topology::{self, Mode};

pub use crate::topology::{CLUSTER_CIDR, SERVICE_CIDR};

/// The NIC flanneld is told to use (`--iface`), the one hnsd's external switch binds.
pub const NIC: &str = "Ethernet";

/// The pod network flanneld made on a node, as its CNI plugin and kube-proxy need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNetwork {
    /// The HNS network.
    pub id: Guid,
    /// Its name (`cbr0`, `flannel.4096`): the CNI config's `name`, kube-proxy's
    /// `--network-name`.
    pub name: String,
    pub network_type: NetworkType,
    pub subnet: IpNet,
    /// The network's IPv6 subnet, when its operator made it dual-stack
    /// ([`crate::dual_stack`]).
    pub subnet6: Option<IpNet>,
}

/// Host number `n` of `subnet`.
pub fn nth(subnet: IpNet, n: u8) -> IpAddr {
    match subnet.network() {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + u32::from(n))),
        IpAddr::V6(a) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(a) + u128::from(n))),
    }
}

/// flannel's net-conf.json for `backend`: the local cluster's ([`topology::net_conf`]).
pub fn net_conf(backend: BackendType) -> Result<NetConf, HnsError> {
    let mode = match backend {
        BackendType::HostGw => Mode::L2bridge,
        BackendType::Vxlan => Mode::Overlay,
    };
    NetConf::parse(&topology::net_conf(mode)).map_err(|e| fail(e.to_string()))
}

impl Cluster {
    /// flanneld host-gw on every node.
    pub fn flannel_host_gw(&mut self) -> Result<(), HnsError> {
        let subnets = leases(BackendType::HostGw, self.nodes.len())?;
        self.flannel(BackendType::HostGw, &subnets)
    }

    /// flanneld vxlan on every node.
    pub fn flannel_vxlan(&mut self) -> Result<(), HnsError> {
        let subnets = leases(BackendType::Vxlan, self.nodes.len())?;
        self.flannel(BackendType::Vxlan, &subnets)
    }

    /// flanneld with `backend` on every node, node `i` holding the lease of `subnets[i]` (as
    /// its subnet manager gave it).
    pub fn flannel(&mut self, backend: BackendType, subnets: &[Ipv4Net]) -> Result<(), HnsError> {
        let conf = net_conf(backend)?;
        let mut leases: Vec<Lease> = Vec::new();
        let mut backends = Vec::new();
        for i in 0..self.nodes.len() {
            let subnet = *subnets
                .get(i)
                .ok_or_else(|| fail(format!("no lease for node {i}")))?;
            let IpAddr::V4(public_ip) = addr::node(i) else {
                return Err(fail("the underlay is IPv4".into()));
            };
            let node = &mut self.nodes[i];
            let mut b = WindowsBackend::on_stack(
                node.hns.clone(),
                node.node_stack(),
                conf.clone(),
                flannel::Node {
                    iface: NIC.into(),
                    public_ip,
                    mtu: 1500,
                },
            );
            let mut lease = Lease {
                subnet,
                attrs: LeaseAttrs {
                    public_ip,
                    backend_type: backend,
                    vxlan: b.initial_data(),
                },
            };
            let data =
                block_on(b.setup(&lease))?.map_err(|e| fail(format!("{}: {e}", node.name)))?;
            lease.attrs.vxlan = data.or(lease.attrs.vxlan);
            node.sync_host();
            leases.push(lease);
            backends.push(b);
        }
        for (i, lease) in leases.iter().enumerate() {
            // What the node's start script does once flanneld has leased on overlay.
            if backend == BackendType::Vxlan {
                let dir = self.ipam_dir(i);
                let name = topology::network_name(Mode::Overlay);
                let vip = super::cni::reserve_source_vip(&name, lease.subnet, &dir)?;
                self.nodes[i].source_vip = Some(IpAddr::V4(vip));
            }
        }
        for (i, mut b) in backends.into_iter().enumerate() {
            let remote: Vec<Lease> = leases
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, l)| *l)
                .collect();
            let node = &mut self.nodes[i];
            block_on(b.reconcile(&remote))?.map_err(|e| fail(format!("{}: {e}", node.name)))?;
            node.sync_host();
            node.network = Some(PodNetwork {
                id: find_network(node, &b.name)?,
                name: b.name.clone(),
                network_type: match backend {
                    BackendType::HostGw => NetworkType::L2Bridge,
                    BackendType::Vxlan => NetworkType::Overlay,
                },
                subnet: IpNet::V4(leases[i].subnet),
                subnet6: ipv6_subnet(node, &b.name),
            });
        }
        Ok(())
    }
}

impl Cluster {
    /// What the operator of a dual-stack L2Bridge cluster provisions on every node before
    /// flanneld starts ([`crate::dual_stack`]): `cbr0` with node `i`'s lease `subnets[i]` and
    /// its IPv6 prefix ([`topology::pod_prefix_v6`]), the bridge endpoint with both
    /// gateways, and routes to the other nodes' IPv6 prefixes via their IPv6 addresses.
    pub fn provision_dual_stack(&mut self, subnets: &[Ipv4Net]) -> Result<(), HnsError> {
        let name = topology::network_name(Mode::L2bridge);
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let v4 = *subnets
                .get(i)
                .ok_or_else(|| fail(format!("no lease for node {i}")))?;
            let v6 = topology::pod_prefix_v6(v4);
            block_on(crate::dual_stack::provision(&node.hns, &name, NIC, v4, v6))?
                .map_err(|e| fail(format!("{}: dual-stack {name}: {e}", node.name)))?;
            node.sync_host();
        }
        for i in 0..self.nodes.len() {
            let mut stack = self.nodes[i].node_stack();
            for (j, subnet) in subnets.iter().enumerate().filter(|(j, _)| *j != i) {
                let IpAddr::V4(their) = addr::node(j) else {
                    continue;
                };
                let route = host::netlink::RouteEntry {
                    destination: IpNet::V6(topology::pod_prefix_v6(*subnet)),
                    gateway: Some(IpAddr::V6(topology::fabric_ip_v6(their))),
                    oif: None,
                    metric: None,
                };
                stack
                    .add_route(&route, false)
                    .map_err(|e| fail(format!("{}: {e}", self.nodes[i].name)))?;
            }
            self.nodes[i].sync_host();
        }
        Ok(())
    }
}

impl Cluster {
    /// What the operator of a dual-stack Overlay cluster provisions before flanneld starts
    /// ([`crate::dual_stack`]), where the nodes' HNS carries IPv6 on Overlay: `flannel.4096`
    /// with node `i`'s lease `subnets[i]` and its IPv6 prefix under the VNI. Where HNS does
    /// not (every Windows build), the operator leaves the node single-stack: false.
    pub fn provision_dual_stack_overlay(&mut self, subnets: &[Ipv4Net]) -> Result<bool, HnsError> {
        let name = topology::network_name(Mode::Overlay);
        for node in &self.nodes {
            let carries = block_on(crate::dual_stack::overlay_carries_ipv6(&node.hns))?
                .map_err(|e| fail(format!("{}: HNS's features: {e}", node.name)))?;
            if !carries {
                return Ok(false);
            }
        }
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let v4 = *subnets
                .get(i)
                .ok_or_else(|| fail(format!("no lease for node {i}")))?;
            let v6 = topology::pod_prefix_v6(v4);
            block_on(crate::dual_stack::provision_overlay(
                &node.hns,
                &name,
                NIC,
                v4,
                v6,
                topology::VNI,
            ))?
            .map_err(|e| fail(format!("{}: dual-stack {name}: {e}", node.name)))?;
            node.sync_host();
        }
        Ok(true)
    }

    /// Once flanneld runs on a dual-stack Overlay cluster: on every node, a
    /// `RemoteSubnetRoute` per other node's IPv6 pod prefix to its provider address and the DR
    /// MAC flanneld leased (flannel routes the IPv4 leases only).
    pub fn route_ipv6_overlay(&mut self, subnets: &[Ipv4Net]) -> Result<(), HnsError> {
        let vni = u16::try_from(topology::VNI).map_err(|e| fail(format!("VNI: {e}")))?;
        let mut remotes = Vec::new();
        for (j, subnet) in subnets.iter().enumerate().take(self.nodes.len()) {
            let dr_mac = self
                .dr_mac(j)
                .ok_or_else(|| fail(format!("{}: no DR MAC on its network", self.nodes[j].name)))?;
            remotes.push(crate::dual_stack::RemoteNode {
                prefix: topology::pod_prefix_v6(*subnet),
                provider_address: addr::node(j),
                dr_mac,
            });
        }
        let name = topology::network_name(Mode::Overlay);
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let others: Vec<_> = remotes
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, r)| *r)
                .collect();
            block_on(crate::dual_stack::route_remote_v6(
                &node.hns, &name, &others, vni,
            ))?
            .map_err(|e| fail(format!("{}: IPv6 routes on {name}: {e}", node.name)))?;
            node.sync_host();
        }
        Ok(())
    }
}

/// The IPv6 subnet of `node`'s network `name`, if it has one.
fn ipv6_subnet(node: &super::super::node::Node, name: &str) -> Option<IpNet> {
    node.read(|s| {
        s.networks()
            .find(|n| n.name == name)?
            .subnets()
            .filter_map(|s| s.ip_address_prefix)
            .find(|p| p.addr().is_ipv6())
    })
}

/// The subnets flanneld's etcd subnet manager leases `n` nodes started one by one (each takes
/// the first free subnet, flannel's allocator with no race to lose).
pub fn leases(backend: BackendType, n: usize) -> Result<Vec<Ipv4Net>, HnsError> {
    let conf = net_conf(backend)?;
    let mut taken: Vec<Ipv4Net> = Vec::new();
    for _ in 0..n {
        let subnet = flannel::etcd::pick_subnet(&conf, &taken, None, 0)
            .ok_or_else(|| fail(format!("no free subnet left in {CLUSTER_CIDR}")))?;
        taken.push(subnet);
    }
    Ok(taken)
}

impl Cluster {
    /// Node `i`'s distributed-router MAC on its pod network: the one hnsd reported on the
    /// network and flanneld leased as the node's VtepMAC (vxlan only).
    pub fn dr_mac(&self, i: usize) -> Option<hcn::MacAddress> {
        let node = self.nodes.get(i)?;
        let id = node.network.as_ref()?.id;
        node.read(|s| {
            s.network(id)?.policies.iter().find_map(|p| match p {
                hcn::NetworkPolicy::DrMacAddress(d) => Some(d.address),
                _ => None,
            })
        })
    }
}

fn find_network(node: &super::super::node::Node, name: &str) -> Result<Guid, HnsError> {
    node.read(|s| s.networks().find(|n| n.name == name).map(|n| n.id))
        .ok_or_else(|| fail(format!("{}: flanneld made no network {name}", node.name)))
}

fn fail(message: String) -> HnsError {
    HnsError::new(HResult::E_FAIL, message)
}
