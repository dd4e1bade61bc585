//! win-bridge: pods on an existing L2Bridge or L2Tunnel network (flannel host-gw), gateway at
//! the subnet's `.2` (the host's bridge endpoint), `ipMasqNetwork` as an OutBoundNAT exception,
//! runtime port mappings.

use std::net::IpAddr;

use hcn::network::NetworkType;
use hcn::{Endpoint, Network};
use hns_client::Client;
use ipnet::IpNet;

use crate::attachment::Driver;
use crate::config::NetConf;
use crate::error::{CniError, HnsContext};
use crate::plugins::windows::{self, WinConf};
use crate::policy;
use crate::protocol::{Args, Request};
use crate::result::{CniResult, IpConfig};

/// A win-bridge config.
#[derive(Clone, Debug)]
pub struct WinBridge {
    pub win: WinConf,
    /// `ipMasqNetwork`: the CIDR not to SNAT (win-bridge has no `ipMasq` switch).
    pub ip_masq_network: Option<IpNet>,
}

impl WinBridge {
    pub fn parse(conf: &NetConf) -> Result<WinBridge, CniError> {
        Ok(WinBridge {
            win: WinConf::parse(conf)?,
            ip_masq_network: conf.root().parse("ipMasqNetwork")?,
        })
    }
}

/// `.2` of the subnet of `addr`: "gateway for bridge network (needs to be x.2)".
pub fn bridge_gateway(addr: IpNet) -> IpAddr {
    let base = addr.network();
    match base {
        IpAddr::V4(v4) => IpAddr::from(u32::from(v4).wrapping_add(2).to_be_bytes()),
        IpAddr::V6(v6) => IpAddr::from(u128::from(v6).wrapping_add(2).to_be_bytes()),
    }
}

impl Driver for WinBridge {
    fn conf(&self) -> &NetConf {
        &self.win.conf
    }

    async fn find_network(&self, client: &Client) -> Result<Option<Network>, CniError> {
        let name = &self.win.conf.name;
        let Some(net) = client
            .get_network_by_name(name)
            .await
            .hns("look up the network")?
        else {
            return Ok(None);
        };
        if !matches!(
            net.network_type,
            NetworkType::L2Bridge | NetworkType::L2Tunnel
        ) {
            return Err(CniError::config(
                "name",
                format!(
                    "network \"{name}\" is of unexpected type {}; win-bridge needs L2Bridge or L2Tunnel (use win-overlay for Overlay)",
                    net.network_type
                ),
            ));
        }
        Ok(Some(net))
    }

    async fn endpoint(
        &self,
        _req: &Request<'_>,
        client: &Client,
        net: &Network,
        name: &str,
        ips: &[IpConfig],
    ) -> Result<Endpoint, CniError> {
        let ip = crate::result::primary(ips);
        // The IPAM gateway is ignored; with HNS IPAM the network's first subnet decides.
        let gateway = ip
            .map(|c| c.address)
            .or_else(|| net.subnets().find_map(|s| s.ip_address_prefix))
            .map(bridge_gateway);
        let mut policies = self.win.policies.clone();
        if let Some(cidr) = self.ip_masq_network {
            policy::apply_outbound_nat(&mut policies, &cidr.to_string());
        }
        policies.extend(self.win.port_mappings.iter().map(|m| m.policy(0)));
        self.win
            .apply_loopback_dsr(client, &mut policies, ip)
            .await?;
        Ok(self.win.endpoint(net, name, ip, gateway, policies))
    }

    fn result(&self, args: &Args, net: &Network, ep: &Endpoint) -> CniResult {
        windows::result(args, net, ep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_is_dot_two_of_the_subnet() {
        assert_eq!(
            bridge_gateway("10.244.1.57/24".parse().unwrap()),
            "10.244.1.2".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            bridge_gateway("fd00::57/64".parse().unwrap()),
            "fd00::2".parse::<IpAddr>().unwrap()
        );
    }
}
