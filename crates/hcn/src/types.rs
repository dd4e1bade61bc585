//! Value types shared by every HNS object: GUIDs, MAC addresses, schema versions, DNS, health.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::serde_util::is_default;

/// An HNS object ID. HNS prints GUIDs in upper case without braces; any case, with or without
/// braces, is accepted on input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Guid(pub uuid::Uuid);

impl Guid {
    /// A new random GUID, as HNS assigns when a create names none.
    pub fn new_v4() -> Self {
        Guid(uuid::Uuid::new_v4())
    }

    /// True for the all-zero GUID, which HNS treats as "none given".
    pub fn is_nil(&self) -> bool {
        self.0.is_nil()
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = uuid::Uuid::encode_buffer();
        f.write_str(self.0.hyphenated().encode_upper(&mut buf))
    }
}

impl FromStr for Guid {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().trim_start_matches('{').trim_end_matches('}');
        uuid::Uuid::parse_str(t).map(Guid).map_err(|_| {
            format!("\"{s}\" is not a GUID; write it as 8-4-4-4-12 hex digits, e.g. 5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D")
        })
    }
}

impl Serialize for Guid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Guid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A MAC address. HNS writes `00-15-5D-52-C0-00`; dashes or colons, any case, are accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddress(pub [u8; 6]);

impl MacAddress {
    /// The address as a 48-bit number, for pool arithmetic.
    pub fn to_u64(self) -> u64 {
        self.0
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
    }

    /// The address whose 48-bit number is `v` (upper bits ignored).
    pub fn from_u64(v: u64) -> Self {
        let b = v.to_be_bytes();
        MacAddress([b[2], b[3], b[4], b[5], b[6], b[7]])
    }

    /// Why the address cannot be a NIC's: all zeros, broadcast, or multicast (the low bit of
    /// its first byte set); `None` for a unicast address.
    pub fn not_unicast(self) -> Option<&'static str> {
        if self.0 == [0; 6] {
            Some("the zero address")
        } else if self.0 == [0xff; 6] {
            Some("the broadcast address")
        } else if self.0[0] & 1 == 1 {
            Some("a multicast address (the low bit of its first byte is set)")
        } else {
            None
        }
    }
}

impl fmt::Display for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02X}-{:02X}-{:02X}-{:02X}-{:02X}-{:02X}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl FromStr for MacAddress {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "\"{s}\" is not a MAC address; write six hex bytes joined by dashes, e.g. 00-15-5D-52-C0-00"
            )
        };
        let parts: Vec<&str> = s.split(['-', ':']).collect();
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(parts) {
            if part.len() != 2 {
                return Err(bad());
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        Ok(MacAddress(mac))
    }
}

impl Serialize for MacAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `SchemaVersion` of an HCN document. hcsshim sends `{2, 0}` unless told otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SchemaVersion {
    #[serde(default)]
    pub major: u32,
    #[serde(default)]
    pub minor: u32,
}

impl Default for SchemaVersion {
    fn default() -> Self {
        SchemaVersion { major: 2, minor: 0 }
    }
}

/// DNS settings of a network or endpoint. Always marshalled (a Go struct field), as `{}` when empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Dns {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_list: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

/// `Health` of an object: always marshalled as `{"Extra":{}}` at least.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Health {
    #[serde(skip_serializing_if = "is_default")]
    pub data: serde_json::Value,
    pub extra: HealthExtra,
}

/// The `Extra` part of [`Health`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct HealthExtra {
    #[serde(skip_serializing_if = "is_default")]
    pub resources: serde_json::Value,
    #[serde(skip_serializing_if = "is_default")]
    pub shared_containers: serde_json::Value,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub layered_on: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub switch_guid: String,
    #[serde(rename = "UtilityVM", skip_serializing_if = "String::is_empty")]
    pub utility_vm: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub virtual_machine: String,
}

/// IP protocol numbers as HNS uses them (`PortMappings[].Protocol`, ACL `Protocols`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Protocol;

impl Protocol {
    pub const UNKNOWN: u32 = 0;
    pub const ICMPV4: u32 = 1;
    pub const IGMP: u32 = 2;
    pub const TCP: u32 = 6;
    pub const UDP: u32 = 17;
    pub const ICMPV6: u32 = 58;

    /// The protocol number for a name or number as configs write it (`tcp`, `UDP`, `6`).
    pub fn parse(s: &str) -> Option<u32> {
        match s.trim().to_ascii_lowercase().as_str() {
            "tcp" => Some(Self::TCP),
            "udp" => Some(Self::UDP),
            "icmp" | "icmpv4" => Some(Self::ICMPV4),
            "icmpv6" => Some(Self::ICMPV6),
            "igmp" => Some(Self::IGMP),
            other => other.parse::<u8>().ok().map(u32::from),
        }
    }
}
