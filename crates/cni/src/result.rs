//! The ADD result: one model (spec 1.1), printed in the shape of the config's version and read
//! back from any version (IPAM answers, `prevResult`).

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::{Map, Value, json};

use crate::version::{CniVersion, ResultShape};

/// An ADD result (`types/100.Result`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CniResult {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

/// An interface the plugin created or uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: String,
    pub mtu: Option<u32>,
    /// The isolation domain (CNI_NETNS) for an interface in the container; empty on the host.
    pub sandbox: String,
    pub socket_path: String,
    pub pci_id: String,
}

/// An address with its prefix length, on an interface of `interfaces` (by index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpConfig {
    pub interface: Option<usize>,
    /// The address and prefix, e.g. `10.244.1.5/24` (host bits kept).
    pub address: IpNet,
    pub gateway: Option<IpAddr>,
}

/// A route for the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u32>,
}

/// DNS for the container (`types.DNS`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: String,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

impl Dns {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.nameservers.is_empty() {
            m.insert("nameservers".into(), json!(self.nameservers));
        }
        if !self.domain.is_empty() {
            m.insert("domain".into(), json!(self.domain));
        }
        if !self.search.is_empty() {
            m.insert("search".into(), json!(self.search));
        }
        if !self.options.is_empty() {
            m.insert("options".into(), json!(self.options));
        }
        Value::Object(m)
    }

    fn parse(v: Option<&Value>) -> Dns {
        let strings = |k: &str| -> Vec<String> {
            v.and_then(|d| d.get(k))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default()
        };
        Dns {
            nameservers: strings("nameservers"),
            domain: v
                .and_then(|d| d.get("domain"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            search: strings("search"),
            options: strings("options"),
        }
    }
}

impl Route {
    /// A route to `dst` via `gw` with nothing else set.
    pub fn via(dst: IpNet, gw: Option<IpAddr>) -> Route {
        Route {
            dst,
            gw,
            mtu: None,
            advmss: None,
            priority: None,
            table: None,
            scope: None,
        }
    }

    fn to_json(&self, shape: ResultShape) -> Value {
        let mut m = Map::new();
        m.insert("dst".into(), json!(self.dst.to_string()));
        if let Some(gw) = self.gw {
            m.insert("gw".into(), json!(gw.to_string()));
        }
        if shape == ResultShape::V100 {
            for (k, v) in [
                ("mtu", self.mtu),
                ("advmss", self.advmss),
                ("priority", self.priority),
                ("table", self.table),
                ("scope", self.scope),
            ] {
                if let Some(v) = v {
                    m.insert(k.into(), json!(v));
                }
            }
        }
        Value::Object(m)
    }

    fn parse(v: &Value) -> Result<Route, String> {
        let dst = v
            .get("dst")
            .and_then(Value::as_str)
            .ok_or("a route has no \"dst\"")?;
        let num = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        Ok(Route {
            dst: parse_cidr(dst)?,
            gw: opt_ip(v.get("gw"))?,
            mtu: num("mtu"),
            advmss: num("advmss"),
            priority: num("priority"),
            table: num("table"),
            scope: num("scope"),
        })
    }
}

impl CniResult {
    /// The result printed for `version`: 0.1.0/0.2.0 as `ip4`/`ip6`, 0.3.x/0.4.0 with
    /// `ips[].version`, 1.x without.
    pub fn to_json(&self, version: CniVersion) -> Value {
        let shape = version.result_shape();
        if shape == ResultShape::V020 {
            return self.to_json_020(version);
        }
        let mut m = Map::new();
        m.insert("cniVersion".into(), json!(version.to_string()));
        if !self.interfaces.is_empty() {
            let list: Vec<Value> = self
                .interfaces
                .iter()
                .map(|i| interface_json(i, shape))
                .collect();
            m.insert("interfaces".into(), Value::Array(list));
        }
        if !self.ips.is_empty() {
            let list: Vec<Value> = self
                .ips
                .iter()
                .map(|ip| {
                    let mut o = Map::new();
                    if shape == ResultShape::V040 {
                        let family = if ip.address.addr().is_ipv4() {
                            "4"
                        } else {
                            "6"
                        };
                        o.insert("version".into(), json!(family));
                    }
                    if let Some(i) = ip.interface {
                        o.insert("interface".into(), json!(i));
                    }
                    o.insert("address".into(), json!(ip.address.to_string()));
                    if let Some(gw) = ip.gateway {
                        o.insert("gateway".into(), json!(gw.to_string()));
                    }
                    Value::Object(o)
                })
                .collect();
            m.insert("ips".into(), Value::Array(list));
        }
        if !self.routes.is_empty() {
            let list: Vec<Value> = self.routes.iter().map(|r| r.to_json(shape)).collect();
            m.insert("routes".into(), Value::Array(list));
        }
        m.insert("dns".into(), self.dns.to_json());
        Value::Object(m)
    }

    /// 0.2.0: the first IPv4 and the first IPv6 address, each with the routes of its family.
    fn to_json_020(&self, version: CniVersion) -> Value {
        let mut m = Map::new();
        m.insert("cniVersion".into(), json!(version.to_string()));
        for (key, v4) in [("ip4", true), ("ip6", false)] {
            let Some(ip) = self.ips.iter().find(|ip| ip.address.addr().is_ipv4() == v4) else {
                continue;
            };
            let mut o = Map::new();
            o.insert("ip".into(), json!(ip.address.to_string()));
            if let Some(gw) = ip.gateway {
                o.insert("gateway".into(), json!(gw.to_string()));
            }
            let routes: Vec<Value> = self
                .routes
                .iter()
                .filter(|r| r.dst.addr().is_ipv4() == v4)
                .map(|r| r.to_json(ResultShape::V020))
                .collect();
            if !routes.is_empty() {
                o.insert("routes".into(), Value::Array(routes));
            }
            m.insert(key.into(), Value::Object(o));
        }
        m.insert("dns".into(), self.dns.to_json());
        Value::Object(m)
    }

    /// Reads a result of any version: `ips` (0.3.0 on) or `ip4`/`ip6` (0.1.0, 0.2.0).
    pub fn parse(v: &Value) -> Result<CniResult, String> {
        if !v.is_object() {
            return Err("a result must be a JSON object".into());
        }
        let mut r = CniResult {
            dns: Dns::parse(v.get("dns")),
            ..CniResult::default()
        };
        if v.get("ip4").is_some() || v.get("ip6").is_some() {
            for key in ["ip4", "ip6"] {
                let Some(ip) = v.get(key).filter(|x| !x.is_null()) else {
                    continue;
                };
                let addr = ip
                    .get("ip")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{key} has no \"ip\""))?;
                r.ips.push(IpConfig {
                    interface: None,
                    address: parse_cidr(addr)?,
                    gateway: opt_ip(ip.get("gateway"))?,
                });
                for route in ip
                    .get("routes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    r.routes.push(Route::parse(route)?);
                }
            }
            return Ok(r);
        }
        for i in v
            .get("interfaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| {
                i.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            r.interfaces.push(Interface {
                name: s("name"),
                mac: s("mac"),
                mtu: i
                    .get("mtu")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok()),
                sandbox: s("sandbox"),
                socket_path: s("socketPath"),
                pci_id: s("pciID"),
            });
        }
        for ip in v.get("ips").and_then(Value::as_array).into_iter().flatten() {
            let addr = ip
                .get("address")
                .and_then(Value::as_str)
                .ok_or("an entry of \"ips\" has no \"address\"")?;
            r.ips.push(IpConfig {
                interface: ip
                    .get("interface")
                    .and_then(Value::as_u64)
                    .and_then(|n| usize::try_from(n).ok()),
                address: parse_cidr(addr)?,
                gateway: opt_ip(ip.get("gateway"))?,
            });
        }
        for route in v
            .get("routes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            r.routes.push(Route::parse(route)?);
        }
        Ok(r)
    }

    /// The result with the pod's own interface in it: on Linux the pod's vNIC is a real
    /// interface `name` in the namespace `sandbox` (what `bridge` reports as `eth0`), so it is
    /// listed with its MAC and sandbox, and the addresses no interface claims are linked to it.
    /// The entries Windows runtimes read (the endpoint's interface first) stay as they are.
    pub fn with_pod_interface(mut self, name: &str, mac: &str, sandbox: &str) -> CniResult {
        let index = match self.interfaces.iter().position(|i| i.name == name) {
            Some(i) => i,
            None => {
                self.interfaces.push(Interface {
                    name: name.to_string(),
                    ..Interface::default()
                });
                self.interfaces.len() - 1
            }
        };
        let pod = &mut self.interfaces[index];
        pod.mac = mac.to_string();
        pod.sandbox = sandbox.to_string();
        for ip in self.ips.iter_mut().filter(|ip| ip.interface.is_none()) {
            ip.interface = Some(index);
        }
        self
    }

    /// The first address, preferring IPv4 (what win-bridge and win-overlay use).
    pub fn primary_ip(&self) -> Option<&IpConfig> {
        primary(&self.ips)
    }
}

