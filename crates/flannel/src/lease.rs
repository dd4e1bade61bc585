//! A node's subnet lease and how flannel writes it: the etcd key `10.244.1.0-24` with its JSON
//! value, and the Node annotations of the kube subnet manager. Pure.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::{Deserialize, Serialize};

use crate::config::BackendType;

/// The annotation keys the kube subnet manager publishes on each Node.
pub mod annotation {
    pub const BACKEND_TYPE: &str = "flannel.alpha.coreos.com/backend-type";
    pub const BACKEND_DATA: &str = "flannel.alpha.coreos.com/backend-data";
    pub const PUBLIC_IP: &str = "flannel.alpha.coreos.com/public-ip";
    pub const KUBE_SUBNET_MANAGER: &str = "flannel.alpha.coreos.com/kube-subnet-manager";
}

/// A VTEP MAC, written `0e:2a:0a:f4:01:01` as Go's `net.HardwareAddr` marshals it; dashes are
/// read too (HNS writes them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mac(pub [u8; 6]);

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl std::str::FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> Result<Mac, String> {
        let parts: Vec<&str> = s.split([':', '-']).collect();
        let mut out = [0u8; 6];
        if parts.len() != 6 {
            return Err(format!("{s:?} is not a MAC address (six hex bytes)"));
        }
        for (o, p) in out.iter_mut().zip(&parts) {
            *o = u8::from_str_radix(p, 16)
                .ok()
                .filter(|_| p.len() == 2)
                .ok_or_else(|| format!("{s:?} is not a MAC address (six hex bytes)"))?;
        }
        Ok(Mac(out))
    }
}

impl Serialize for Mac {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Mac {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Mac, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A vxlan lease's `BackendData`: the VNI and the node's VTEP MAC (its DR MAC on Windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VxlanData {
    #[serde(rename = "VNI")]
    pub vni: u32,
    #[serde(rename = "VtepMAC", default, skip_serializing_if = "Option::is_none")]
    pub vtep_mac: Option<Mac>,
}

/// What a node publishes with its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseAttrs {
    /// The node's address on the underlay: the next hop (host-gw) or the VTEP (vxlan).
    pub public_ip: Ipv4Addr,
    pub backend_type: BackendType,
    /// vxlan only.
    pub vxlan: Option<VxlanData>,
}

/// A node's pod subnet and what it published with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub subnet: Ipv4Net,
    pub attrs: LeaseAttrs,
}

/// The subnets of the vxlan leases in `leases` that have no VtepMAC yet: nodes between
/// leasing and making their network (flannel's Windows backend leases before its network
/// exists, and so does a restarted flanneld of an older winnet). What a node has for these
/// subnets stays as it is, neither added nor removed, until their MAC comes: removing it
/// would cut traffic to a node that is only restarting.
pub fn without_vtep_mac(leases: &[Lease]) -> Vec<Ipv4Net> {
    leases
        .iter()
        .filter(|l| {
            l.attrs.backend_type == BackendType::Vxlan
                && l.attrs.vxlan.is_none_or(|d| d.vtep_mac.is_none())
        })
        .map(|l| l.subnet)
        .collect()
}

/// The JSON value of an etcd lease key, as flannel writes it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct LeaseJson {
    #[serde(rename = "PublicIP")]
    public_ip: Ipv4Addr,
    #[serde(rename = "BackendType", default)]
    backend_type: String,
    #[serde(rename = "BackendData", default)]
    backend_data: Option<serde_json::Value>,
}

/// The etcd key suffix of `subnet`: `10.244.1.0-24`.
pub fn subnet_key(subnet: Ipv4Net) -> String {
    format!("{}-{}", subnet.network(), subnet.prefix_len())
}

/// Reads an etcd key suffix `10.244.1.0-24`.
pub fn parse_subnet_key(s: &str) -> Option<Ipv4Net> {
    let (ip, len) = s.rsplit_once('-')?;
    Ipv4Net::new(ip.parse().ok()?, len.parse().ok()?)
        .ok()
        .filter(|n| n.trunc() == *n)
}

