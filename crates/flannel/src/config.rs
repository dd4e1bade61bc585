//! `net-conf.json`: the cluster's pod network and the backend every node uses, as flannel reads
//! it (keys matched case-insensitively, as Go's `encoding/json` does). Pure: text in, a checked
//! [`NetConf`] or an error naming the field and the fix out.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde_json::{Map, Value};

/// Which way a node reaches other nodes' pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendType {
    /// Routes to each remote subnet via the node's public IP (nodes share an L2 segment).
    HostGw,
    /// VXLAN: each remote subnet is reached through the node's VTEP.
    Vxlan,
}

impl BackendType {
    /// The name flannel writes in leases and annotations.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendType::HostGw => "host-gw",
            BackendType::Vxlan => "vxlan",
        }
    }

    /// Reads a lease's or annotation's backend type.
    pub fn parse(s: &str) -> Option<BackendType> {
        match s {
            "host-gw" => Some(BackendType::HostGw),
            "vxlan" => Some(BackendType::Vxlan),
            _ => None,
        }
    }
}

/// The `Backend` object of net-conf.json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub backend_type: BackendType,
    /// `Name`: the HNS network (Windows) or VXLAN device (Linux) name; `None` for flannel's
    /// default (`cbr0` for host-gw on Windows, `flannel.<VNI>` for vxlan).
    pub name: Option<String>,
    /// `VNI` (vxlan); flannel's default is 1, and 4096 on Windows.
    pub vni: Option<u32>,
    /// `Port` (vxlan): the UDP port; `None` for the kernel's (Linux) or 4789 (Windows).
    pub port: Option<u16>,
    /// `MacPrefix` (vxlan on Windows), `xx-xx`.
    pub mac_prefix: String,
    /// `GBP`: group-based policy, which flannel refuses on Windows.
    pub gbp: bool,
    /// `DirectRouting`: host-gw between nodes of one subnet; refused on Windows.
    pub direct_routing: bool,
    /// `DNSServerList` (host-gw on Windows).
    pub dns_servers: Vec<Ipv4Addr>,
}

/// What VXLAN adds to each packet (outer Ethernet, IPv4, UDP and VXLAN headers).
const VXLAN_OVERHEAD: u32 = 50;

/// A checked net-conf.json.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConf {
    /// `Network`: every pod subnet is cut from it.
    pub network: Ipv4Net,
    /// `SubnetLen`: the prefix length of a node's subnet (24 unless the network is smaller).
    pub subnet_len: u8,
    pub backend: Backend,
}

/// An invalid net-conf.json: the field and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("net-conf.json: {field}: {problem}")]
pub struct ConfigError {
    /// The field, as a path (`Backend.VNI`).
    pub field: String,
    pub problem: String,
}

fn bad(field: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The value of `key` in `obj`, matched case-insensitively.
fn get<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v)
}

impl NetConf {
    /// Reads net-conf.json text.
    /// The MTU pods get (`FLANNEL_MTU`): the NIC's, less what VXLAN adds on vxlan.
    pub fn pod_mtu(&self, nic_mtu: u32) -> u32 {
        match self.backend.backend_type {
            BackendType::HostGw => nic_mtu,
            BackendType::Vxlan => nic_mtu.saturating_sub(VXLAN_OVERHEAD),
        }
    }

    /// True when `subnet` is one a node may lease under this config: a `SubnetLen` subnet of
    /// `Network` other than its first, which flannel leaves unused (its SubnetMin..SubnetMax).
    /// A lease or a last run's subnet that does not fit was made under another config.
    pub fn holds(&self, subnet: Ipv4Net) -> bool {
        subnet.prefix_len() == self.subnet_len
            && subnet.trunc() == subnet
            && self.network.contains(&subnet)
            && subnet.network() != self.network.network()
    }

    /// The vxlan data to lease before the device or network exists (no VtepMAC yet).
    pub fn initial_vxlan(&self, vni: u32) -> Option<crate::lease::VxlanData> {
        (self.backend.backend_type == BackendType::Vxlan).then_some(crate::lease::VxlanData {
            vni,
            vtep_mac: None,
        })
    }

