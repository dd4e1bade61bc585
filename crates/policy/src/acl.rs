//! What a plan asks HNS for: ACL rules per endpoint and (for the npm style) network IP sets,
//! written as each peer writes them: v1 `ACL` policies (Calico: numeric `Protocol`, 256 = any,
//! in the endpoint's policy list) or v2 `ACL` endpoint policies (NPM: `Settings` with `Id` and
//! `Protocols` as text), and `SetPolicy` network policies.

use hcn::policy::{
    AclAction, AclDirection, AclPolicySetting, AclRuleType, PortRange, SetPolicySetting,
    SetPolicyType,
};
use hcn::{Endpoint, EndpointPolicy};
use serde_json::{Map, Value, json};

use crate::problem::Style;

/// HNS's protocol number for "any protocol" in v1 ACLs.
pub const ANY_PROTOCOL: u16 = 256;

/// One ACL rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Acl {
    /// `Id`: names the rule in HNS and in `vfpctrl` (empty: none).
    pub id: String,
    /// The IP protocol; `None` for any.
    pub protocol: Option<u8>,
    pub action: AclAction,
    pub direction: AclDirection,
    /// The endpoint's side: addresses, prefixes, or (npm) set IDs.
    pub local_addresses: Vec<String>,
    /// The peer's side.
    pub remote_addresses: Vec<String>,
    pub local_ports: Vec<PortRange>,
    pub remote_ports: Vec<PortRange>,
    pub rule_type: AclRuleType,
    pub priority: u16,
}

impl Acl {
    /// A Switch rule matching everything of `direction`.
    pub fn any(action: AclAction, direction: AclDirection, priority: u16) -> Acl {
        Acl {
            id: String::new(),
            protocol: None,
            action,
            direction,
            local_addresses: Vec::new(),
            remote_addresses: Vec::new(),
            local_ports: Vec::new(),
            remote_ports: Vec::new(),
            rule_type: AclRuleType::Switch,
            priority,
        }
    }

    /// The v1 policy Calico sends (`hns.ACLPolicy`): every field Go writes without
    /// `omitempty` is there, empty lists are left out.
    pub fn v1_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("Type".into(), json!("ACL"));
        if !self.id.is_empty() {
            m.insert("Id".into(), json!(self.id));
        }
        let protocol = self.protocol.map_or(ANY_PROTOCOL, u16::from);
        m.insert("Protocol".into(), json!(protocol));
        m.insert("Action".into(), json!(self.action.to_string()));
        m.insert("Direction".into(), json!(self.direction.to_string()));
        self.insert_lists(&mut m);
        m.insert("RuleType".into(), json!(self.rule_type.to_string()));
        m.insert("Priority".into(), json!(self.priority));
        Value::Object(m)
    }

    /// The v2 endpoint policy NPM sends: `{"Type":"ACL","Settings":{...}}`, `Protocols`
    /// left out for any protocol.
    pub fn v2_json(&self) -> Value {
        let mut m = Map::new();
        if !self.id.is_empty() {
            m.insert("Id".into(), json!(self.id));
        }
        if let Some(p) = self.protocol {
            m.insert("Protocols".into(), json!(p.to_string()));
        }
        m.insert("Action".into(), json!(self.action.to_string()));
        m.insert("Direction".into(), json!(self.direction.to_string()));
        self.insert_lists(&mut m);
        m.insert("RuleType".into(), json!(self.rule_type.to_string()));
        m.insert("Priority".into(), json!(self.priority));
        json!({"Type": "ACL", "Settings": Value::Object(m)})
    }

    fn insert_lists(&self, m: &mut Map<String, Value>) {
        let ports = |p: &[PortRange]| {
            p.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        for (key, text) in [
            ("LocalAddresses", self.local_addresses.join(",")),
            ("RemoteAddresses", self.remote_addresses.join(",")),
            ("LocalPorts", ports(&self.local_ports)),
            ("RemotePorts", ports(&self.remote_ports)),
        ] {
            if !text.is_empty() {
                m.insert(key.into(), json!(text));
            }
        }
    }

    /// The rule in one line, for logs and lint output.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "{} {} priority {}",
            self.action, self.direction, self.priority
        );
        if !self.id.is_empty() {
            s = format!("{} ({s})", self.id);
        }
        if let Some(p) = self.protocol {
            s.push_str(&format!(" protocol {p}"));
        }
        for (k, v) in [
            ("local", self.local_addresses.join(",")),
            ("remote", self.remote_addresses.join(",")),
        ] {
            if !v.is_empty() {
                s.push_str(&format!(" {k} {v}"));
            }
        }
        for (k, v) in [
            ("local ports", &self.local_ports),
            ("remote ports", &self.remote_ports),
        ] {
            if !v.is_empty() {
                let text: Vec<String> = v.iter().map(ToString::to_string).collect();
                s.push_str(&format!(" {k} {}", text.join(",")));
            }
        }
        s
    }
}

