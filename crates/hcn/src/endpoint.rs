//! HostComputeEndpoint: a vNIC on a network (local), or a remote address behind a PA (remote).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::network::Route;
use crate::policy::EndpointPolicy;
use crate::serde_util::{is_default, opt_ip};
use crate::types::{Dns, Guid, Health, MacAddress, SchemaVersion};

/// Endpoint `Flags`.
pub struct EndpointFlags;

impl EndpointFlags {
    pub const NONE: u32 = 0;
    /// A remote endpoint: an address on another host (kube-proxy's remote backends).
    pub const REMOTE_ENDPOINT: u32 = 1;
    pub const DISABLE_ICC: u32 = 2;
    pub const ENABLE_MIRRORING: u32 = 4;
    pub const ENABLE_LOW_INTERFACE_METRIC: u32 = 8;
    pub const OVERRIDE_DNS_SERVER_ORDER: u32 = 16;
    pub const ENABLE_DHCP: u32 = 32;
}

/// An endpoint (HostComputeEndpoint).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Endpoint {
    #[serde(rename = "ID", skip_serializing_if = "Guid::is_nil")]
    pub id: Guid,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "Guid::is_nil")]
    pub host_compute_network: Guid,
    /// Read-only: set by attaching the endpoint to a namespace.
    #[serde(skip_serializing_if = "Guid::is_nil")]
    pub host_compute_namespace: Guid,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<EndpointPolicy>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ip_configurations: Vec<IpConfig>,
    pub dns: Dns,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<MacAddress>,
    #[serde(skip_serializing_if = "is_default")]
    pub flags: u32,
    pub health: Health,
    pub schema_version: SchemaVersion,
    /// winnet: the name of the vNIC inside the namespace the endpoint is attached to (the CNI
    /// `CNI_IFNAME`); `eth0` when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub linux_interface_name: String,
    /// winnet: how many times the endpoint's ACLs were applied (a policy modify carrying ACLs,
    /// or an `Update`), kept by hnsd; a build that resets connections on an ACL update does so
    /// when it changes. Ignored on create.
    #[serde(skip_serializing_if = "is_default")]
    pub linux_acl_generation: u64,
}

impl Endpoint {
    /// True for a remote endpoint (`Flags & 1`).
    pub fn is_remote(&self) -> bool {
        self.flags & EndpointFlags::REMOTE_ENDPOINT != 0
    }

    /// The addresses of the endpoint.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.ip_configurations.iter().filter_map(|c| c.ip_address)
    }
}

/// One address of an endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct IpConfig {
    #[serde(deserialize_with = "opt_ip", skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<IpAddr>,
    #[serde(skip_serializing_if = "is_default")]
    pub prefix_length: u8,
}
