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
    /// How many rules each owner was given on each port and layer, as the compiler placed
    /// them: what the switch holds unless someone edited it by hand (`winnet vfpctrl`). Empty
    /// in dumps from before it was recorded.
    pub placed: Vec<PlacedDump>,
}

/// The rules one owner was given on one port's layer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PlacedDump {
    /// The port's number.
    pub port: u16,
    pub layer: String,
    pub owner_kind: String,
    pub owner_id: String,
    pub rules: u64,
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
    /// The dynamic port range the SNAT pools draw from.
    pub dynamic_ports: DynamicPortRange,
}

/// The dynamic port range HNS draws SNAT ports from, as Windows sets it (`netsh int ipv4 set
/// dynamicport tcp start=N num=M`): Windows' default is 49152 and 16384 ports (to 65535); netsh
/// takes at least 255 ports from port 1025 up, ending at 65535 at most (Microsoft KB 929851).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DynamicPortRange {
    pub start: u16,
    pub num: u16,
}

impl Default for DynamicPortRange {
    fn default() -> DynamicPortRange {
        DynamicPortRange {
            start: 49152,
            num: 16384,
        }
    }
}

impl DynamicPortRange {
    /// The smallest range netsh sets.
    pub const MIN_PORTS: u16 = 255;
    /// The lowest start port netsh sets.
    pub const MIN_START: u16 = 1025;

    /// A range, checked as netsh checks it.
    pub fn new(start: u16, num: u16) -> Result<DynamicPortRange, String> {
        if start < Self::MIN_START {
            return Err(format!(
                "start={start}: the range starts at port {} or above, as on Windows",
                Self::MIN_START
            ));
        }
        if num < Self::MIN_PORTS {
            return Err(format!(
                "num={num}: the range holds at least {} ports, as on Windows",
                Self::MIN_PORTS
            ));
        }
        if u32::from(start) + u32::from(num) - 1 > u32::from(u16::MAX) {
            return Err(format!(
                "start={start} num={num}: the range would end past port 65535"
            ));
        }
        Ok(DynamicPortRange { start, num })
    }

    /// The last port.
    pub fn last(&self) -> u16 {
        // `new` keeps start + num - 1 within u16; a range read from JSON is clamped.
        let last = u32::from(self.start) + u32::from(self.num.max(1)) - 1;
        u16::try_from(last).unwrap_or(u16::MAX)
    }
}

impl std::str::FromStr for DynamicPortRange {
    type Err = String;

    /// `start=N,num=M` (netsh's words; spaces or commas between them).
    fn from_str(s: &str) -> Result<DynamicPortRange, String> {
        let (mut start, mut num) = (None, None);
        for word in s.split([',', ' ']).filter(|w| !w.is_empty()) {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| format!("\"{word}\" is not start=N or num=M"))?;
            let n: u16 = value
                .parse()
                .map_err(|_| format!("{key}: \"{value}\" is not a number 0-65535"))?;
            match key.to_ascii_lowercase().as_str() {
                "start" => start = Some(n),
                "num" => num = Some(n),
                _ => return Err(format!("{key}: unknown; give start=N,num=M")),
            }
        }
        let start = start.ok_or("start: missing; give start=N,num=M")?;
        let num = num.ok_or("num: missing; give start=N,num=M")?;
        DynamicPortRange::new(start, num)
    }
}

impl std::fmt::Display for DynamicPortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "start={},num={}", self.start, self.num)
    }
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
    /// `<owner kind>:<owner id>:<n>`, the n-th rule its owner put in the group: what
    /// `winnet vfpctrl --remove-rule` takes.
    pub id: String,
    /// The layer's group it is in.
    pub group: String,
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
    /// The rule's friendly name (an ACL's `Id`), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `In` or `Out` when the rule applies one way only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<String>,
    /// IP protocols it matches (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<u8>,
    /// Source prefixes it matches (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<IpNet>,
    /// Source ports it matches.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub source_ports: Vec<String>,
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

/// The route of the operator's rule edits (`winnet vfpctrl`).
pub const RULES_PATH: &str = "/linux/switch/rules";

/// One `winnet vfpctrl` request: list, remove or add rules on one port of the live switch,
/// without touching HNS objects (as Windows' `vfpctrl /port P /layer L /group G ...`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RuleEdit {
    /// The port's number, its name, or the ID of the endpoint it is the vNIC of.
    pub port: String,
    /// Required to remove or add; a list without it shows every layer.
    #[serde(default)]
    pub layer: Option<String>,
    /// Required to remove or add; a list without it shows every group.
    #[serde(default)]
    pub group: Option<String>,
    pub op: EditOp,
}

/// What a [`RuleEdit`] does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EditOp {
    /// Show the rules.
    List,
    /// Remove the rule of this ID ([`RuleDump::id`]).
    Remove(String),
    /// Add a rule, owned by `Operator <name>`.
    Add(crate::rule_spec::RuleSpec),
}

/// The rules of one port after an edit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PortRules {
    pub port: u16,
    pub name: String,
    pub endpoint: Option<String>,
    /// The layers asked for, each with the rules of the groups asked for.
    pub layers: Vec<LayerDump>,
    /// The ID of the rule removed or added.
    pub changed: Option<String>,
}

/// The owner kind of rules added by hand.
pub const OPERATOR: &str = "Operator";

/// A rule's ID from its owner and its index among the owner's rules in its group.
pub fn rule_id(owner_kind: &str, owner_id: &str, index: u32) -> String {
    format!("{owner_kind}:{owner_id}:{index}")
}

/// The owner kind, owner id and index of a rule ID; `None` when it is not one.
pub fn parse_rule_id(id: &str) -> Option<(&str, &str, u32)> {
    let (rest, index) = id.rsplit_once(':')?;
    let (kind, owner) = rest.split_once(':')?;
    if kind.is_empty() || owner.is_empty() {
        return None;
    }
    Some((kind, owner, index.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_read_back() {
        let id = rule_id("Endpoint/ACL", "6f0c3f0e-0000-4000-8000-000000000001/3", 2);
        assert_eq!(
            parse_rule_id(&id),
            Some(("Endpoint/ACL", "6f0c3f0e-0000-4000-8000-000000000001/3", 2))
        );
        assert_eq!(parse_rule_id("Operator:x"), None);
        assert_eq!(parse_rule_id("Operator:x:y"), None);
        assert_eq!(parse_rule_id("::0"), None);
    }

    #[test]
    fn dynamic_port_ranges_are_checked_as_netsh_checks_them() {
        let r: DynamicPortRange = "start=60000,num=255".parse().expect("valid");
        assert_eq!((r.start, r.num, r.last()), (60000, 255, 60254));
        assert_eq!(DynamicPortRange::default().last(), 65535);
        assert_eq!(
            "start=49152 num=16384".parse(),
            Ok(DynamicPortRange::default())
        );
        for (bad, field) in [
            ("start=60000,num=64", "num=64"),
            ("start=80,num=1000", "start=80"),
            ("start=65000,num=1000", "past port 65535"),
            ("start=x,num=300", "start"),
            ("num=300", "start: missing"),
            ("start=60000", "num: missing"),
            ("begin=1", "begin"),
            ("60000", "not start=N"),
        ] {
            let e = bad.parse::<DynamicPortRange>().expect_err(bad);
            assert!(e.contains(field), "{bad}: {e}");
        }
    }
}
