//! Endpoint, network and subnet policies: `{"Type": <name>, "Settings": {...}}` with one typed
//! settings struct per type, as in hcsshim's `hcnpolicy.go`. An unknown `Type` is refused.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize};

pub use crate::acl::{
    ANY_PROTOCOL, AclAddress, AclAddresses, AclList, AclPorts, AclProtocols, PortRange,
};
use crate::serde_util::{is_default, opt_ip, opt_prefix, prefix_list, protocol, string_enum};
use crate::types::MacAddress;

/// A policy on an endpoint (`EndpointPolicyType`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Type", content = "Settings")]
pub enum EndpointPolicy {
    PortMapping(PortMappingPolicySetting),
    #[serde(rename = "ACL")]
    Acl(AclPolicySetting),
    #[serde(rename = "QOS")]
    Qos(QosPolicySetting),
    L2Driver(serde_json::Map<String, serde_json::Value>),
    #[serde(rename = "OutBoundNAT")]
    OutBoundNat(OutboundNatPolicySetting),
    #[serde(rename = "SDNRoute")]
    SdnRoute(SdnRoutePolicySetting),
    L4Proxy(L4ProxyPolicySetting),
    #[serde(rename = "L4WFPPROXY")]
    L4WfpProxy(L4WfpProxyPolicySetting),
    PortName(PortnamePolicySetting),
    EncapOverhead(EncapOverheadPolicySetting),
    Iov(IovPolicySetting),
    ProviderAddress(ProviderAddressPolicySetting),
    InterfaceConstraint(InterfaceConstraintPolicySetting),
    TierAcl(TierAclPolicySetting),
}

impl EndpointPolicy {
    /// The canonical `Type` string.
    pub fn type_name(&self) -> &'static str {
        match self {
            EndpointPolicy::PortMapping(_) => "PortMapping",
            EndpointPolicy::Acl(_) => "ACL",
            EndpointPolicy::Qos(_) => "QOS",
            EndpointPolicy::L2Driver(_) => "L2Driver",
            EndpointPolicy::OutBoundNat(_) => "OutBoundNAT",
            EndpointPolicy::SdnRoute(_) => "SDNRoute",
            EndpointPolicy::L4Proxy(_) => "L4Proxy",
            EndpointPolicy::L4WfpProxy(_) => "L4WFPPROXY",
            EndpointPolicy::PortName(_) => "PortName",
            EndpointPolicy::EncapOverhead(_) => "EncapOverhead",
            EndpointPolicy::Iov(_) => "Iov",
            EndpointPolicy::ProviderAddress(_) => "ProviderAddress",
            EndpointPolicy::InterfaceConstraint(_) => "InterfaceConstraint",
            EndpointPolicy::TierAcl(_) => "TierAcl",
        }
    }
}

/// A policy on a network (`NetworkPolicyType`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Type", content = "Settings")]
pub enum NetworkPolicy {
    SourceMacAddress(SourceMacAddressPolicySetting),
    NetAdapterName(NetAdapterNamePolicySetting),
    VSwitchExtension(VSwitchExtensionPolicySetting),
    DrMacAddress(DrMacAddressPolicySetting),
    #[serde(rename = "AutomaticDNS")]
    AutomaticDns(AutomaticDnsPolicySetting),
    InterfaceConstraint(InterfaceConstraintPolicySetting),
    ProviderAddress(ProviderAddressPolicySetting),
    RemoteSubnetRoute(RemoteSubnetRoutePolicySetting),
    VxlanPort(VxlanPortPolicySetting),
    HostRoute(HostRoutePolicySetting),
    SetPolicy(SetPolicySetting),
    L4Proxy(L4ProxyPolicySetting),
    LayerConstraint(LayerConstraintPolicySetting),
    #[serde(rename = "NetworkACL")]
    NetworkAcl(AclPolicySetting),
    NeighborDiscovery(NeighborDiscoveryPolicySetting),
}

