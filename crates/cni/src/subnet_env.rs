//! flanneld's `subnet.env`: `KEY=VALUE` lines naming the cluster network, this node's subnet,
//! the MTU and whether to masquerade (flannel-io/cni-plugin `loadFlannelSubnetEnv`).

use std::path::Path;

use ipnet::IpNet;

use crate::error::{CniError, Code};

/// What flanneld wrote for this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubnetEnv {
    /// `FLANNEL_NETWORK` (comma-separated, de-duplicated).
    pub networks: Vec<IpNet>,
    pub ipv6_networks: Vec<IpNet>,
    /// `FLANNEL_SUBNET` as a network (`10.244.1.1/24` -> `10.244.1.0/24`).
    pub subnet: Option<IpNet>,
    pub ipv6_subnet: Option<IpNet>,
    pub mtu: u32,
    /// `FLANNEL_IPMASQ`: true iff exactly `true`.
    pub ipmasq: bool,
}

impl SubnetEnv {
    /// Reads the file; missing means flanneld has not started on this node (code 11).
    pub fn load(path: &Path) -> Result<SubnetEnv, CniError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CniError::new(
                    Code::TRY_AGAIN_LATER,
                    format!(
                        "failed to load flannel 'subnet.env' file: {} does not exist. Check the flannel pod log for this node.",
                        path.display()
                    ),
                ));
            }
            Err(e) => return Err(CniError::io("read", path, e)),
        };
        Self::parse(&text).map_err(|m| {
            CniError::new(
                Code::INVALID_NETWORK_CONFIG,
                format!("failed to load flannel 'subnet.env' file {}: {m}. Check the flannel pod log for this node.", path.display()),
            )
        })
    }

    pub fn parse(text: &str) -> Result<SubnetEnv, String> {
        let (mut networks, mut ipv6_networks) = (Vec::new(), Vec::new());
        let (mut subnet, mut ipv6_subnet, mut mtu, mut ipmasq) = (None, None, None, None);
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim();
            let cidrs = |list: &mut Vec<IpNet>| -> Result<(), String> {
                for c in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                    let n: IpNet = c
                        .parse()
                        .map_err(|_| format!("{key}: \"{c}\" is not a CIDR"))?;
                    if !list.contains(&n) {
                        list.push(n);
                    }
                }
                Ok(())
            };
            let one = |v: &str| -> Result<IpNet, String> {
                v.parse::<IpNet>()
                    .map(|n| n.trunc())
                    .map_err(|_| format!("{key}: \"{v}\" is not a CIDR"))
            };
            match key.trim() {
                "FLANNEL_NETWORK" => cidrs(&mut networks)?,
                "FLANNEL_IPV6_NETWORK" => cidrs(&mut ipv6_networks)?,
                "FLANNEL_SUBNET" => subnet = Some(one(value)?),
                "FLANNEL_IPV6_SUBNET" => ipv6_subnet = Some(one(value)?),
                "FLANNEL_MTU" => {
                    mtu = Some(
                        value
                            .parse::<u32>()
                            .map_err(|_| format!("FLANNEL_MTU: \"{value}\" is not a number"))?,
                    )
                }
                "FLANNEL_IPMASQ" => ipmasq = Some(value == "true"),
                _ => {}
            }
        }
        let mut missing = Vec::new();
        if networks.is_empty() && ipv6_networks.is_empty() {
            missing.push("FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK");
        }
        if subnet.is_none() && ipv6_subnet.is_none() {
            missing.push("FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET");
        }
        if mtu.is_none() {
            missing.push("FLANNEL_MTU");
        }
        if ipmasq.is_none() {
            missing.push("FLANNEL_IPMASQ");
        }
        if !missing.is_empty() {
            return Err(format!("missing {}", missing.join(", ")));
        }
        Ok(SubnetEnv {
            networks,
            ipv6_networks,
            subnet,
            ipv6_subnet,
            mtu: mtu.unwrap_or_default(),
            ipmasq: ipmasq.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_flanneld_writes() {
        let s = SubnetEnv::parse("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n").unwrap();
        assert_eq!(s.networks, vec!["10.244.0.0/16".parse::<IpNet>().unwrap()]);
        assert_eq!(s.subnet, Some("10.244.1.0/24".parse().unwrap()));
        assert!(s.ipmasq);
        assert_eq!(s.mtu, 1450);
    }

    #[test]
    fn ipmasq_is_exactly_true_and_missing_keys_are_named() {
        let s = SubnetEnv::parse("FLANNEL_NETWORK=10.244.0.0/16,10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=True\n").unwrap();
        assert!(!s.ipmasq);
        assert_eq!(s.networks.len(), 1);
        let e = SubnetEnv::parse("FLANNEL_NETWORK=10.244.0.0/16\n").unwrap_err();
        assert!(
            e.contains("FLANNEL_SUBNET")
                && e.contains("FLANNEL_MTU")
                && e.contains("FLANNEL_IPMASQ"),
            "{e}"
        );
    }
}