/// A network `SetPolicy`'s kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetKind {
    /// `IPSET`: addresses.
    IpSet,
    /// `NESTEDIPSET`: IDs of IP sets.
    Nested,
}

/// An IP set NPM names in ACL addresses.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IpSet {
    /// `azure-npm-<fnv32a of name>`.
    pub id: String,
    /// The set's name before hashing (`ns-x`, `podlabel-app:web`).
    pub name: String,
    pub kind: SetKind,
    /// Addresses (IPSET) or member set IDs (NESTEDIPSET), sorted.
    pub members: Vec<String>,
}

impl IpSet {
    /// The network policy JSON NPM sends.
    pub fn json(&self) -> Value {
        let policy_type = match self.kind {
            SetKind::IpSet => "IPSET",
            SetKind::Nested => "NESTEDIPSET",
        };
        json!({"Type": "SetPolicy", "Settings": {"Id": self.id, "Name": self.name,
            "PolicyType": policy_type, "Values": self.members.join(",")}})
    }

    /// The `SetPolicy` settings as HNS reads them.
    pub fn setting(&self) -> Result<SetPolicySetting, String> {
        let bad = |e: String| format!("set {} ({}) cannot be written: {e}", self.name, self.id);
        let setting: SetPolicySetting = serde_json::from_value(self.json()["Settings"].clone())
            .map_err(|e| bad(e.to_string()))?;
        let kind_ok = match self.kind {
            SetKind::IpSet => setting.policy_type == SetPolicyType::IpSet,
            SetKind::Nested => setting.policy_type == SetPolicyType::NestedIpSet,
        };
        kind_ok
            .then_some(setting)
            .ok_or_else(|| bad("its type did not read back".into()))
    }
}

/// NPM's set ID: `azure-npm-` and the 32-bit FNV-1a hash of the name, in decimal.
pub fn set_id(name: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("azure-npm-{h}")
}

/// `acls` as HNS reads them (v1 JSON for calico, v2 for npm, decoded by hcn's reader), the
/// same rule listed twice kept once.
pub fn hcn_acls(acls: &[Acl], style: Style) -> Result<Vec<AclPolicySetting>, String> {
    let policies: Vec<Value> = acls
        .iter()
        .map(|a| match style {
            Style::Calico => a.v1_json(),
            Style::Npm => a.v2_json(),
        })
        .collect();
    let ep: Endpoint = hcn::decode_value(json!({ "Policies": policies }))
        .map_err(|e| format!("the ACLs cannot be sent: {}: {}", e.path, e.message))?;
    let mut out: Vec<AclPolicySetting> = Vec::with_capacity(acls.len());
    for p in ep.policies {
        if let EndpointPolicy::Acl(a) = p
            && !out.contains(&a)
        {
            out.push(a);
        }
    }
    Ok(out)
}
