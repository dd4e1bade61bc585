//! A dual-stack Windows node as its operator provisions it. flannel's Windows backends lease
//! and route IPv4 only (`hostgw_windows.go` makes `cbr0` with the lease's one subnet and
//! routes `lease.Subnet` via the other node's public IPv4), and win-bridge gives an endpoint
//! only IPAM's first address. Dual-stack Windows pods come from `sdnbridge` with
//! `enableDualStack`, which needs the L2Bridge network made beforehand with both subnets (it
//! refuses to create one). So the operator of a dual-stack L2Bridge node makes that network and
//! the host's bridge endpoint with both gateways before flanneld starts (flanneld keeps a
//! network one of whose subnets is its lease's), routes the other nodes' IPv6 pod prefixes via
//! their IPv6 addresses (what a cloud's route table does for L2Bridge nodes), and gives pods
//! `sdnbridge` with host-local and a range per family. Both local clusters call this.
//!
//! On Overlay no Windows build carries IPv6 (kube-proxy's winkernel and sdnoverlay refuse
//! dual-stack there), so the operator does this only where HNS reports `LinuxIPv6Overlay` (hnsd's
//! `unrestricted` profile, [`overlay_carries_ipv6`]): the Overlay network with both subnets
//! under flannel's VSID before flanneld starts (flanneld keeps it as it keeps cbr0), no bridge
//! endpoint (overlay pods route through the subnet's .1 / ::1, HNS's own gateway), the other
//! nodes' IPv6 pod prefixes as `RemoteSubnetRoute`s to their provider addresses and DR MACs
//! (flannel adds only its IPv4 leases'), and pods from `sdnoverlay` with `enableDualStack`.

use std::net::IpAddr;

use hcn::policy::{
    IsolationIdSetting, NetAdapterNamePolicySetting, RemoteSubnetRoutePolicySetting,
};
use hcn::{
    Endpoint, Guid, IpConfig, Ipam, MacAddress, Namespace, NamespaceType, Network, NetworkFlags,
    NetworkPolicy, NetworkType, RequestType, Route, Subnet, SubnetPolicy,
};
use hns_client::{Client, ClientError};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::sim::agents::flannel::nth;

/// The L2Bridge network of both families: the lease's IPv4 subnet and the node's IPv6 prefix,
/// each with its gateway route (.1 / ::1, as flannel's), on the NIC `nic`.
pub fn network(name: &str, nic: &str, v4: Ipv4Net, v6: Ipv6Net) -> Network {
    let subnet = |p: IpNet| Subnet {
        ip_address_prefix: Some(p),
        routes: vec![Route {
            next_hop: Some(nth(p, 1)),
            destination_prefix: Some(match p {
                IpNet::V4(_) => IpNet::V4(Default::default()),
                IpNet::V6(_) => IpNet::V6(Default::default()),
            }),
            metric: 0,
        }],
        ..Subnet::default()
    };
    Network {
        name: name.to_string(),
        network_type: NetworkType::L2Bridge,
        ipams: vec![Ipam {
            ipam_type: Some(hcn::network::IpamType::Static),
            subnets: vec![subnet(IpNet::V4(v4)), subnet(IpNet::V6(v6))],
        }],
        policies: vec![NetworkPolicy::NetAdapterName(NetAdapterNamePolicySetting {
            network_adapter_name: nic.to_string(),
        })],
        ..Network::default()
    }
}

/// flannel's bridge endpoint `<name>_ep` with both gateways the pods route through: .2 and ::2.
pub fn bridge_endpoint(name: &str, network: Guid, v4: Ipv4Net, v6: Ipv6Net) -> Endpoint {
    let ip = |p: IpNet| IpConfig {
        ip_address: Some(nth(p, 2)),
        prefix_length: p.prefix_len(),
    };
    Endpoint {
        name: format!("{name}_ep"),
        host_compute_network: network,
        ip_configurations: vec![ip(IpNet::V4(v4)), ip(IpNet::V6(v6))],
        ..Endpoint::default()
    }
}

/// The IPv6 gateway of the node's pods: the bridge endpoint's ::2.
pub fn pod_gateway_v6(v6: Ipv6Net) -> IpAddr {
    nth(IpNet::V6(v6), 2)
}