    pub fn parse(text: &str) -> Result<NetConf, ConfigError> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| bad("(document)", format!("not JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| bad("(document)", "must be a JSON object"))?;
        let network = match get(obj, "Network") {
            Some(Value::String(s)) => s.parse::<Ipv4Net>().map_err(|_| {
                bad(
                    "Network",
                    format!("{s:?} is not an IPv4 CIDR; write e.g. \"10.244.0.0/16\""),
                )
            })?,
            Some(_) => return Err(bad("Network", "must be a string such as \"10.244.0.0/16\"")),
            None => return Err(bad("Network", "missing; write e.g. \"10.244.0.0/16\"")),
        }
        .trunc();
        let default_len = if network.prefix_len() <= 24 {
            24
        } else {
            network.prefix_len()
        };
        let subnet_len = match get(obj, "SubnetLen") {
            None => default_len,
            Some(v) => v
                .as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .filter(|n| *n >= network.prefix_len() && *n <= 30)
                .ok_or_else(|| {
                    bad(
                        "SubnetLen",
                        format!(
                            "must be a prefix length from {} (the Network's) to 30",
                            network.prefix_len()
                        ),
                    )
                })?,
        };
        let backend = match get(obj, "Backend") {
            Some(Value::Object(b)) => parse_backend(b)?,
            Some(_) => {
                return Err(bad(
                    "Backend",
                    "must be an object such as {\"Type\": \"vxlan\"}",
                ));
            }
            None => return Err(bad("Backend", "missing; write e.g. {\"Type\": \"vxlan\"}")),
        };
        Ok(NetConf {
            network,
            subnet_len,
            backend,
        })
    }
}

fn parse_backend(b: &Map<String, Value>) -> Result<Backend, ConfigError> {
    let backend_type = match get(b, "Type") {
        Some(Value::String(s)) => BackendType::parse(s).ok_or_else(|| {
            bad(
                "Backend.Type",
                format!("{s:?} is not a backend winnet has; use \"host-gw\" or \"vxlan\""),
            )
        })?,
        _ => {
            return Err(bad(
                "Backend.Type",
                "missing or not a string; use \"host-gw\" or \"vxlan\"",
            ));
        }
    };
    let name = match get(b, "Name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(check_name(s)?),
        Some(_) => return Err(bad("Backend.Name", "must be a string")),
    };
    let vni = match get(b, "VNI") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0 && *n < (1 << 24))
                .ok_or_else(|| bad("Backend.VNI", "must be a number from 1 to 16777215"))?,
        ),
    };
    let port = match get(b, "Port") {
        None => None,
        Some(v) => match v.as_u64().and_then(|n| u16::try_from(n).ok()) {
            Some(0) => None,
            Some(p) => Some(p),
            None => {
                return Err(bad(
                    "Backend.Port",
                    "must be a UDP port number (1 to 65535)",
                ));
            }
        },
    };
    let mac_prefix = match get(b, "MacPrefix") {
        None => "0E-2A".to_string(),
        Some(Value::String(s)) if is_mac_prefix(s) => s.to_ascii_uppercase(),
        Some(_) => {
            return Err(bad(
                "Backend.MacPrefix",
                "must be two hex bytes as xx-xx, e.g. \"0E-2A\"",
            ));
        }
    };
    let flag = |key: &str| match get(b, key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(x)) => Ok(*x),
        Some(_) => Err(bad(&format!("Backend.{key}"), "must be true or false")),
    };
    let dns_servers = match get(b, "DNSServerList") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => Vec::new(),
        Some(Value::String(s)) => s
            .split(',')
            .map(|a| a.trim().parse::<Ipv4Addr>())
            .collect::<Result<_, _>>()
            .map_err(|_| {
                bad(
                    "Backend.DNSServerList",
                    "must be IPv4 addresses separated by commas",
                )
            })?,
        Some(_) => return Err(bad("Backend.DNSServerList", "must be a string")),
    };
    Ok(Backend {
        backend_type,
        name,
        vni,
        port,
        mac_prefix,
        gbp: flag("GBP")?,
        direct_routing: flag("DirectRouting")?,
        dns_servers,
    })
}

