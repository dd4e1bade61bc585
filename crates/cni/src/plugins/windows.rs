//! What win-bridge and win-overlay share (containernetworking/plugins `pkg/hns`): the NetConf,
//! policies in either API version, DNS and its runtime override, loopback DSR, the result.

use std::net::IpAddr;

use hcn::{Dns, Endpoint, EndpointPolicy, IpConfig as HcnIpConfig, Network, Route};
use hns_client::Client;
use ipnet::IpNet;

use crate::attachment::{endpoint_address, endpoint_dns, endpoint_gateway, endpoint_mac};
use crate::config::NetConf;
use crate::dns::{self, RuntimeOptions};
use crate::error::{CniError, HnsContext};
use crate::policy::{self, PortMapping};
use crate::protocol::Args;
use crate::result::{CniResult, Interface, IpConfig};

/// The `pkg/hns.NetConf` keys.
#[derive(Clone, Debug)]
pub struct WinConf {
    pub conf: NetConf,
    /// `apiVersion`: 2 is HCN (containerd), anything else HNS v1 (dockershim). Here both go to
    /// hnsd's v2 API; the version only says how `policies` values are written, and both
    /// spellings are read either way.
    pub api_version: u64,
    /// `policies` entries named `EndpointPolicy`.
    pub policies: Vec<EndpointPolicy>,
    /// `dns`, with `runtimeConfig.dns.servers` / `.searches` applied (`GetDNS`).
    pub dns: Dns,
    /// `runtimeConfig.portMappings`.
    pub port_mappings: Vec<PortMapping>,
    /// `loopbackDSR`.
    pub loopback_dsr: bool,
}

impl WinConf {
    pub fn parse(conf: &NetConf) -> Result<WinConf, CniError> {
        let root = conf.root();
        let api_version = root.uint("apiVersion")?.unwrap_or(0);
        let policies = policy::endpoint_policies(&root, "policies")?;
        let dns = dns::endpoint_dns(&root, RuntimeOptions::Ignored)?;
        let runtime = root.obj("runtimeConfig")?;
        Ok(WinConf {
            api_version,
            policies,
            dns,
            port_mappings: policy::port_mappings(runtime.as_ref(), policy::UnknownProtocol::Skip)?,
            loopback_dsr: root.bool("loopbackDSR")?,
            conf: conf.clone(),
        })
    }

    /// The endpoint every win-* plugin builds (`GenerateHcnEndpoint`): name, network, address,
    /// default route via `gateway`, DNS, policies.
    pub fn endpoint(
        &self,
        net: &Network,
        name: &str,
        ip: Option<&IpConfig>,
        gateway: Option<IpAddr>,
        policies: Vec<EndpointPolicy>,
    ) -> Endpoint {
        let ip_configurations = ip
            .map(|c| HcnIpConfig {
                ip_address: Some(c.address.addr()),
                prefix_length: c.address.prefix_len(),
            })
            .into_iter()
            .collect();
        let routes = gateway
            .map(|gw| Route {
                next_hop: Some(gw),
                destination_prefix: Some(default_route(gw)),
                metric: 0,
            })
            .into_iter()
            .collect();
        Endpoint {
            name: name.to_string(),
            host_compute_network: net.id,
            policies,
            ip_configurations,
            dns: self.dns.clone(),
            routes,
            ..Endpoint::default()
        }
    }

    /// Appends the loopback DSR policy when asked for and HNS supports DSR.
    pub async fn apply_loopback_dsr(
        &self,
        client: &Client,
        policies: &mut Vec<EndpointPolicy>,
        ip: Option<&IpConfig>,
    ) -> Result<(), CniError> {
        let Some(ip) = ip.filter(|_| self.loopback_dsr) else {
            return Ok(());
        };
        let features = client
            .get_supported_features()
            .await
            .hns("read HNS's supported features")?;
        if features.dsr {
            policy::apply_loopback_dsr(policies, ip.address.addr());
        }
        Ok(())
    }
}

/// `0.0.0.0/0` or `::/0`, in the family of `gw`.
pub fn default_route(gw: IpAddr) -> IpNet {
    match gw {
        IpAddr::V4(_) => IpNet::V4(ipnet::Ipv4Net::default()),
        IpAddr::V6(_) => IpNet::V6(ipnet::Ipv6Net::default()),
    }
}

/// `ConstructHcnResult`: the endpoint as the one interface (named after the endpoint, with its
/// MAC, no sandbox), its address with the network's prefix length, its gateway, its DNS.
pub fn result(_args: &Args, net: &Network, ep: &Endpoint) -> CniResult {
    CniResult {
        interfaces: vec![Interface {
            name: ep.name.clone(),
            mac: endpoint_mac(ep),
            ..Interface::default()
        }],
        ips: endpoint_address(net, ep)
            .map(|address| IpConfig {
                interface: None,
                address,
                gateway: endpoint_gateway(ep),
            })
            .into_iter()
            .collect(),
        routes: Vec::new(),
        dns: endpoint_dns(ep),
    }
}
