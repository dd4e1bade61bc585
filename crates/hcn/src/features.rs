//! The HNS version and the features clients derive from it (hcsshim/hnslib `hcnsupport.go`).

use serde::{Deserialize, Serialize};

/// An HNS version, as `GET /globals/version` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

impl Version {
    pub const fn new(major: u32, minor: u32) -> Self {
        Version { major, minor }
    }

    /// True when `self` is at least `min` within the major line of `min` (hcsshim's
    /// "9.3 through 9.x" ranges).
    fn in_line(self, min: Version) -> bool {
        self.major == min.major && self.minor >= min.minor
    }

    fn at_least(self, min: Version) -> bool {
        self >= min
    }
}

/// ACL features.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AclFeatures {
    pub acl_address_lists: bool,
    pub acl_host_rule_priority: bool,
    pub acl_port_ranges: bool,
    pub acl_rule_id: bool,
}

/// API versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiSupport {
    #[serde(rename = "V1")]
    pub v1: bool,
    #[serde(rename = "V2")]
    pub v2: bool,
}

/// What a client may use on this HNS (`SupportedFeatures`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupportedFeatures {
    #[serde(rename = "ACL")]
    pub acl: AclFeatures,
    #[serde(rename = "API")]
    pub api: ApiSupport,
    #[serde(rename = "RemoteSubnet")]
    pub remote_subnet: bool,
    #[serde(rename = "HostRoute")]
    pub host_route: bool,
    #[serde(rename = "DSR")]
    pub dsr: bool,
    #[serde(rename = "Slash32EndpointPrefixes")]
    pub slash32_endpoint_prefixes: bool,
    #[serde(rename = "AclSupportForProtocol252")]
    pub acl_support_for_protocol252: bool,
    #[serde(rename = "SessionAffinity")]
    pub session_affinity: bool,
    #[serde(rename = "IPv6DualStack")]
    pub ipv6_dual_stack: bool,
    #[serde(rename = "SetPolicy")]
    pub set_policy: bool,
    #[serde(rename = "VxlanPort")]
    pub vxlan_port: bool,
    #[serde(rename = "L4Proxy")]
    pub l4_proxy: bool,
    #[serde(rename = "L4WfpProxy")]
    pub l4_wfp_proxy: bool,
    #[serde(rename = "TierAcl")]
    pub tier_acl: bool,
    #[serde(rename = "NetworkACL")]
    pub network_acl: bool,
    #[serde(rename = "NestedIpSet")]
    pub nested_ip_set: bool,
    #[serde(rename = "DisableHostPort")]
    pub disable_host_port: bool,
    #[serde(rename = "ModifyLoadbalancer")]
    pub modify_loadbalancer: bool,
    #[serde(rename = "Accelnet")]
    pub accelnet: bool,
    /// IPv6 on Overlay (VXLAN) networks. No Windows HNS has it and hnslib knows no such
    /// feature: kube-proxy's winkernel and sdnoverlay refuse dual-stack on overlay outright
    /// ("Overlay (VXLAN) networks on Windows do not support dual-stack networking today").
    /// hnsd reports it where its profile lifts the limitation (`unrestricted`), as the
    /// feature those clients would check if Windows lifted it; never from a version. Ours,
    /// so `Linux`-prefixed (DESIGN §3.1): nothing of ours hides among HNS's names.
    #[serde(rename = "LinuxIPv6Overlay", default)]
    pub ipv6_overlay: bool,
}

impl SupportedFeatures {
    /// The features of HNS version `v`, with the version ranges of hnslib's `hcnglobals.go`
    /// (what kube-proxy's winkernel links). Each `line(a, b)` is hnslib's range `a.b` through
    /// `a.MaxInt32`, each `at(a, b)` the range `a.b` through `MaxInt32.MaxInt32`.
    pub fn for_version(v: Version) -> SupportedFeatures {
        let at = |maj, min| v.at_least(Version::new(maj, min));
        let line = |maj, min| v.in_line(Version::new(maj, min));
        let acl = at(7, 2);
        SupportedFeatures {
            acl: AclFeatures {
                acl_address_lists: acl,
                acl_host_rule_priority: acl,
                acl_port_ranges: acl,
                acl_rule_id: acl,
            },
            api: ApiSupport {
                v1: true,
                v2: at(9, 2),
            },
            remote_subnet: at(9, 2),
            host_route: at(9, 2),
            dsr: line(9, 3) || at(10, 2),
            slash32_endpoint_prefixes: line(9, 3) || at(10, 4),
            vxlan_port: at(10, 3),
            acl_support_for_protocol252: at(11, 0),
            ipv6_dual_stack: at(11, 10),
            session_affinity: at(12, 0),
            l4_proxy: line(9, 5) || line(10, 5) || line(11, 11) || line(12, 1) || at(13, 1),
            set_policy: at(13, 0),
            l4_wfp_proxy: at(13, 2),
            tier_acl: at(14, 0),
            network_acl: at(15, 0),
            nested_ip_set: at(15, 0),
            disable_host_port: at(15, 1),
            // "HNS 15.5+ allows for Modify Loadbalancer support in Zn and 16.0+ allows in Ge"
            // (hnslib 1fbf93f): HNS 15.4, Windows Server 2025's, answers a modify with state
            // that does not match HNS's (kubernetes#131466, #131506).
            modify_loadbalancer: line(15, 5) || at(16, 0),
            accelnet: at(15, 4),
            ipv6_overlay: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsr_is_in_the_9_line_and_from_10_2() {
        assert!(SupportedFeatures::for_version(Version::new(9, 5)).dsr);
        assert!(!SupportedFeatures::for_version(Version::new(10, 1)).dsr);
        assert!(SupportedFeatures::for_version(Version::new(12, 0)).dsr);
    }

    #[test]
    fn session_affinity_from_12() {
        assert!(!SupportedFeatures::for_version(Version::new(11, 10)).session_affinity);
        assert!(SupportedFeatures::for_version(Version::new(12, 0)).session_affinity);
    }

    #[test]
    fn modify_lb_is_hnslibs_two_ranges() {
        for (major, minor, want) in [
            (12, 1, false),
            (15, 0, false),
            (15, 4, false),
            (15, 5, true),
            (15, 99, true),
            (16, 0, true),
            (16, 1, true),
            (17, 0, true),
        ] {
            let f = SupportedFeatures::for_version(Version::new(major, minor));
            assert_eq!(f.modify_loadbalancer, want, "HNS {major}.{minor}");
        }
    }
}
