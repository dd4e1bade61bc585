//! win-overlay: pods on an existing Overlay network (flannel vxlan), gateway from the network,
//! MAC `<endpointMacPrefix>-<IPv4 octets>`, the node's provider address, `ipMasq` excepting the
//! network's subnet. No port mappings, as upstream.

use hcn::network::NetworkType;
use hcn::{Endpoint, MacAddress, Network, NetworkPolicy};
use hns_client::Client;

use crate::attachment::Driver;
use crate::config::NetConf;
use crate::error::{CniError, HnsContext};
use crate::plugins::windows::{self, WinConf};
use crate::policy;
use crate::protocol::{Args, Request};
use crate::result::{CniResult, IpConfig};

/// A win-overlay config.
#[derive(Clone, Debug)]
pub struct WinOverlay {
    pub win: WinConf,
    /// `ipMasq`: SNAT everything but the network's own subnet.
    pub ip_masq: bool,
    /// `endpointMacPrefix`, default `0E-2A`.
    pub mac_prefix: [u8; 2],
}

/// Reads `xx-xx` (hex), as flannel's `MacPrefix`.
pub fn parse_mac_prefix(s: &str) -> Option<[u8; 2]> {
    let b = s.as_bytes();
    if b.len() != 5 || b[2] != b'-' {
        return None;
    }
    let hi = u8::from_str_radix(s.get(0..2)?, 16).ok()?;
    let lo = u8::from_str_radix(s.get(3..5)?, 16).ok()?;
    Some([hi, lo])
}

impl WinOverlay {
    pub fn parse(conf: &NetConf) -> Result<WinOverlay, CniError> {
        let root = conf.root();
        let mac_prefix = match root.str("endpointMacPrefix")?.filter(|s| !s.is_empty()) {
            None => [0x0E, 0x2A],
            Some(s) => parse_mac_prefix(s).ok_or_else(|| {
                CniError::config(
                    "endpointMacPrefix",
                    format!("[{s}] is invalid, value must be of the format xx-xx (two hex bytes, e.g. 0E-2A)"),
                )
            })?,
        };
        Ok(WinOverlay {
            win: WinConf::parse(conf)?,
            ip_masq: root.bool("ipMasq")?,
            mac_prefix,
        })
    }

    /// The endpoint MAC for an IPv4 address: prefix then the four octets.
    pub fn mac_for(&self, ip: std::net::Ipv4Addr) -> MacAddress {
        let o = ip.octets();
        MacAddress([
            self.mac_prefix[0],
            self.mac_prefix[1],
            o[0],
            o[1],
            o[2],
            o[3],
        ])
    }
}

impl Driver for WinOverlay {
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
        if net.network_type != NetworkType::Overlay {
            return Err(CniError::config(
                "name",
                format!(
                    "network \"{name}\" is of unexpected type {}; win-overlay needs Overlay (use win-bridge for L2Bridge)",
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
        let v4 = match ip.map(|c| c.address.addr()) {
            Some(std::net::IpAddr::V4(v4)) => Some(v4),
            Some(std::net::IpAddr::V6(_)) => {
                return Err(CniError::config(
                    "ipam",
                    "win-overlay doesn't support IPv6 now; give an IPv4 range",
                ));
            }
            None => None,
        };
        let subnet = ip
            .and_then(|c| net.subnet_for(c.address.addr()))
            .or_else(|| net.subnets().next());
        let gateway = subnet.and_then(|s| s.gateway());
        let mut policies = self.win.policies.clone();
        let pa = net.policies.iter().find_map(|p| match p {
            NetworkPolicy::ProviderAddress(s) => Some(s.provider_address),
            _ => None,
        });
        policy::apply_provider_address(&mut policies, pa);
        if self.ip_masq
            && let Some(prefix) = net.subnets().find_map(|s| s.ip_address_prefix)
        {
            policy::apply_outbound_nat(&mut policies, &prefix.to_string());
        }
        self.win
            .apply_loopback_dsr(client, &mut policies, ip)
            .await?;
        let mut ep = self.win.endpoint(net, name, ip, gateway, policies);
        ep.mac_address = v4.map(|a| self.mac_for(a));
        Ok(ep)
    }

    fn result(&self, args: &Args, net: &Network, ep: &Endpoint) -> CniResult {
        windows::result(args, net, ep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_prefix_must_be_xx_dash_xx() {
        assert_eq!(parse_mac_prefix("0E-2A"), Some([0x0E, 0x2A]));
        for bad in ["0E2A", "0E-2A-", "0E:2A", "ZZ-2A", "0E-2", "", "é-2A"] {
            assert_eq!(parse_mac_prefix(bad), None, "{bad}");
        }
    }
}