/// The first of `ips`, preferring IPv4: the one address win-bridge, win-overlay and sdn*
/// without `enableDualStack` give an endpoint.
pub fn primary(ips: &[IpConfig]) -> Option<&IpConfig> {
    ips.iter()
        .find(|ip| ip.address.addr().is_ipv4())
        .or_else(|| ips.first())
}

fn interface_json(i: &Interface, shape: ResultShape) -> Value {
    let mut o = Map::new();
    o.insert("name".into(), json!(i.name));
    if !i.mac.is_empty() {
        o.insert("mac".into(), json!(i.mac));
    }
    if shape == ResultShape::V100
        && let Some(mtu) = i.mtu
    {
        o.insert("mtu".into(), json!(mtu));
    }
    if !i.sandbox.is_empty() {
        o.insert("sandbox".into(), json!(i.sandbox));
    }
    if shape == ResultShape::V100 {
        if !i.socket_path.is_empty() {
            o.insert("socketPath".into(), json!(i.socket_path));
        }
        if !i.pci_id.is_empty() {
            o.insert("pciID".into(), json!(i.pci_id));
        }
    }
    Value::Object(o)
}

fn parse_cidr(s: &str) -> Result<IpNet, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("\"{s}\" is not an address with a prefix length, e.g. 10.244.1.5/24"))
}