impl NetworkPolicy {
    /// The canonical `Type` string.
    pub fn type_name(&self) -> &'static str {
        match self {
            NetworkPolicy::SourceMacAddress(_) => "SourceMacAddress",
            NetworkPolicy::NetAdapterName(_) => "NetAdapterName",
            NetworkPolicy::VSwitchExtension(_) => "VSwitchExtension",
            NetworkPolicy::DrMacAddress(_) => "DrMacAddress",
            NetworkPolicy::AutomaticDns(_) => "AutomaticDNS",
            NetworkPolicy::InterfaceConstraint(_) => "InterfaceConstraint",
            NetworkPolicy::ProviderAddress(_) => "ProviderAddress",
            NetworkPolicy::RemoteSubnetRoute(_) => "RemoteSubnetRoute",
            NetworkPolicy::VxlanPort(_) => "VxlanPort",
            NetworkPolicy::HostRoute(_) => "HostRoute",
            NetworkPolicy::SetPolicy(_) => "SetPolicy",
            NetworkPolicy::L4Proxy(_) => "L4Proxy",
            NetworkPolicy::LayerConstraint(_) => "LayerConstraint",
            NetworkPolicy::NetworkAcl(_) => "NetworkACL",
            NetworkPolicy::NeighborDiscovery(_) => "NeighborDiscovery",
        }
    }
}

/// A policy on a subnet: its VLAN or its VSID (the VXLAN VNI on Overlay).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Type", content = "Settings")]
pub enum SubnetPolicy {
    #[serde(rename = "VLAN")]
    Vlan(IsolationIdSetting),
    #[serde(rename = "VSID")]
    Vsid(IsolationIdSetting),
}

/// `PortMapping`: a host port forwarded to the endpoint (NAT networks, win-bridge portMappings).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PortMappingPolicySetting {
    #[serde(deserialize_with = "protocol", skip_serializing_if = "is_default")]
    pub protocol: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub internal_port: u16,
    #[serde(skip_serializing_if = "is_default")]
    pub external_port: u16,
    #[serde(
        rename = "VIP",
        deserialize_with = "opt_ip",
        skip_serializing_if = "Option::is_none"
    )]
    pub vip: Option<IpAddr>,
    /// `NatFlags`: 1 LocalRoutedVip, 2 IPv6, 4 ExternalPortReserved.
    #[serde(skip_serializing_if = "is_default")]
    pub flags: u32,
}

string_enum! {
    /// What an ACL rule does with a matching packet.
    AclAction { Allow = "Allow", Block = "Block", Pass = "Pass" }
}

string_enum! {
    /// Which way an ACL rule applies, seen from the endpoint.
    AclDirection { In = "In", Out = "Out" }
}

string_enum! {
    /// Where an ACL is enforced: `Host` (WFP) or `Switch` (VFP).
    AclRuleType { Host = "Host", Switch = "Switch" }
}

/// `ACL` (and the network policy `NetworkACL`): a prioritised allow/block rule. The lower
/// `Priority` number wins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AclPolicySetting {
    /// The rule's name (`Id`; HNS refuses the spelling `ID`). Agents name their rules with it
    /// (Azure NPM `azure-acl-<ns>-<policy>`, Calico `policy-<name>-<n>`); VFP shows it as the
    /// rule's friendly name.
    #[serde(rename = "Id", default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Protocol numbers, comma separated ("6", "6,17"); empty or 256 for any.
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub protocols: AclProtocols,
    pub action: AclAction,
    pub direction: AclDirection,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub local_addresses: AclAddresses,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub remote_addresses: AclAddresses,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub local_ports: AclPorts,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub remote_ports: AclPorts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_type: Option<AclRuleType>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: u16,
}

/// `QOS`: an egress bandwidth cap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct QosPolicySetting {
    pub maximum_outgoing_bandwidth_in_bytes: u64,
}

/// `OutBoundNAT`: SNAT to the host address except toward `Exceptions`; `Destinations` for
/// loopback DSR.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct OutboundNatPolicySetting {
    #[serde(
        rename = "VirtualIP",
        deserialize_with = "opt_ip",
        skip_serializing_if = "Option::is_none"
    )]
    pub virtual_ip: Option<IpAddr>,
    #[serde(
        deserialize_with = "prefix_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub exceptions: Vec<String>,
    #[serde(
        deserialize_with = "prefix_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub destinations: Vec<String>,
    #[serde(skip_serializing_if = "is_default")]
    pub flags: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub max_port_pool_usage: u16,
}

