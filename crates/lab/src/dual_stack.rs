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

use std::net::IpAddr;

use hcn::policy::NetAdapterNamePolicySetting;
use hcn::{
    Endpoint, Guid, IpConfig, Ipam, Namespace, NamespaceType, Network, NetworkPolicy, NetworkType,
    Route, Subnet,
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
