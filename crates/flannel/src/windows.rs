//! The Windows node's backends, through hnsd's API, as flannel's `hostgw_windows.go` and
//! `vxlan_*_windows.go` do them: host-gw makes the L2Bridge network (`cbr0`) and the bridge
//! endpoint `cbr0_ep` at the subnet's .2 attached to the host, and routes every other node's
//! subnet via its public IP on the management vNIC; vxlan makes the Overlay network
//! (`flannel.<VNI>`) with the VSID, `NetAdapterName` and `HostRoute`, reads the DR MAC into the
//! lease, and keeps one `RemoteSubnetRoute` per remote lease. An existing network of the right
//! shape is adopted untouched, so a restarted flanneld changes nothing.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use hcn::policy::{
    HostRoutePolicySetting, IsolationIdSetting, NetAdapterNamePolicySetting,
    RemoteSubnetRoutePolicySetting,
};
use hcn::{
    Endpoint, IpConfig, Ipam, MacAddress, Namespace, NamespaceType, Network, NetworkFlags,
    NetworkPolicy, NetworkType, RequestType, Route, Subnet, SubnetPolicy,
};
use host::link::RouteEntry;
use ipnet::{IpNet, Ipv4Net};

use crate::config::{BackendType, NetConf};
use crate::lease::{Lease, Mac, VxlanData};
use crate::stack::{Kernel, NodeStack};
use crate::{Error, Node};

/// The smallest VNI Windows takes (VSIDs below 4096 are reserved).
pub const MIN_VNI: u32 = 4096;
/// The only VXLAN port HNS speaks.
pub const VXLAN_PORT: u16 = 4789;
/// How long flanneld waits for hnsd to make the management vNIC.
const VNIC_WAIT: Duration = Duration::from_secs(45);

/// The Windows backend of one node.
pub struct WindowsBackend {
    hns: hns_client::Client,
    /// The node's own IP stack (the kernel; a simulated host in the in-memory cluster).
    stack: Box<dyn NodeStack>,
    conf: NetConf,
    node: Node,
    /// The HNS network name.
    pub name: String,
    vni: u32,
    /// The management vNIC's interface index, once it exists.
    vnic: Option<u32>,
    subnet: Option<Ipv4Net>,
}

/// Refuses what flannel refuses on Windows, with its words.
pub fn check(conf: &NetConf) -> Result<(), Error> {
    let b = &conf.backend;
    if b.backend_type == BackendType::Vxlan {
        let vni = b.vni.unwrap_or(MIN_VNI);
        if vni < MIN_VNI {
            return Err(Error::Config(format!(
                "Backend.VNI: VNI [{vni}] must be greater than or equal to {MIN_VNI} on Windows"
            )));
        }
        if let Some(p) = b.port.filter(|p| *p != VXLAN_PORT) {
            return Err(Error::Config(format!(
                "Backend.Port: Port [{p}] is not supported on Windows; only {VXLAN_PORT} is"
            )));
        }
    }
    if b.gbp {
        return Err(Error::Config(
            "Backend.GBP: GBP is not supported on Windows; remove it".into(),
        ));
    }
    if b.direct_routing {
        return Err(Error::Config(
            "Backend.DirectRouting: DirectRouting is not supported on Windows; remove it".into(),
        ));
    }
    Ok(())
}

impl WindowsBackend {
    /// A backend for `conf` through `hns`; `check` it first.
    pub fn new(hns: hns_client::Client, conf: NetConf, node: Node) -> WindowsBackend {
        WindowsBackend::on_stack(hns, Box::new(Kernel), conf, node)
    }

    /// The backend of a node whose own IP stack is `stack`.
    pub fn on_stack(
        hns: hns_client::Client,
        stack: Box<dyn NodeStack>,
        conf: NetConf,
        node: Node,
    ) -> WindowsBackend {
        let vni = conf.backend.vni.unwrap_or(MIN_VNI);
        let name = conf
            .backend
            .name
            .clone()
            .unwrap_or_else(|| match conf.backend.backend_type {
                BackendType::HostGw => "cbr0".into(),
                BackendType::Vxlan => format!("flannel.{vni}"),
            });
        WindowsBackend {
            hns,
            stack,
            conf,
            node,
            name,
            vni,
            vnic: None,
            subnet: None,
        }
    }