/// Makes the dual-stack network `name` and its bridge endpoint on the host through `hns`; the
/// network's ID.
pub async fn provision(
    hns: &Client,
    name: &str,
    nic: &str,
    v4: Ipv4Net,
    v6: Ipv6Net,
) -> Result<Guid, ClientError> {
    let net = hns.create_network(&network(name, nic, v4, v6)).await?;
    let ep = hns
        .create_endpoint(&bridge_endpoint(name, net.id, v4, v6))
        .await?;
    let namespaces = hns.list_namespaces().await?;
    let host = match namespaces
        .iter()
        .find(|n| n.namespace_type == Some(NamespaceType::Host))
    {
        Some(h) => h.id,
        None => {
            hns.create_namespace(&Namespace {
                namespace_type: Some(NamespaceType::Host),
                ..Namespace::default()
            })
            .await?
            .id
        }
    };
    hns.add_namespace_endpoint(host, ep.id).await?;
    Ok(net.id)
}

/// Whether the node's HNS carries IPv6 on Overlay networks (`LinuxIPv6Overlay` in its supported
/// features): only then does an operator make a dual-stack Overlay node.
pub async fn overlay_carries_ipv6(hns: &Client) -> Result<bool, ClientError> {
    Ok(hns.get_supported_features().await?.ipv6_overlay)
}

/// The Overlay network of both families, as flanneld's vxlan backend asks for its lease
/// (`vni` as each subnet's VSID, non-persistent, gateway route via .1) with the node's IPv6
/// prefix beside it (gateway ::1).
pub fn overlay_network(name: &str, nic: &str, v4: Ipv4Net, v6: Ipv6Net, vni: u32) -> Network {
    let mut net = network(name, nic, v4, v6);
    net.network_type = NetworkType::Overlay;
    net.flags = NetworkFlags::ENABLE_NON_PERSISTENT;
    for ipam in &mut net.ipams {
        for subnet in &mut ipam.subnets {
            subnet.policies = vec![SubnetPolicy::Vsid(IsolationIdSetting { isolation_id: vni })];
        }
    }
    net
}

/// Makes the dual-stack Overlay network `name` through `hns` (before flanneld, which adopts
/// it); the network's ID.
pub async fn provision_overlay(
    hns: &Client,
    name: &str,
    nic: &str,
    v4: Ipv4Net,
    v6: Ipv6Net,
    vni: u32,
) -> Result<Guid, ClientError> {
    Ok(hns
        .create_network(&overlay_network(name, nic, v4, v6, vni))
        .await?
        .id)
}

/// Another Windows node of a dual-stack Overlay cluster as the operator routes to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteNode {
    /// Its IPv6 pod prefix.
    pub prefix: Ipv6Net,
    /// Its provider address (the node's IPv4, the outer VXLAN destination).
    pub provider_address: IpAddr,
    /// Its network's DR MAC (what flanneld leases as its VtepMAC).
    pub dr_mac: MacAddress,
}

/// The `RemoteSubnetRoute` to `remote`'s IPv6 pods: inside VXLAN `vni`, as flannel's for an
/// IPv4 lease.
pub fn remote_subnet_route_v6(remote: &RemoteNode, vni: u16) -> NetworkPolicy {
    NetworkPolicy::RemoteSubnetRoute(RemoteSubnetRoutePolicySetting {
        destination_prefix: IpNet::V6(remote.prefix),
        isolation_id: vni,
        provider_address: remote.provider_address,
        distributed_router_mac_address: remote.dr_mac,
    })
}

/// The DR MAC of the network `name` on a node (hnsd gives every Overlay network one).
pub async fn dr_mac(hns: &Client, name: &str) -> Result<Option<MacAddress>, ClientError> {
    let net = hns.get_network_by_name(name).await?;
    Ok(net.and_then(|n| {
        n.policies.iter().find_map(|p| match p {
            NetworkPolicy::DrMacAddress(d) => Some(d.address),
            _ => None,
        })
    }))
}

/// Adds to the Overlay network `name` the routes to the other nodes' IPv6 pods that it does
/// not have yet.
pub async fn route_remote_v6(
    hns: &Client,
    name: &str,
    remotes: &[RemoteNode],
    vni: u16,
) -> Result<(), ClientError> {
    let Some(net) = hns.get_network_by_name(name).await? else {
        return Err(ClientError::Protocol(format!(
            "no network \"{name}\" to route the other nodes' IPv6 pods on"
        )));
    };
    let new: Vec<NetworkPolicy> = remotes
        .iter()
        .map(|r| remote_subnet_route_v6(r, vni))
        .filter(|p| !net.policies.contains(p))
        .collect();
    if new.is_empty() {
        return Ok(());
    }
    hns.network_policy(net.id, RequestType::Add, new).await?;
    Ok(())
}