fn opt_ip(v: Option<&Value>) -> Result<Option<IpAddr>, String> {
    match v.and_then(Value::as_str).map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("\"{s}\" is not an IP address")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> CniVersion {
        s.parse().unwrap()
    }

    fn sample() -> CniResult {
        CniResult {
            interfaces: vec![Interface {
                name: "abc_cbr0".into(),
                mac: "00-15-5D-01-02-03".into(),
                ..Interface::default()
            }],
            ips: vec![IpConfig {
                interface: None,
                address: "10.244.1.5/24".parse().unwrap(),
                gateway: Some("10.244.1.2".parse().unwrap()),
            }],
            routes: vec![Route::via(
                "0.0.0.0/0".parse().unwrap(),
                Some("10.244.1.2".parse().unwrap()),
            )],
            dns: Dns {
                nameservers: vec!["10.96.0.10".into()],
                search: vec!["svc.cluster.local".into()],
                ..Dns::default()
            },
        }
    }

    #[test]
    fn v020_prints_ip4() {
        assert_eq!(
            sample().to_json(v("0.2.0")),
            json!({"cniVersion": "0.2.0",
                "ip4": {"ip": "10.244.1.5/24", "gateway": "10.244.1.2",
                        "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.2"}]},
                "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]}})
        );
    }

    #[test]
    fn v040_has_ip_versions_and_v100_does_not() {
        let r = sample().to_json(v("0.4.0"));
        assert_eq!(r["ips"][0]["version"], "4");
        assert_eq!(r["interfaces"][0]["mac"], "00-15-5D-01-02-03");
        let r = sample().to_json(v("1.1.0"));
        assert!(r["ips"][0].get("version").is_none());
        assert_eq!(r["cniVersion"], "1.1.0");
        assert_eq!(r["ips"][0]["address"], "10.244.1.5/24");
    }

    #[test]
    fn empty_dns_is_still_printed() {
        let r = CniResult::default().to_json(v("1.0.0"));
        assert_eq!(r, json!({"cniVersion": "1.0.0", "dns": {}}));
    }

    #[test]
    fn every_version_reads_back_to_the_same_addresses() {
        for ver in crate::version::SUPPORTED {
            let back = CniResult::parse(&sample().to_json(ver)).unwrap();
            assert_eq!(back.ips[0].address, sample().ips[0].address, "{ver}");
            assert_eq!(back.ips[0].gateway, sample().ips[0].gateway, "{ver}");
            assert_eq!(back.routes, sample().routes, "{ver}");
            assert_eq!(back.dns, sample().dns, "{ver}");
        }
    }

    #[test]
    fn reads_host_local_output() {
        let r = CniResult::parse(&json!({"cniVersion":"0.2.0","ip4":{"ip":"10.244.2.2/24","gateway":"10.244.2.1"},"dns":{}})).unwrap();
        assert_eq!(r.ips[0].address.to_string(), "10.244.2.2/24");
        let r = CniResult::parse(&json!({"cniVersion":"1.0.0","ips":[{"address":"10.244.1.2/24","gateway":"10.244.1.1"}],"dns":{}})).unwrap();
        assert_eq!(
            r.primary_ip().unwrap().gateway,
            Some("10.244.1.1".parse().unwrap())
        );
    }

    #[test]
    fn the_pod_interface_is_added_after_the_endpoint_and_holds_the_addresses() {
        let r = sample().with_pod_interface("eth0", "00:15:5d:01:02:03", "/run/netns/p1");
        let j = r.to_json(v("1.0.0"));
        assert_eq!(
            j["interfaces"][0],
            json!({"name": "abc_cbr0", "mac": "00-15-5D-01-02-03"})
        );
        assert_eq!(
            j["interfaces"][1],
            json!({"name": "eth0", "mac": "00:15:5d:01:02:03", "sandbox": "/run/netns/p1"})
        );
        assert_eq!(j["ips"][0]["interface"], 1);
        // 0.2.0 has no interfaces: the shape Windows' dockershim read is unchanged.
        assert_eq!(r.to_json(v("0.2.0")), sample().to_json(v("0.2.0")));
        let back = CniResult::parse(&j).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn an_interface_already_named_like_the_pod_one_gets_its_sandbox() {
        let mut r = sample();
        r.interfaces[0].name = "eth0".into();
        r.ips[0].interface = Some(0);
        let r = r.with_pod_interface("eth0", "00:15:5d:01:02:03", "/run/netns/p1");
        assert_eq!(r.interfaces.len(), 1);
        assert_eq!(r.interfaces[0].sandbox, "/run/netns/p1");
        assert_eq!(r.ips[0].interface, Some(0));
    }

    #[test]
    fn dual_stack_v020_has_ip4_and_ip6() {
        let mut r = sample();
        r.ips.push(IpConfig {
            interface: Some(0),
            address: "fd00::5/64".parse().unwrap(),
            gateway: None,
        });
        let j = r.to_json(v("0.2.0"));
        assert_eq!(j["ip6"]["ip"], "fd00::5/64");
        assert!(j["ip6"].get("routes").is_none());
    }
}