    /// The vxlan data to lease before the network exists (no VtepMAC yet).
    pub fn initial_data(&self) -> Option<VxlanData> {
        self.conf.initial_vxlan(self.vni)
    }

    /// The MTU for subnet.env: the NIC's, less VXLAN's overhead on vxlan.
    pub fn mtu(&self) -> u32 {
        self.conf.pod_mtu(self.node.mtu)
    }

    /// Makes (or adopts) the node's network for `lease`; the vxlan data to publish.
    pub async fn setup(&mut self, lease: &Lease) -> Result<Option<VxlanData>, Error> {
        self.subnet = Some(lease.subnet);
        let want = self.network(lease.subnet);
        let net = match self.hns.get_network_by_name(&self.name).await? {
            Some(have) if same_shape(&have, &want) => {
                tracing::info!(network = %self.name, "adopting the existing HNS network");
                have
            }
            Some(have) => {
                tracing::warn!(
                    network = %self.name,
                    "replacing HNS network {}: it is {:?} {:?}, this node needs {:?} {}",
                    have.name,
                    have.network_type,
                    have.subnets().filter_map(|s| s.ip_address_prefix).collect::<Vec<_>>(),
                    want.network_type,
                    lease.subnet
                );
                self.hns.delete_network(have.id).await.map_err(|e| {
                    Error::Hns(format!(
                        "cannot replace HNS network {} of the wrong shape: {e}; remove its endpoints first",
                        self.name
                    ))
                })?;
                self.hns.create_network(&want).await?
            }
            None => self.hns.create_network(&want).await?,
        };
        self.vnic = Some(self.wait_vnic().await?);
        match self.conf.backend.backend_type {
            BackendType::HostGw => {
                self.bridge_endpoint(&net, lease.subnet).await?;
                self.enable_forwarding(lease.subnet).await?;
                Ok(None)
            }
            BackendType::Vxlan => self.overlay(net, lease.subnet).await.map(Some),
        }
    }

    /// The network flannel asks HNS for.
    fn network(&self, subnet: Ipv4Net) -> Network {
        let vxlan = self.conf.backend.backend_type == BackendType::Vxlan;
        let policies = if vxlan {
            vec![SubnetPolicy::Vsid(IsolationIdSetting {
                isolation_id: self.vni,
            })]
        } else {
            Vec::new()
        };
        Network {
            name: self.name.clone(),
            network_type: if vxlan {
                NetworkType::Overlay
            } else {
                NetworkType::L2Bridge
            },
            flags: if vxlan {
                NetworkFlags::ENABLE_NON_PERSISTENT
            } else {
                NetworkFlags::NONE
            },
            ipams: vec![Ipam {
                ipam_type: Some(hcn::network::IpamType::Static),
                subnets: vec![Subnet {
                    ip_address_prefix: Some(IpNet::V4(subnet)),
                    policies,
                    routes: vec![Route {
                        next_hop: Some(IpAddr::V4(host_of(subnet, 1))),
                        destination_prefix: "0.0.0.0/0".parse().ok(),
                        metric: 0,
                    }],
                    flags: 0,
                }],
            }],
            policies: vec![NetworkPolicy::NetAdapterName(NetAdapterNamePolicySetting {
                network_adapter_name: self.node.iface.clone(),
            })],
            ..Network::default()
        }
    }