/// A network or device name: at most 15 bytes (a Linux interface name), no space or `/`.
fn check_name(s: &str) -> Result<String, ConfigError> {
    let ok = s.len() <= 15
        && !s
            .chars()
            .any(|c| c == '/' || c == ':' || c == '\0' || c.is_whitespace());
    if ok {
        Ok(s.to_string())
    } else {
        Err(bad(
            "Backend.Name",
            format!("{s:?}: use at most 15 characters without spaces, ':' or '/'"),
        ))
    }
}

fn is_mac_prefix(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 5 && b[2] == b'-' && [0, 1, 3, 4].iter().all(|i| b[*i].is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_microsoft_sdn_files_read_as_written() {
        let c = NetConf::parse(
            r#"{"Network": "10.244.0.0/16", "Backend": {"name": "cbr0", "type": "host-gw"}}"#,
        )
        .expect("l2bridge");
        assert_eq!(c.network.to_string(), "10.244.0.0/16");
        assert_eq!(c.subnet_len, 24);
        assert_eq!(c.backend.backend_type, BackendType::HostGw);
        assert_eq!(c.backend.name.as_deref(), Some("cbr0"));
        let c = NetConf::parse(
            r#"{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 4096, "Port": 4789}}"#,
        )
        .expect("overlay");
        assert_eq!(c.backend.vni, Some(4096));
        assert_eq!(c.backend.port, Some(4789));
        assert_eq!(c.backend.mac_prefix, "0E-2A");
    }

    #[test]
    fn each_bad_field_is_named() {
        for (text, field) in [
            ("[]", "(document)"),
            (r#"{"Backend": {"Type": "vxlan"}}"#, "Network"),
            (
                r#"{"Network": "10.244.0.0", "Backend": {"Type": "vxlan"}}"#,
                "Network",
            ),
            (r#"{"Network": "10.244.0.0/16"}"#, "Backend"),
            (
                r#"{"Network": "10.244.0.0/16", "Backend": {"Type": "udp"}}"#,
                "Backend.Type",
            ),
            (
                r#"{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": "x"}}"#,
                "Backend.VNI",
            ),
            (
                r#"{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "Port": 70000}}"#,
                "Backend.Port",
            ),
            (
                r#"{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "MacPrefix": "0E2A"}}"#,
                "Backend.MacPrefix",
            ),
            (
                r#"{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "GBP": "yes"}}"#,
                "Backend.GBP",
            ),
            (
                r#"{"Network": "10.244.0.0/16", "SubnetLen": 8, "Backend": {"Type": "vxlan"}}"#,
                "SubnetLen",
            ),
            (
                r#"{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "Name": "a very long name"}}"#,
                "Backend.Name",
            ),
        ] {
            let e = NetConf::parse(text).expect_err(text);
            assert_eq!(e.field, field, "{text}: {e}");
        }
    }

    proptest! {
        #[test]
        fn any_text_parses_or_names_a_field(text in ".{0,200}") {
            if let Err(e) = NetConf::parse(&text) {
                prop_assert!(!e.field.is_empty());
            }
        }

        #[test]
        fn any_backend_object_parses_or_names_a_backend_field(
            vni in any::<i64>(), port in any::<i64>(), t in "(vxlan|host-gw|x)"
        ) {
            let text = format!(
                r#"{{"Network": "10.244.0.0/16", "Backend": {{"Type": "{t}", "VNI": {vni}, "Port": {port}}}}}"#
            );
            match NetConf::parse(&text) {
                Ok(c) => prop_assert!(c.backend.vni.is_some_and(|v| i64::from(v) == vni)),
                Err(e) => prop_assert!(e.field.starts_with("Backend.")),
            }
        }
    }
}