/// `SDNRoute` (endpoint policy, and each entry of an SDN route object's `Setting`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SdnRoutePolicySetting {
    #[serde(
        deserialize_with = "opt_prefix",
        skip_serializing_if = "Option::is_none"
    )]
    pub destination_prefix: Option<IpNet>,
    #[serde(deserialize_with = "opt_ip", skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<IpAddr>,
    #[serde(skip_serializing_if = "is_default")]
    pub need_encap: bool,
}

/// `L4Proxy`: redirect matching traffic to a local proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct L4ProxyPolicySetting {
    #[serde(
        rename = "IP",
        deserialize_with = "opt_ip",
        skip_serializing_if = "Option::is_none"
    )]
    pub ip: Option<IpAddr>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub port: String,
    #[serde(deserialize_with = "protocol", skip_serializing_if = "is_default")]
    pub protocol: u32,
    #[serde(
        deserialize_with = "prefix_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub exceptions: Vec<String>,
    pub destination: String,
    #[serde(rename = "OutboundNAT", skip_serializing_if = "is_default")]
    pub outbound_nat: bool,
}

/// The 5-tuple filter of an `L4WFPPROXY` policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct FiveTuple {
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub protocols: AclProtocols,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub local_addresses: AclAddresses,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub remote_addresses: AclAddresses,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub local_ports: AclPorts,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub remote_ports: AclPorts,
    #[serde(skip_serializing_if = "is_default")]
    pub priority: u16,
}

/// Addresses and ports an `L4WFPPROXY` policy leaves alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ProxyExceptions {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ip_address_exceptions: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub port_exceptions: Vec<String>,
}

/// `L4WFPPROXY`: a WFP-based transparent proxy (Istio-style sidecars on Windows).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct L4WfpProxyPolicySetting {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub inbound_proxy_port: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub outbound_proxy_port: String,
    pub filter_tuple: FiveTuple,
    #[serde(rename = "UserSID", skip_serializing_if = "String::is_empty")]
    pub user_sid: String,
    pub inbound_exceptions: ProxyExceptions,
    pub outbound_exceptions: ProxyExceptions,
}

/// `PortName`: the switch port name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PortnamePolicySetting {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// `EncapOverhead`: bytes the encapsulation takes from the MTU (50 for VXLAN).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct EncapOverheadPolicySetting {
    #[serde(skip_serializing_if = "is_default")]
    pub overhead: u16,
}

impl EncapOverheadPolicySetting {
    /// The MTU of a vNIC before encapsulation takes its share: Ethernet's.
    pub const BASE_MTU: u16 = 1500;
    /// The smallest MTU an interface may have for IPv4 (RFC 791; Linux's `ETH_MIN_MTU`).
    pub const MIN_MTU: u16 = 68;

    /// The vNIC's MTU with this overhead; `None` when less than [`Self::MIN_MTU`] is left.
    pub fn mtu(&self) -> Option<u16> {
        Self::BASE_MTU
            .checked_sub(self.overhead)
            .filter(|m| *m >= Self::MIN_MTU)
    }
}

/// `Iov`: SR-IOV offload settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct IovPolicySetting {
    #[serde(skip_serializing_if = "is_default")]
    pub iov_offload_weight: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub queue_pairs_requested: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub interrupt_moderation: u32,
}

/// `ProviderAddress`: the underlay (PA) address that hosts a remote endpoint, or the network's
/// management address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ProviderAddressPolicySetting {
    pub provider_address: IpAddr,
}

/// `InterfaceConstraint`: binds to one host interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct InterfaceConstraintPolicySetting {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub interface_guid: String,
    #[serde(skip_serializing_if = "is_default")]
    pub interface_luid: u64,
    #[serde(skip_serializing_if = "is_default")]
    pub interface_index: u32,
    #[serde(skip_serializing_if = "is_default")]
    pub interface_media_type: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub interface_alias: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub interface_description: String,
}

/// One rule of a `TierAcl`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TierAclRule {
    #[serde(
        rename = "Id",
        alias = "ID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub id: String,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub protocols: AclProtocols,
    /// `Allow`, `Block`, or `Pass` (on to the next tier).
    pub tier_acl_rule_action: AclAction,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub local_addresses: AclAddresses,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub remote_addresses: AclAddresses,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub local_ports: AclPorts,
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub remote_ports: AclPorts,
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: u16,
}