    /// Waits for hnsd's management vNIC (the interface that now holds the public IP), saying
    /// what it waits for.
    async fn wait_vnic(&mut self) -> Result<u32, Error> {
        let vnic = hns_client::management_name(&self.node.iface);
        let start = Instant::now();
        let mut said = Instant::now();
        loop {
            if let Some(holder) = self.stack.holder_of(self.node.public_ip)?
                && holder.name == vnic
            {
                return Ok(holder.index);
            }
            if start.elapsed() > VNIC_WAIT {
                return Err(Error::Hns(format!(
                    "hnsd did not make the management vNIC {vnic} with {} for network {} in {} s; \
                     is hnsd running with its data plane on {}?",
                    self.node.public_ip,
                    self.name,
                    VNIC_WAIT.as_secs(),
                    self.node.iface
                )));
            }
            if said.elapsed() > Duration::from_secs(5) {
                tracing::info!(
                    "waiting for hnsd to make the management vNIC {vnic} holding {}",
                    self.node.public_ip
                );
                said = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `<name>_ep` at .2 on the network, attached to the host.
    async fn bridge_endpoint(&self, net: &Network, subnet: Ipv4Net) -> Result<(), Error> {
        let ip = IpAddr::V4(host_of(subnet, 2));
        let name = format!("{}_ep", self.name);
        let existing = self.hns.get_endpoint_by_name(&name).await?;
        let ep = match existing {
            Some(ep) if ep.host_compute_network == net.id && ep.ips().any(|a| a == ip) => ep,
            other => {
                if let Some(old) = other {
                    self.hns.delete_endpoint(old.id).await?;
                }
                self.hns
                    .create_endpoint(&Endpoint {
                        name,
                        host_compute_network: net.id,
                        ip_configurations: vec![IpConfig {
                            ip_address: Some(ip),
                            prefix_length: subnet.prefix_len(),
                        }],
                        ..Endpoint::default()
                    })
                    .await?
            }
        };
        let namespaces = self.hns.list_namespaces().await?;
        let host = namespaces
            .iter()
            .find(|n| n.namespace_type == Some(NamespaceType::Host));
        let host = match host {
            Some(h) if h.endpoint_ids().any(|e| e == ep.id) => return Ok(()),
            Some(h) => h.id,
            None => {
                self.hns
                    .create_namespace(&Namespace {
                        namespace_type: Some(NamespaceType::Host),
                        ..Namespace::default()
                    })
                    .await?
                    .id
            }
        };
        self.hns.add_namespace_endpoint(host, ep.id).await?;
        Ok(())
    }

    /// Turns IPv4 forwarding on for the management vNIC and the interface of `<name>_ep`, as
    /// flannel's host-gw does on Windows (forwarding is per interface there and off by
    /// default): pods reach other nodes by the host routing from the endpoint to the vNIC.
    async fn enable_forwarding(&mut self, subnet: Ipv4Net) -> Result<(), Error> {
        let ep_ip = host_of(subnet, 2);
        let start = Instant::now();
        let ep = loop {
            if let Some(holder) = self.stack.holder_of(ep_ip)? {
                break holder;
            }
            if start.elapsed() > VNIC_WAIT {
                return Err(Error::Hns(format!(
                    "hnsd attached {}_ep to the host but no interface holds {ep_ip}",
                    self.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let vnic = hns_client::management_name(&self.node.iface);
        for name in [vnic, ep.name] {
            self.stack.enable_forwarding(&name)?;
        }
        Ok(())
    }

    /// The Overlay network's `HostRoute`, the route to the node's own pods on the vNIC, and
    /// the DR MAC as the lease's VtepMAC.
    async fn overlay(&mut self, net: Network, subnet: Ipv4Net) -> Result<VxlanData, Error> {
        let has_host_route = net
            .policies
            .iter()
            .any(|p| matches!(p, NetworkPolicy::HostRoute(_)));
        if !has_host_route {
            self.hns
                .network_policy(
                    net.id,
                    RequestType::Add,
                    vec![NetworkPolicy::HostRoute(HostRoutePolicySetting {})],
                )
                .await?;
        }
        let dr_mac = net.policies.iter().find_map(|p| match p {
            NetworkPolicy::DrMacAddress(s) => Some(s.address),
            _ => None,
        });
        let Some(dr_mac) = dr_mac else {
            return Err(Error::Hns(format!(
                "HNS network {} has no DrMacAddress policy to lease as the VtepMAC",
                self.name
            )));
        };
        // The host reaches its own pods through the management vNIC. On Windows this route is
        // HNS's doing, not flannel's: it comes with the HostRoute policy above (flannel only
        // asks for the policy), and it goes with the policy or the network. It belongs in
        // hnsd's data plane, which compiles HostRoute into the switch but does not yet put the
        // route in the host's table; until it does, flanneld adds it (and never removes it).
        let route = RouteEntry {
            destination: IpNet::V4(subnet),
            gateway: None,
            oif: self.vnic,
            metric: None,
        };
        if !self.stack.routes()?.contains(&route) {
            self.stack.add_route(&route, false)?;
        }
        Ok(VxlanData {
            vni: self.vni,
            vtep_mac: Some(Mac(dr_mac.0)),
        })
    }

    /// Brings the node's routes to the other nodes' subnets in line with `remote`.
    pub async fn reconcile(&mut self, remote: &[Lease]) -> Result<(), Error> {
        match self.conf.backend.backend_type {
            BackendType::HostGw => self.host_gw_routes(remote),
            BackendType::Vxlan => self.remote_subnet_routes(remote).await,
        }
    }

    fn host_gw_routes(&mut self, remote: &[Lease]) -> Result<(), Error> {
        let want: Vec<RouteEntry> = remote
            .iter()
            .filter(|l| l.attrs.backend_type == BackendType::HostGw)
            .map(|l| RouteEntry {
                destination: IpNet::V4(l.subnet),
                gateway: Some(IpAddr::V4(l.attrs.public_ip)),
                oif: self.vnic,
                metric: None,
            })
            .collect();
        crate::stack::sync_routes(
            self.stack.as_mut(),
            &self.conf,
            self.subnet,
            &[],
            &want,
            None,
        )
    }

    async fn remote_subnet_routes(&self, remote: &[Lease]) -> Result<(), Error> {
        let Some(net) = self.hns.get_network_by_name(&self.name).await? else {
            return Err(Error::Hns(format!("HNS network {} is gone", self.name)));
        };
        let want: Vec<RemoteSubnetRoutePolicySetting> =
            remote.iter().filter_map(remote_subnet_route).collect();
        let pending = crate::lease::without_vtep_mac(remote);
        // flannel's Windows vxlan backend leases and routes IPv4 only: an IPv6 route on the
        // network is its operator's (a dual-stack Overlay, lab::dual_stack), which flannel
        // neither adds nor removes (upstream touches only each lease's own policy).
        let have: Vec<RemoteSubnetRoutePolicySetting> = net
            .policies
            .iter()
            .filter_map(|p| match p {
                NetworkPolicy::RemoteSubnetRoute(r) if r.destination_prefix.addr().is_ipv4() => {
                    Some(r.clone())
                }
                _ => None,
            })
            .collect();
        let stale: Vec<NetworkPolicy> = have
            .iter()
            .filter(|h| !want.contains(h))
            .filter(|h| {
                !pending
                    .iter()
                    .any(|p| h.destination_prefix == IpNet::V4(*p))
            })
            .map(|h| NetworkPolicy::RemoteSubnetRoute(h.clone()))
            .collect();
        let new: Vec<NetworkPolicy> = want
            .iter()
            .filter(|w| !have.contains(w))
            .map(|w| NetworkPolicy::RemoteSubnetRoute(w.clone()))
            .collect();
        if !stale.is_empty() {
            self.hns
                .network_policy(net.id, RequestType::Remove, stale)
                .await?;
        }
        if !new.is_empty() {
            self.hns
                .network_policy(net.id, RequestType::Add, new)
                .await?;
        }
        Ok(())
    }
}

/// The `RemoteSubnetRoute` for a remote vxlan lease; `None` for leases flannel skips (another
/// backend, a VNI below 4096 or past what HNS stores, no VtepMAC yet).
fn remote_subnet_route(l: &Lease) -> Option<RemoteSubnetRoutePolicySetting> {
    let data = l.attrs.vxlan?;
    let mac = data.vtep_mac?;
    if l.attrs.backend_type != BackendType::Vxlan || data.vni < MIN_VNI {
        return None;
    }
    Some(RemoteSubnetRoutePolicySetting {
        destination_prefix: IpNet::V4(l.subnet),
        isolation_id: u16::try_from(data.vni).ok()?,
        provider_address: IpAddr::V4(l.attrs.public_ip),
        distributed_router_mac_address: MacAddress(mac.0),
    })
}

/// True when `have` is the network `want` describes: the same type, and among its subnets
/// the lease's (prefix, gateway route, VSID). flannel's Windows backends keep a network when
/// any of its subnets matches (`hostgw_windows.go` walks `existingNetwork.Subnets`), so a
/// network an operator made with more subnets (a dual-stack L2Bridge) is kept.
fn same_shape(have: &Network, want: &Network) -> bool {
    let key = |s: &Subnet| (s.ip_address_prefix, s.gateway(), s.vsid());
    let have_keys: Vec<_> = have.subnets().map(key).collect();
    have.network_type == want.network_type
        && want.subnets().map(key).all(|k| have_keys.contains(&k))
}

/// Host number `n` of `subnet`.
pub fn host_of(subnet: Ipv4Net, n: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(subnet.network()).saturating_add(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(text: &str) -> NetConf {
        NetConf::parse(text).expect("conf")
    }

    /// An L2Bridge network with subnets `prefixes` (gateway route via .1 / ::1).
    fn bridge(prefixes: &[&str]) -> Network {
        let subnets = prefixes
            .iter()
            .map(|p| {
                let p: IpNet = p.parse().expect("prefix");
                let gw = match p.network() {
                    IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + 1)),
                    IpAddr::V6(a) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(a) + 1)),
                };
                let any = if gw.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
                Subnet {
                    ip_address_prefix: Some(p),
                    routes: vec![Route {
                        next_hop: Some(gw),
                        destination_prefix: any.parse().ok(),
                        metric: 0,
                    }],
                    ..Subnet::default()
                }
            })
            .collect();
        Network {
            network_type: NetworkType::L2Bridge,
            ipams: vec![Ipam {
                ipam_type: None,
                subnets,
            }],
            ..Network::default()
        }
    }

    #[test]
    fn a_network_with_the_leases_subnet_among_others_is_kept_as_flannel_keeps_it() {
        let want = bridge(&["10.244.1.0/24"]);
        assert!(same_shape(&bridge(&["10.244.1.0/24"]), &want));
        assert!(
            same_shape(&bridge(&["10.244.1.0/24", "fd00:10:244:1::/64"]), &want),
            "an operator's dual-stack cbr0 is adopted"
        );
        assert!(!same_shape(&bridge(&["10.244.2.0/24"]), &want));
        let mut overlay = bridge(&["10.244.1.0/24"]);
        overlay.network_type = NetworkType::Overlay;
        assert!(!same_shape(&overlay, &want));
    }

    #[test]
    fn flannels_windows_refusals() {
        let e = check(&conf(
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":1}}"#,
        ))
        .expect_err("vni");
        assert!(
            e.to_string()
                .contains("VNI [1] must be greater than or equal to 4096 on Windows"),
            "{e}"
        );
        let e = check(&conf(
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","Port":8472}}"#,
        ))
        .expect_err("port");
        assert!(
            e.to_string()
                .contains("Port [8472] is not supported on Windows"),
            "{e}"
        );
        for flag in ["GBP", "DirectRouting"] {
            let e = check(&conf(&format!(
                r#"{{"Network":"10.244.0.0/16","Backend":{{"Type":"vxlan","{flag}":true}}}}"#
            )))
            .expect_err(flag);
            assert!(
                e.to_string()
                    .contains(&format!("{flag} is not supported on Windows")),
                "{e}"
            );
        }
        check(&conf(
            r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}"#,
        ))
        .expect("flannel's Windows settings");
    }
}
