//! `GET /linux/switch`: the node's compiled switch as hnsd's data plane holds it — ports, their
//! layers and rules with the HNS object that owns each and its hit counter, the port counters,
//! the SNAT pools, and the node facts the compiler used. A winnet extension (no HCN function
//! has it); `winnet doctor` compares it with the HNS objects, and `winnet collect` keeps it so
//! that a trace can be replayed from a bundle.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The route of the dump.
pub const PATH: &str = "/linux/switch";

/// The compiled switch of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SwitchDump {
    /// The node's name.
    pub node: String,
    /// What the compiler knew about the node besides the HNS objects.
    pub facts: SwitchFacts,
    /// Every port, with its layers and rules.
    pub ports: Vec<SwitchPort>,
    /// The SNAT pools (one per node address).
    pub snat_pools: Vec<SnatPoolDump>,
    /// What the compiler could not compile, per object.
    pub notices: Vec<NoticeDump>,
}

/// The node facts a compiler was built with (`hns_compiler::NodeFacts` without the resolver,
/// whose answers are in `Neighbors`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SwitchFacts {
    /// The profile's name (`ws2022`, ...).
    pub profile: String,
    /// The management vNIC's MAC, `aa:bb:cc:dd:ee:ff`.
    pub host_mac: String,
    /// The node's addresses with prefixes.
    pub addresses: Vec<IpNet>,
    /// The NIC external networks bind to.
    pub uplink: Option<String>,
    /// The host's routes with a next hop.
    pub routes: Vec<RouteFact>,
    /// The underlay neighbours the compiler could resolve (address, MAC).
    pub neighbors: Vec<(IpAddr, String)>,
}

/// A host route with a next hop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RouteFact {
    pub destination: IpNet,
    pub next_hop: IpAddr,
}

/// One switch port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SwitchPort {
    /// The port's number (what a trace calls it).
    pub id: u16,
    pub name: String,
    /// `Pod`, `Host` or `Uplink`.
    pub kind: String,
    /// The endpoint this port is the vNIC of, if any.
    pub endpoint: Option<String>,
    pub mac: String,
    pub ips: Vec<IpAddr>,
    pub layers: Vec<LayerDump>,
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub drops: u64,
}

/// One layer of a port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LayerDump {
    pub name: String,
    pub rules: Vec<RuleDump>,
}

/// One rule, named by its owner.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RuleDump {
    /// The owner's kind (`LoadBalancer`, `Endpoint`, `Network`, `Endpoint/ACL`, ...).
    pub owner_kind: String,
    /// The owner's id (an HNS GUID, possibly with a `/suffix`).
    pub owner_id: String,
    /// The Kubernetes or user-facing object behind the owner.
    pub source: Option<String>,
    pub priority: u32,
    /// Destination prefixes the rule matches (empty: any).
    pub destinations: Vec<IpNet>,
    /// Destination ports (`80`, `30000-30010`).
    pub destination_ports: Vec<String>,
    /// The action, as the switch prints it.
    pub action: String,
    /// Connections this rule decided.
    pub hits: u64,
}

/// One SNAT pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SnatPoolDump {
    pub address: Option<IpAddr>,
    /// Ports in the range.
    pub size: u64,
    /// Per protocol class (`tcp`, `udp`, `icmp`): ports the busiest remote end holds.
    pub busiest: Vec<(String, u64)>,
}

/// A compiler notice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NoticeDump {
    pub owner: String,
    pub message: String,
}