/// `TierAcl`: an ordered tier of ACL rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TierAclPolicySetting {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub direction: AclDirection,
    #[serde(default, skip_serializing_if = "is_default")]
    pub order: u16,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tier_acl_rules: Vec<TierAclRule>,
}

/// `SourceMacAddress`: the MAC the switch uses as source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SourceMacAddressPolicySetting {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_mac_address: Option<MacAddress>,
}

/// `NetAdapterName`: binds the vSwitch to this host NIC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NetAdapterNamePolicySetting {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub network_adapter_name: String,
}

/// `VSwitchExtension`: enables a vSwitch extension.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VSwitchExtensionPolicySetting {
    #[serde(rename = "ExtensionID", skip_serializing_if = "String::is_empty")]
    pub extension_id: String,
    #[serde(skip_serializing_if = "is_default")]
    pub enable: bool,
}

/// `DrMacAddress`: the distributed-router MAC of an Overlay network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DrMacAddressPolicySetting {
    pub address: MacAddress,
}

/// `AutomaticDNS`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AutomaticDnsPolicySetting {
    #[serde(skip_serializing_if = "is_default")]
    pub enable: bool,
}

/// `RemoteSubnetRoute`: a remote node's pod subnet behind its PA, encapsulated with the VSID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RemoteSubnetRoutePolicySetting {
    pub destination_prefix: IpNet,
    #[serde(default, skip_serializing_if = "is_default")]
    pub isolation_id: u16,
    pub provider_address: IpAddr,
    pub distributed_router_mac_address: MacAddress,
}

/// `VxlanPort`: the UDP port of VXLAN (4789 unless set).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VxlanPortPolicySetting {
    #[serde(skip_serializing_if = "is_default")]
    pub port: u16,
}

/// `HostRoute`: host <-> local pod on Overlay. No settings (`{}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRoutePolicySetting {}

string_enum! {
    /// What a `SetPolicy` holds: addresses (`IPSET`) or other sets (`NESTEDIPSET`).
    SetPolicyType { IpSet = "IPSET", NestedIpSet = "NESTEDIPSET" }
}

/// `SetPolicy`: a named set of addresses, or of other sets, that ACL addresses name by `Id`
/// (Azure NPM's pod and namespace selectors).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SetPolicySetting {
    #[serde(
        rename = "Id",
        alias = "ID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(deserialize_with = "set_policy_type")]
    pub policy_type: SetPolicyType,
    /// Members, comma separated: addresses and prefixes (`IPSET`) or set IDs (`NESTEDIPSET`).
    #[serde(default, skip_serializing_if = "AclList::is_unwritten")]
    pub values: AclAddresses,
}

/// `LayerConstraint`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LayerConstraintPolicySetting {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub layer_id: String,
}

/// `NeighborDiscovery` (SDN PowerShell module only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NeighborDiscoveryPolicySetting {
    #[serde(
        deserialize_with = "opt_prefix",
        skip_serializing_if = "Option::is_none"
    )]
    pub target_ip_prefix: Option<IpNet>,
    #[serde(deserialize_with = "opt_ip", skip_serializing_if = "Option::is_none")]
    pub sender_ip_address: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sender_mac_address: Option<MacAddress>,
}

/// `VLAN` / `VSID` settings: `{"IsolationId": n}`, always written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct IsolationIdSetting {
    pub isolation_id: u32,
}

/// `PolicyType` of a set policy: `IPSET` or `NESTEDIPSET`; the PowerShell module sends 0 or 1.
fn set_policy_type<'de, D: Deserializer<'de>>(d: D) -> Result<SetPolicyType, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) if s.eq_ignore_ascii_case("IPSET") => Ok(SetPolicyType::IpSet),
        serde_json::Value::String(s) if s.eq_ignore_ascii_case("NESTEDIPSET") => {
            Ok(SetPolicyType::NestedIpSet)
        }
        serde_json::Value::Number(n) if n.as_u64() == Some(0) => Ok(SetPolicyType::IpSet),
        serde_json::Value::Number(n) if n.as_u64() == Some(1) => Ok(SetPolicyType::NestedIpSet),
        other => Err(serde::de::Error::custom(format!(
            "{other} is not a set policy type; use \"IPSET\" or \"NESTEDIPSET\""
        ))),
    }
}