impl LeaseAttrs {
    /// The etcd value: `{"PublicIP", "BackendType", "BackendData"}`.
    pub fn to_etcd_json(&self) -> String {
        let v = LeaseJson {
            public_ip: self.public_ip,
            backend_type: self.backend_type.as_str().into(),
            backend_data: self.vxlan.and_then(|d| serde_json::to_value(d).ok()),
        };
        serde_json::to_string(&v).unwrap_or_default()
    }

    /// Reads an etcd value; `Err` says what is wrong.
    pub fn from_etcd_json(text: &[u8]) -> Result<LeaseAttrs, String> {
        let v: LeaseJson = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        Self::from_parts(&v.backend_type, v.public_ip, v.backend_data)
    }

    fn from_parts(
        backend_type: &str,
        public_ip: Ipv4Addr,
        data: Option<serde_json::Value>,
    ) -> Result<LeaseAttrs, String> {
        let backend_type = BackendType::parse(backend_type)
            .ok_or_else(|| format!("BackendType {backend_type:?} is not host-gw or vxlan"))?;
        let vxlan = match (backend_type, data) {
            (BackendType::Vxlan, Some(v)) if !v.is_null() => {
                Some(serde_json::from_value(v).map_err(|e| format!("BackendData: {e}"))?)
            }
            _ => None,
        };
        Ok(LeaseAttrs {
            public_ip,
            backend_type,
            vxlan,
        })
    }

    /// What a starting flanneld publishes over the lease `published` it holds from its last
    /// run: its own attributes, with the VtepMAC of `published` while its own is not known
    /// yet (it comes from the VXLAN device or the HNS network, made or adopted after the
    /// lease). Publishing the lease without a VtepMAC would have the other nodes drop their
    /// routes to this node until the MAC follows; a network remade with another MAC is
    /// published as soon as it is known.
    pub fn keeping_vtep_mac_of(self, published: &LeaseAttrs) -> LeaseAttrs {
        match (self.vxlan, published.vxlan) {
            (Some(mine), Some(theirs))
                if mine.vtep_mac.is_none()
                    && mine.vni == theirs.vni
                    && self.backend_type == published.backend_type
                    && self.public_ip == published.public_ip =>
            {
                LeaseAttrs {
                    vxlan: Some(theirs),
                    ..self
                }
            }
            _ => self,
        }
    }

    /// The Node annotations the kube subnet manager publishes.
    pub fn to_annotations(&self) -> BTreeMap<String, String> {
        let data = match self.vxlan {
            Some(d) => serde_json::to_string(&d).unwrap_or_default(),
            None => "null".to_string(),
        };
        BTreeMap::from([
            (
                annotation::BACKEND_TYPE.into(),
                self.backend_type.as_str().into(),
            ),
            (annotation::BACKEND_DATA.into(), data),
            (annotation::PUBLIC_IP.into(), self.public_ip.to_string()),
            (annotation::KUBE_SUBNET_MANAGER.into(), "true".into()),
        ])
    }

