//! sdnbridge, sdnoverlay and nat (microsoft/windows-container-networking): one plugin whose
//! behaviour the config's `type` selects. Unlike win-*, the network is created from the config
//! when absent; policies come from `AdditionalArgs`; the result names the CNI interface.

use std::net::IpAddr;

use hcn::network::{IpamType, NetworkType};
use hcn::policy::{AclAction, AclDirection, AclList, AclPolicySetting, PortRange};
use hcn::{
    Dns, Endpoint, EndpointPolicy, IpConfig as HcnIpConfig, Ipam, Network, NetworkPolicy, Route,
    Subnet,
};
use hns_client::Client;
use ipnet::IpNet;

use crate::attachment::{
    Driver, endpoint_addresses, endpoint_dns, endpoint_gateway_for, endpoint_mac,
};
use crate::config::NetConf;
use crate::dns::{self, RuntimeOptions};
use crate::error::{CniError, HnsContext};
use crate::plugins::win_bridge::bridge_gateway;
use crate::plugins::windows::default_route;
use crate::policy::{self, PortMapping};
use crate::protocol::{Args, Request};
use crate::result::{self, CniResult, Interface, IpConfig};
use crate::state::Store;

/// `optionalFlags`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OptionalFlags {
    pub local_routed_port_mapping: bool,
    pub allow_acl_port_mapping: bool,
    pub force_bridge_gateway: bool,
    pub enable_dual_stack: bool,
    pub loopback_dsr: bool,
    pub gateway_from_additional_routes: bool,
}

/// An sdnbridge / sdnoverlay / nat config (`cni.NetworkConfig`).
#[derive(Clone, Debug)]
pub struct Sdn {
    pub conf: NetConf,
    /// The HCN network type the config's `type` maps to (`MapCniTypeToHcnType`).
    pub network_type: NetworkType,
    /// `ipam.subnet`: the network's subnet when it is created, and the default gateway (+1).
    pub subnet: Option<IpNet>,
    /// `ipam.routes[].{dst,gw}`; the first `gw` is the gateway.
    pub ipam_routes: Vec<(Option<IpNet>, Option<IpAddr>)>,
    /// `ipam.ipAddress`: a static address when no IPAM plugin is named.
    pub static_ip: Option<IpAddr>,
    pub dns: Dns,
    pub flags: OptionalFlags,
    pub port_mappings: Vec<PortMapping>,
    /// `additionalRoutes[].{dst,gw}`: with `gatewayFromAdditionalRoutes`, the default routes
    /// (`0.0.0.0/0`, `::/0`) among them give the gateways; they are not endpoint routes.
    pub additional_routes: Vec<(IpNet, Option<IpAddr>)>,
    /// `AdditionalArgs` entries named `EndpointPolicy`.
    pub endpoint_policies: Vec<EndpointPolicy>,
    /// `AdditionalArgs` entries named `NetworkPolicy` (used when the network is created).
    pub network_policies: Vec<NetworkPolicy>,
}

/// The network type of an sdn* `type`: `nat`, `sdnbridge`/`L2Bridge`, `sdnoverlay`/`Overlay`.
pub fn network_type_of(cni_type: &str) -> Option<NetworkType> {
    let t = cni_type.to_ascii_lowercase();
    match t.as_str() {
        "nat" => Some(NetworkType::Nat),
        "sdnbridge" | "l2bridge" => Some(NetworkType::L2Bridge),
        "sdnoverlay" | "overlay" => Some(NetworkType::Overlay),
        _ => None,
    }
}

