//! HostComputeNetwork: a virtual network, its mode, subnets, MAC pool and policies.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::policy::{NetworkPolicy, SubnetPolicy};
use crate::serde_util::{is_default, opt_ip, opt_prefix, string_enum};
use crate::types::{Dns, Guid, Health, MacAddress, SchemaVersion};

string_enum! {
    /// The network mode (`Type`). An absent `Type` on input means NAT; on output it is always
    /// written (hcsshim's `Type NetworkType `json:",omitempty"``, a string, so "NAT" is kept).
    NetworkType {
        Nat = "NAT",
        Ics = "ICS",
        Transparent = "Transparent",
        L2Bridge = "L2Bridge",
        L2Tunnel = "L2Tunnel",
        Overlay = "Overlay",
        Private = "Private",
        Internal = "Internal",
        Layered = "Layered",
        Infiniband = "Infiniband",
    }
}

// The enum comes from `string_enum!`, which cannot mark a default variant.
#[allow(clippy::derivable_impls)]
impl Default for NetworkType {
    fn default() -> Self {
        NetworkType::Nat
    }
}

/// Network `Flags` (hcsshim's values; the 2018 docs disagree, see the reference §2.1).
pub struct NetworkFlags;

impl NetworkFlags {
    pub const NONE: u32 = 0;
    pub const ENABLE_NON_PERSISTENT: u32 = 8;
    pub const DISABLE_HOST_PORT: u32 = 1024;
    pub const ENABLE_IOV: u32 = 8192;
}

/// A virtual network (HostComputeNetwork).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Network {
    #[serde(rename = "ID", skip_serializing_if = "Guid::is_nil")]
    pub id: Guid,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "Type")]
    pub network_type: NetworkType,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<NetworkPolicy>,
    pub mac_pool: MacPool,
    pub dns: Dns,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ipams: Vec<Ipam>,
    #[serde(skip_serializing_if = "is_default")]
    pub flags: u32,
    pub health: Health,
    pub schema_version: SchemaVersion,
}

impl Network {
    /// Every subnet of every IPAM block.
    pub fn subnets(&self) -> impl Iterator<Item = &Subnet> {
        self.ipams.iter().flat_map(|i| i.subnets.iter())
    }

    /// The subnet whose prefix contains `ip`.
    pub fn subnet_for(&self, ip: IpAddr) -> Option<&Subnet> {
        self.subnets()
            .find(|s| s.ip_address_prefix.is_some_and(|p| p.contains(&ip)))
    }
}

/// The MAC pool endpoints draw from. Always marshalled, `{}` when empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct MacPool {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<MacRange>,
}

/// One inclusive range of a [`MacPool`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct MacRange {
    pub start_mac_address: MacAddress,
    pub end_mac_address: MacAddress,
}

string_enum! {
    /// How a network's addresses are assigned.
    IpamType { Static = "Static", Dhcp = "DHCP" }
}

/// An IPAM block: a type and its subnets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Ipam {
    #[serde(rename = "Type", skip_serializing_if = "Option::is_none")]
    pub ipam_type: Option<IpamType>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<Subnet>,
}

/// Subnet `Flags`.
pub struct SubnetFlags;

impl SubnetFlags {
    pub const NONE: u32 = 0;
    /// The gateway address is not reserved (gateway == management IP).
    pub const DO_NOT_RESERVE_GATEWAY_ADDRESS: u32 = 1;
}

/// A subnet of a network, with its routes and VLAN/VSID policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Subnet {
    #[serde(
        deserialize_with = "opt_prefix",
        skip_serializing_if = "Option::is_none"
    )]
    pub ip_address_prefix: Option<IpNet>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<SubnetPolicy>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(skip_serializing_if = "is_default")]
    pub flags: u32,
}

impl Subnet {
    /// The next hop of the default route: the subnet's gateway.
    pub fn gateway(&self) -> Option<IpAddr> {
        self.routes
            .iter()
            .find(|r| r.destination_prefix.is_some_and(|p| p.prefix_len() == 0))
            .and_then(|r| r.next_hop)
    }

    /// The VSID (VXLAN VNI) of the subnet, if it has one.
    pub fn vsid(&self) -> Option<u32> {
        self.policies.iter().find_map(|p| match p {
            SubnetPolicy::Vsid(s) => Some(s.isolation_id),
            SubnetPolicy::Vlan(_) => None,
        })
    }
}

/// A route of a subnet or an endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Route {
    #[serde(deserialize_with = "opt_ip", skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<IpAddr>,
    #[serde(
        deserialize_with = "opt_prefix",
        skip_serializing_if = "Option::is_none"
    )]
    pub destination_prefix: Option<IpNet>,
    #[serde(skip_serializing_if = "is_default")]
    pub metric: u16,
}
