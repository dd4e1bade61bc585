//! HostComputeLoadBalancer: frontend VIPs and ports mapped onto backend endpoints.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::serde_util::{ip_list, is_default, opt_ip, protocol};
use crate::types::{Guid, SchemaVersion};

/// Load balancer `Flags` (`LoadBalancerFlags`).
pub struct LoadBalancerFlags;

impl LoadBalancerFlags {
    pub const NONE: u32 = 0;
    /// Direct server return: the backend answers the client from the VIP.
    pub const DSR: u32 = 1;
    pub const IPV6: u32 = 2;
}

/// Port mapping `Flags` (`LoadBalancerPortMappingFlags`).
pub struct PortMappingFlags;

impl PortMappingFlags {
    pub const NONE: u32 = 0;
    /// Internal load balancer.
    pub const ILB: u32 = 1;
    /// The VIP is reachable from the host.
    pub const LOCAL_ROUTED_VIP: u32 = 2;
    /// DSR for NodePort access of the VIP.
    pub const USE_MUX: u32 = 4;
    /// Deliver with the VIP as destination (no DNAT).
    pub const PRESERVE_DIP: u32 = 8;
    /// kube-proxy's own flag for external IPs (not in hcsshim).
    pub const VIP_EXTERNAL_IP: u32 = 16;
}

/// `DistributionType` values (`LoadBalancerDistribution`).
pub struct LoadBalancerDistribution;

impl LoadBalancerDistribution {
    /// Per connection (5-tuple).
    pub const NONE: u32 = 0;
    /// Same client IP and protocol -> same backend.
    pub const SOURCE_IP_PROTOCOL: u32 = 1;
    /// Same client IP -> same backend (kube-proxy's ClientIP affinity).
    pub const SOURCE_IP: u32 = 2;
}

/// A load balancer (HostComputeLoadBalancer).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LoadBalancer {
    #[serde(rename = "ID", skip_serializing_if = "Guid::is_nil")]
    pub id: Guid,
    /// The backends (DIPs), as endpoint IDs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_compute_endpoints: Vec<Guid>,
    /// SNAT source for non-DSR traffic.
    #[serde(
        rename = "SourceVIP",
        deserialize_with = "opt_ip",
        skip_serializing_if = "Option::is_none"
    )]
    pub source_vip: Option<IpAddr>,
    /// Frontend addresses; none means every node address (NodePort).
    #[serde(
        rename = "FrontendVIPs",
        deserialize_with = "ip_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub frontend_vips: Vec<IpAddr>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub port_mappings: Vec<LoadBalancerPortMapping>,
    pub schema_version: SchemaVersion,
    #[serde(skip_serializing_if = "is_default")]
    pub flags: u32,
    /// winnet: the Kubernetes Service port this load balancer implements
    /// (`namespace/name:port`), set by `winnet proxy` so that traces can name it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub linux_service: String,
}

impl LoadBalancer {
    /// True when the load balancer uses direct server return.
    pub fn is_dsr(&self) -> bool {
        self.flags & LoadBalancerFlags::DSR != 0
    }
}

/// One frontend port of a load balancer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LoadBalancerPortMapping {
    #[serde(deserialize_with = "protocol", skip_serializing_if = "is_default")]
    pub protocol: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub internal_port: u16,
    #[serde(skip_serializing_if = "is_default")]
    pub external_port: u16,
    #[serde(skip_serializing_if = "is_default")]
    pub distribution_type: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub flags: u32,
}