impl Sdn {
    pub fn parse(conf: &NetConf) -> Result<Sdn, CniError> {
        let root = conf.root();
        let network_type = network_type_of(&conf.plugin_type).ok_or_else(|| {
            CniError::config(
                "type",
                format!("Unsupported CNI config 'type' \"{}\"; use sdnbridge (L2Bridge), sdnoverlay (Overlay) or nat", conf.plugin_type),
            )
        })?;
        let ipam = root.obj("ipam")?;
        let (subnet, static_ip, ipam_routes) = match &ipam {
            None => (None, None, Vec::new()),
            Some(i) => (
                i.parse::<IpNet>("subnet")?.map(|n| n.trunc()),
                i.parse::<IpAddr>("ipAddress")?,
                i.objects("routes")?
                    .iter()
                    .map(|r| Ok((r.parse::<IpNet>("dst")?, r.parse::<IpAddr>("gw")?)))
                    .collect::<Result<Vec<_>, CniError>>()?,
            ),
        };
        let dns = dns::endpoint_dns(&root, RuntimeOptions::Applied)?;
        let runtime = root.obj("runtimeConfig")?;
        let mut flags = OptionalFlags::default();
        if let Some(f) = root.obj("optionalFlags")? {
            flags = OptionalFlags {
                local_routed_port_mapping: f.bool("localRoutedPortMapping")?,
                allow_acl_port_mapping: f.bool("allowAclPortMapping")?,
                force_bridge_gateway: f.bool("forceBridgeGateway")?,
                enable_dual_stack: f.bool("enableDualStack")?,
                loopback_dsr: f.bool("loopbackDSR")?,
                gateway_from_additional_routes: f.bool("gatewayFromAdditionalRoutes")?,
            };
        }
        let additional_routes = root
            .objects("additionalRoutes")?
            .iter()
            .filter_map(|r| match r.parse::<IpNet>("dst") {
                Ok(Some(dst)) => Some(r.parse::<IpAddr>("gw").map(|gw| (dst, gw))),
                Ok(None) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<Vec<_>, CniError>>()?;
        Ok(Sdn {
            network_type,
            subnet,
            ipam_routes,
            static_ip,
            dns,
            flags,
            port_mappings: policy::port_mappings(
                runtime.as_ref(),
                policy::UnknownProtocol::Refuse,
            )?,
            additional_routes,
            endpoint_policies: policy::endpoint_policies(&root, "AdditionalArgs")?,
            network_policies: policy::network_policies(&root, "AdditionalArgs")?,
            conf: conf.clone(),
        })
    }

    /// The gateway for `ip` (or, without one, for the config's subnet): `.2` when forced
    /// (IPv4 only with `enableDualStack`, as `allocateIpam` does), else the gateway IPAM gave
    /// the address, else the first `ipam.routes[].gw`, else (`gatewayFromAdditionalRoutes`)
    /// the gateway of the first default route in `additionalRoutes`, else the subnet's first
    /// address, else what the network says. Only gateways of the address's family are taken.
    fn gateway(&self, net: &Network, ip: Option<&IpConfig>) -> Option<IpAddr> {
        let v4 = ip
            .map(|c| c.address.addr().is_ipv4())
            .or_else(|| self.subnet.map(|s| s.addr().is_ipv4()));
        let fits = |a: &IpAddr| v4.is_none_or(|v4| a.is_ipv4() == v4);
        let own_subnet = self.subnet.filter(|s| fits(&s.addr()));
        let subnet = own_subnet
            .or_else(|| ip.map(|c| c.address.trunc()))
            .or_else(|| {
                net.subnets()
                    .filter_map(|s| s.ip_address_prefix)
                    .find(|p| fits(&p.addr()))
            });
        let force_applies = !(self.flags.enable_dual_stack && v4 == Some(false));
        if self.flags.force_bridge_gateway && force_applies {
            return subnet.map(bridge_gateway);
        }
        // With an address from IPAM, IPAM's gateway wins (`allocateIpam` overwrites the
        // gateway `GetNetworkInfo` took from `ipam.routes`).
        if let Some(gw) = ip.and_then(|c| c.gateway).filter(fits) {
            return Some(gw);
        }
        if let Some(gw) = self.ipam_routes.iter().filter_map(|(_, gw)| *gw).find(fits) {
            return Some(gw);
        }
        if self.flags.gateway_from_additional_routes
            && let Some(gw) = self
                .additional_routes
                .iter()
                .filter(|(dst, _)| dst.prefix_len() == 0)
                .filter_map(|(_, gw)| *gw)
                .find(fits)
        {
            return Some(gw);
        }
        if let Some(s) = own_subnet {
            return Some(first_host(s));
        }
        ip.and_then(|c| c.gateway)
            .or_else(|| {
                ip.and_then(|c| net.subnet_for(c.address.addr()))
                    .and_then(Subnet::gateway)
            })
            .or_else(|| net.subnets().filter_map(Subnet::gateway).find(|g| fits(g)))
    }

    /// The network document created when the network does not exist.
    fn network_doc(&self) -> Result<Network, CniError> {
        let subnet = self.subnet.ok_or_else(|| {
            CniError::config(
                "ipam.subnet",
                format!("missing; network \"{}\" does not exist and {} creates it from ipam.subnet (e.g. \"10.244.1.0/24\")", self.conf.name, self.conf.plugin_type),
            )
        })?;
        let gw = self
            .ipam_routes
            .iter()
            .find_map(|(_, gw)| *gw)
            .unwrap_or_else(|| first_host(subnet));
        Ok(Network {
            name: self.conf.name.clone(),
            network_type: self.network_type,
            policies: self.network_policies.clone(),
            ipams: vec![Ipam {
                ipam_type: Some(IpamType::Static),
                subnets: vec![Subnet {
                    ip_address_prefix: Some(subnet),
                    routes: vec![Route {
                        next_hop: Some(gw),
                        destination_prefix: Some(default_route(gw)),
                        metric: 0,
                    }],
                    ..Subnet::default()
                }],
            }],
            ..Network::default()
        })
    }
}

impl Sdn {
    /// Whether this plugin may give an endpoint both families on its network type: always on
    /// L2Bridge; on Overlay only where HNS reports `LinuxIPv6Overlay`, else refused in Windows'
    /// words; never on NAT.
    async fn check_dual_stack(&self, client: &Client) -> Result<(), CniError> {
        let refuse = |why: String| Err(CniError::config("optionalFlags.enableDualStack", why));
        match self.network_type {
            NetworkType::L2Bridge => Ok(()),
            NetworkType::Overlay => {
                let features = client
                    .get_supported_features()
                    .await
                    .hns("read HNS's supported features")?;
                if features.ipv6_overlay {
                    return Ok(());
                }
                refuse(format!(
                    "Overlay (VXLAN) networks on Windows do not support dual-stack networking today: this HNS does not report LinuxIPv6Overlay, so {} gives no IPv6; use type sdnbridge on L2Bridge or drop enableDualStack",
                    self.conf.plugin_type
                ))
            }
            other => refuse(format!(
                "dual stack works only on L2Bridge networks (and Overlay where HNS carries IPv6), and {} makes {other} networks; use type sdnbridge or drop enableDualStack",
                self.conf.plugin_type
            )),
        }
    }
}

/// The first host address of a subnet (`subnet + 1`).
fn first_host(s: IpNet) -> IpAddr {
    match s.network() {
        IpAddr::V4(v4) => IpAddr::from(u32::from(v4).wrapping_add(1).to_be_bytes()),
        IpAddr::V6(v6) => IpAddr::from(u128::from(v6).wrapping_add(1).to_be_bytes()),
    }
}

impl Sdn {
    /// The policies of `runtimeConfig.portMappings` (windows-container-networking
    /// `GetEndpointInfo`): per mapping a PortMapping (`LocalRoutedVip` when asked for), with
    /// `enableDualStack` a second one flagged IPv6 without the host IP, and with
    /// `allowAclPortMapping` an inbound allow ACL for the container port at priority 1000.
    pub fn port_mapping_policies(&self) -> Vec<EndpointPolicy> {
        const NAT_LOCAL_ROUTED_VIP: u32 = 1;
        const NAT_IPV6: u32 = 2;
        const PORT_MAPPING_ACL_PRIORITY: u16 = 1000;
        let flags = if self.flags.local_routed_port_mapping {
            NAT_LOCAL_ROUTED_VIP
        } else {
            0
        };
        let mut policies = Vec::new();
        for m in &self.port_mappings {
            policies.push(m.policy(flags));
            if self.flags.enable_dual_stack {
                let v6 = PortMapping {
                    host_ip: None,
                    ..m.clone()
                };
                policies.push(v6.policy(flags | NAT_IPV6));
            }
            // The config reader keeps protocol numbers within 0-255, so every mapping has one.
            if self.flags.allow_acl_port_mapping
                && let Ok(protocol) = u8::try_from(m.protocol)
            {
                policies.push(EndpointPolicy::Acl(AclPolicySetting {
                    id: String::new(),
                    protocols: AclList::from(vec![protocol]),
                    action: AclAction::Allow,
                    direction: AclDirection::In,
                    local_addresses: AclList::any(),
                    remote_addresses: AclList::any(),
                    local_ports: AclList::from(vec![PortRange::one(m.container_port)]),
                    remote_ports: AclList::any(),
                    rule_type: None,
                    priority: PORT_MAPPING_ACL_PRIORITY,
                }));
            }
        }
        policies
    }
}

impl Sdn {
    /// The addresses an endpoint gets of `ips` (`allocateIpam`): with `enableDualStack` the
    /// first IPv4 and the first IPv6 (IPAM's `IP4` and `IP6`), else the first IPv4 (or, when
    /// IPAM gave none, its first address).
    pub fn chosen(&self, ips: &[IpConfig]) -> Vec<IpConfig> {
        if !self.flags.enable_dual_stack {
            return result::primary(ips).cloned().into_iter().collect();
        }
        let v4 = ips.iter().find(|c| c.address.addr().is_ipv4());
        let v6 = ips.iter().find(|c| c.address.addr().is_ipv6());
        v4.into_iter().chain(v6).cloned().collect()
    }

    /// The endpoint document (`GetEndpointInfo` + `allocateIpam` + `GetHostComputeEndpoint`):
    /// one IpConfiguration per chosen address (or `ipam.ipAddress`), a default route per
    /// family via that family's gateway (`additionalRoutes` only choose gateways); the
    /// `AdditionalArgs` policies, then the port mappings'. Loopback DSR, which asks HNS, is left to the caller.
    pub fn endpoint_doc(
        &self,
        net: &Network,
        name: &str,
        ips: &[IpConfig],
        pod_namespace: Option<&str>,
    ) -> Endpoint {
        let mut policies = self.endpoint_policies.clone();
        policies.extend(self.port_mapping_policies());
        let mut assigned = self.chosen(ips);
        if assigned.is_empty()
            && let Some(address) = self.static_address(net)
        {
            assigned.push(IpConfig {
                interface: None,
                address,
                gateway: None,
            });
        }
        let routes: Vec<Route> = if assigned.is_empty() {
            // HNS assigns the address: the gateway comes from the config or the network.
            self.gateway(net, None)
                .map(default_via)
                .into_iter()
                .collect()
        } else {
            assigned
                .iter()
                .filter_map(|c| self.gateway(net, Some(c)).map(default_via))
                .collect()
        };
        Endpoint {
            name: name.to_string(),
            host_compute_network: net.id,
            policies,
            ip_configurations: assigned
                .iter()
                .map(|c| HcnIpConfig {
                    ip_address: Some(c.address.addr()),
                    prefix_length: c.address.prefix_len(),
                })
                .collect(),
            dns: self.pod_dns(pod_namespace),
            routes,
            ..Endpoint::default()
        }
    }

    /// `ipam.ipAddress` with the prefix length of `ipam.subnet` or of the network's subnet.
    fn static_address(&self, net: &Network) -> Option<IpNet> {
        let ip = self.static_ip?;
        let len = self
            .subnet
            .or_else(|| net.subnet_for(ip)?.ip_address_prefix)?
            .prefix_len();
        IpNet::new(ip, len).ok()
    }

    /// The config's DNS with the pod's namespace before the first search domain.
    fn pod_dns(&self, pod_namespace: Option<&str>) -> Dns {
        let mut dns = self.dns.clone();
        if let (Some(ns), Some(first)) = (pod_namespace, dns.search.first_mut())
            && !ns.is_empty()
        {
            *first = format!("{ns}.{first}");
        }
        dns
    }
}

/// The default route of `gw`'s family via `gw`.
fn default_via(gw: IpAddr) -> Route {
    Route {
        next_hop: Some(gw),
        destination_prefix: Some(default_route(gw)),
        metric: 0,
    }
}

impl Driver for Sdn {
    fn conf(&self) -> &NetConf {
        &self.conf
    }

    async fn find_network(&self, client: &Client) -> Result<Option<Network>, CniError> {
        let name = &self.conf.name;
        let Some(net) = client
            .get_network_by_name(name)
            .await
            .hns("look up the network")?
        else {
            return Ok(None);
        };
        if net.network_type != self.network_type {
            return Err(CniError::config(
                "type",
                format!(
                    "network \"{name}\" exists with type {}, but {} makes {} networks",
                    net.network_type, self.conf.plugin_type, self.network_type
                ),
            ));
        }
        Ok(Some(net))
    }

    /// With `enableDualStack` the network must exist and be L2Bridge (common/core/network.go
    /// `Add`): a dual-stack network has both subnets, which the config cannot describe. An
    /// Overlay network is taken too where HNS reports `LinuxIPv6Overlay` (no Windows build does;
    /// hnsd's `unrestricted` profile lifts the limitation), since then HNS carries the IPv6
    /// half inside VXLAN as it carries IPv4.
    async fn ensure_network(
        &self,
        req: &Request<'_>,
        client: &Client,
    ) -> Result<Network, CniError> {
        if self.flags.enable_dual_stack {
            self.check_dual_stack(client).await?;
        }
        if let Some(net) = self.find_network(client).await? {
            return Ok(net);
        }
        if self.flags.enable_dual_stack {
            return Err(CniError::config(
                "optionalFlags.enableDualStack",
                format!(
                    "network \"{}\" does not exist; with enableDualStack it is not created from the config: create the {} network with its IPv4 and IPv6 subnets first",
                    self.conf.name, self.network_type
                ),
            ));
        }
        let doc = self.network_doc()?;
        // One creator at a time on this node; a loser of a race finds the winner's network.
        let store = Store::open(&self.conf.state_dir(req.env), &self.conf.name)?;
        let _lock = store.lock_network()?;
        if let Some(net) = self.find_network(client).await? {
            return Ok(net);
        }
        client.create_network(&doc).await.hns("create the network")
    }

    async fn endpoint(
        &self,
        req: &Request<'_>,
        client: &Client,
        net: &Network,
        name: &str,
        ips: &[IpConfig],
    ) -> Result<Endpoint, CniError> {
        let pod_namespace = req.args.cni_arg("K8S_POD_NAMESPACE");
        let mut doc = self.endpoint_doc(net, name, ips, pod_namespace);
        if self.flags.loopback_dsr
            && let Some(address) = doc.ip_configurations.first().and_then(|c| c.ip_address)
        {
            let features = client
                .get_supported_features()
                .await
                .hns("read HNS's supported features")?;
            if features.dsr {
                policy::apply_loopback_dsr(&mut doc.policies, address);
            }
        }
        Ok(doc)
    }

    /// `interfaces:[{name: CNI_IFNAME, mac}]`; the endpoint's addresses (one, or with
    /// `enableDualStack` one per family, as `GetCurrResult` reports them) on interface 0, each
    /// with its family's gateway.
    fn result(&self, args: &Args, net: &Network, ep: &Endpoint) -> CniResult {
        let all: Vec<IpConfig> = endpoint_addresses(net, ep)
            .into_iter()
            .map(|address| IpConfig {
                interface: Some(0),
                address,
                gateway: endpoint_gateway_for(ep, address.addr()),
            })
            .collect();
        CniResult {
            interfaces: vec![Interface {
                name: args.ifname.clone(),
                mac: endpoint_mac(ep),
                ..Interface::default()
            }],
            ips: self.chosen(&all),
            routes: Vec::new(),
            dns: endpoint_dns(ep),
        }
    }

    /// sdn* create the network on ADD, so only hnsd has to answer.
    async fn status(&self, client: &Client) -> Result<(), CniError> {
        self.find_network(client).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_map_as_windows_container_networking_maps_them() {
        assert_eq!(network_type_of("nat"), Some(NetworkType::Nat));
        assert_eq!(network_type_of("NAT"), Some(NetworkType::Nat));
        assert_eq!(network_type_of("sdnbridge"), Some(NetworkType::L2Bridge));
        assert_eq!(network_type_of("L2Bridge"), Some(NetworkType::L2Bridge));
        assert_eq!(network_type_of("sdnoverlay"), Some(NetworkType::Overlay));
        assert_eq!(network_type_of("win-bridge"), None);
    }

    #[test]
    fn gateway_is_subnet_plus_one_unless_forced_or_routed() {
        let conf = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"sdnbridge","ipam":{"subnet":"10.0.0.0/24"}}"#).unwrap();
        let mut s = Sdn::parse(&conf).unwrap();
        let net = Network::default();
        assert_eq!(s.gateway(&net, None), Some("10.0.0.1".parse().unwrap()));
        s.flags.force_bridge_gateway = true;
        assert_eq!(s.gateway(&net, None), Some("10.0.0.2".parse().unwrap()));
        s.flags.force_bridge_gateway = false;
        s.ipam_routes = vec![(None, Some("10.0.0.254".parse().unwrap()))];
        assert_eq!(s.gateway(&net, None), Some("10.0.0.254".parse().unwrap()));
    }

    // cni/cni.go GetCurrResult with enableDualStack (GetDualStackAddresses): the IPv4 and the
    // IPv6 address of the endpoint, both on interface 0, each with its family's gateway.
    #[test]
    fn get_curr_result_dual_stack_reports_both_families() {
        let conf = NetConf::parse(br#"{"cniVersion":"1.0.0","name":"n","type":"sdnbridge","optionalFlags":{"enableDualStack":true}}"#).unwrap();
        let s = Sdn::parse(&conf).unwrap();
        let ep: Endpoint = serde_json::from_value(serde_json::json!({
            "IpConfigurations": [{"IpAddress": "10.0.0.5", "PrefixLength": 16}, {"IpAddress": "fd00::5", "PrefixLength": 64}],
            "Routes": [{"NextHop": "10.0.0.1", "DestinationPrefix": "0.0.0.0/0"}, {"NextHop": "fd00::1", "DestinationPrefix": "::/0"}]
        }))
        .unwrap();
        let args = Args {
            command: crate::protocol::Command::Add,
            container_id: "c1".into(),
            netns: String::new(),
            ifname: "eth0".into(),
            args: String::new(),
            path: String::new(),
        };
        let r = s.result(&args, &Network::default(), &ep);
        let ips: Vec<(String, Option<IpAddr>, Option<usize>)> = r
            .ips
            .iter()
            .map(|c| (c.address.to_string(), c.gateway, c.interface))
            .collect();
        assert_eq!(
            ips,
            [
                (
                    "10.0.0.5/16".into(),
                    Some("10.0.0.1".parse().unwrap()),
                    Some(0)
                ),
                (
                    "fd00::5/64".into(),
                    Some("fd00::1".parse().unwrap()),
                    Some(0)
                ),
            ]
        );
        assert_eq!(r.interfaces[0].name, "eth0");
    }
}