    /// Reads a Node's annotations; `None` when the node has not published a lease.
    pub fn from_annotations(a: &BTreeMap<String, String>) -> Option<Result<LeaseAttrs, String>> {
        let backend_type = a.get(annotation::BACKEND_TYPE)?;
        let public_ip = a.get(annotation::PUBLIC_IP)?;
        Some((|| {
            let ip = public_ip
                .parse()
                .map_err(|_| format!("public-ip {public_ip:?} is not an IPv4 address"))?;
            let data = match a.get(annotation::BACKEND_DATA) {
                Some(d) => {
                    Some(serde_json::from_str(d).map_err(|e| format!("backend-data {d:?}: {e}"))?)
                }
                None => None,
            };
            Self::from_parts(backend_type, ip, data)
        })())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attrs() -> LeaseAttrs {
        LeaseAttrs {
            public_ip: Ipv4Addr::new(192, 168, 77, 11),
            backend_type: BackendType::Vxlan,
            vxlan: Some(VxlanData {
                vni: 4096,
                vtep_mac: Some(Mac([0x00, 0x15, 0x5d, 0xd0, 0x01, 0x02])),
            }),
        }
    }

    #[test]
    fn the_etcd_value_is_flannels() {
        let text = attrs().to_etcd_json();
        assert_eq!(
            text,
            r#"{"PublicIP":"192.168.77.11","BackendType":"vxlan","BackendData":{"VNI":4096,"VtepMAC":"00:15:5d:d0:01:02"}}"#
        );
        assert_eq!(LeaseAttrs::from_etcd_json(text.as_bytes()), Ok(attrs()));
        let hostgw = br#"{"PublicIP":"192.168.77.12","BackendType":"host-gw","BackendData":null}"#;
        let a = LeaseAttrs::from_etcd_json(hostgw).expect("host-gw");
        assert_eq!(a.backend_type, BackendType::HostGw);
        assert_eq!(a.vxlan, None);
    }

    #[test]
    fn annotations_round_trip() {
        let a = attrs().to_annotations();
        assert_eq!(
            a[annotation::BACKEND_DATA],
            r#"{"VNI":4096,"VtepMAC":"00:15:5d:d0:01:02"}"#
        );
        assert_eq!(LeaseAttrs::from_annotations(&a), Some(Ok(attrs())));
        assert_eq!(LeaseAttrs::from_annotations(&BTreeMap::new()), None);
    }

    #[test]
    fn a_restart_keeps_the_published_vtep_mac_until_it_knows_its_own() {
        let starting = LeaseAttrs {
            vxlan: Some(VxlanData {
                vni: 4096,
                vtep_mac: None,
            }),
            ..attrs()
        };
        assert_eq!(starting.keeping_vtep_mac_of(&attrs()), attrs());
        // A MAC of its own wins; another VNI, backend or address is another lease.
        let other_mac = LeaseAttrs {
            vxlan: Some(VxlanData {
                vni: 4096,
                vtep_mac: Some(Mac([2, 0, 0, 0, 0, 1])),
            }),
            ..attrs()
        };
        assert_eq!(other_mac.keeping_vtep_mac_of(&attrs()), other_mac);
        let other_vni = LeaseAttrs {
            vxlan: Some(VxlanData {
                vni: 4097,
                vtep_mac: None,
            }),
            ..attrs()
        };
        assert_eq!(other_vni.keeping_vtep_mac_of(&attrs()), other_vni);
        let moved = LeaseAttrs {
            public_ip: Ipv4Addr::new(192, 168, 77, 12),
            ..starting
        };
        assert_eq!(moved.keeping_vtep_mac_of(&attrs()), moved);
        let host_gw = LeaseAttrs {
            backend_type: BackendType::HostGw,
            vxlan: None,
            ..attrs()
        };
        assert_eq!(host_gw.keeping_vtep_mac_of(&attrs()), host_gw);
    }

    #[test]
    fn subnet_keys() {
        let n: Ipv4Net = "10.244.1.0/24".parse().expect("net");
        assert_eq!(subnet_key(n), "10.244.1.0-24");
        assert_eq!(parse_subnet_key("10.244.1.0-24"), Some(n));
        assert_eq!(parse_subnet_key("10.244.1.1-24"), None);
        assert_eq!(parse_subnet_key("10.244.1.0"), None);
    }

    proptest! {
        #[test]
        fn lease_readers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), s in ".{0,40}") {
            let _ = LeaseAttrs::from_etcd_json(&bytes);
            let _ = parse_subnet_key(&s);
            let _ = s.parse::<Mac>();
            let m = BTreeMap::from([
                (annotation::BACKEND_TYPE.to_string(), "vxlan".to_string()),
                (annotation::PUBLIC_IP.to_string(), "10.0.0.1".to_string()),
                (annotation::BACKEND_DATA.to_string(), s.clone()),
            ]);
            let _ = LeaseAttrs::from_annotations(&m);
        }

        #[test]
        fn macs_round_trip(b in any::<[u8; 6]>()) {
            prop_assert_eq!(Mac(b).to_string().parse::<Mac>(), Ok(Mac(b)));
        }
    }
}
