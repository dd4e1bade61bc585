//! The match lists of ACL policies (`Protocols`, `LocalAddresses`, `RemoteAddresses`,
//! `LocalPorts`, `RemotePorts`): comma-separated text in HNS's JSON, parsed once when a policy
//! is decoded or made, and written back exactly as it was given, so the API round-trips what a
//! client sent while everything downstream works on the parsed values.

use std::fmt;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::serde_util::parse_prefix;

/// One entry of an ACL list, as HNS writes it.
pub trait AclEntry: Sized {
    /// Reads one entry (trimmed, not empty); the error says how to write one.
    fn parse_entry(s: &str) -> Result<Self, String>;

    /// True when the entry stands for anything, which makes its whole list match anything
    /// (the protocol 256).
    fn is_wildcard(_s: &str) -> bool {
        false
    }
}

/// The protocol number HNS reads as "any protocol" (v1 `Protocol`, and v2 `Protocols` as
/// Calico's CNI and Azure NPM write it).
pub const ANY_PROTOCOL: u16 = 256;

/// A protocol number (`6`); `256` is any protocol.
impl AclEntry for u8 {
    fn parse_entry(s: &str) -> Result<u8, String> {
        s.parse().map_err(|_| {
            format!(
                "\"{s}\" is not a protocol number; write numbers from 0 to 255 separated by commas, e.g. \"6,17\", or 256 (or nothing) for any"
            )
        })
    }

    fn is_wildcard(s: &str) -> bool {
        s.parse::<u16>() == Ok(ANY_PROTOCOL)
    }
}

/// An entry of `LocalAddresses` / `RemoteAddresses`: an address or a prefix (an address is a
/// host prefix), or the `Id` of a network `SetPolicy` (Azure NPM's `azure-npm-3216600258`),
/// which stands for the set's members.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum AclAddress {
    Prefix(IpNet),
    Set(String),
}

impl AclAddress {
    /// The prefix, when the entry is one.
    pub fn prefix(&self) -> Option<IpNet> {
        match self {
            AclAddress::Prefix(p) => Some(*p),
            AclAddress::Set(_) => None,
        }
    }

    /// The set ID, when the entry names a set.
    pub fn set(&self) -> Option<&str> {
        match self {
            AclAddress::Prefix(_) => None,
            AclAddress::Set(id) => Some(id),
        }
    }
}

/// What looks like an address (a digit first, or a colon anywhere) must be one; anything else
/// is a set ID, resolved against the network's `SetPolicy` list when the policy is applied.
impl AclEntry for AclAddress {
    fn parse_entry(s: &str) -> Result<AclAddress, String> {
        if s.starts_with(|c: char| c.is_ascii_digit()) || s.contains(':') {
            parse_prefix(s).map(AclAddress::Prefix)
        } else {
            Ok(AclAddress::Set(s.to_string()))
        }
    }
}

impl From<IpNet> for AclAddress {
    fn from(p: IpNet) -> AclAddress {
        AclAddress::Prefix(p)
    }
}

impl fmt::Display for AclAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclAddress::Prefix(p) => write!(f, "{p}"),
            AclAddress::Set(id) => f.write_str(id),
        }
    }
}

/// An inclusive range of L4 ports, as an ACL writes it: `80` or `8000-8080`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Last port (inclusive).
    pub last: u16,
}

impl PortRange {
    /// A single port.
    pub fn one(port: u16) -> PortRange {
        PortRange {
            first: port,
            last: port,
        }
    }
}

impl AclEntry for PortRange {
    fn parse_entry(s: &str) -> Result<PortRange, String> {
        let bad =
            || format!("\"{s}\" is not a port or port range; write e.g. 80 or 8000-8080 (0-65535)");
        let (lo, hi) = match s.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (s, s),
        };
        let first: u16 = lo.parse().map_err(|_| bad())?;
        let last: u16 = hi.parse().map_err(|_| bad())?;
        if first > last {
            return Err(bad());
        }
        Ok(PortRange { first, last })
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// A comma-separated ACL list: the text as given and the entries read from it. A list with no
/// entries (the field left out or empty) matches anything, as in HNS.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AclList<T> {
    text: String,
    entries: Vec<T>,
}

/// `Protocols`: IP protocol numbers.
pub type AclProtocols = AclList<u8>;
/// `LocalAddresses` / `RemoteAddresses`: prefixes (an address is a host prefix) and set IDs.
pub type AclAddresses = AclList<AclAddress>;
/// `LocalPorts` / `RemotePorts`: inclusive port ranges.
pub type AclPorts = AclList<PortRange>;

impl<T> AclList<T> {
    /// The empty list: anything matches.
    pub fn any() -> AclList<T> {
        AclList {
            text: String::new(),
            entries: Vec::new(),
        }
    }

    /// The entries; empty means anything matches.
    pub fn entries(&self) -> &[T] {
        &self.entries
    }

    /// True when the list restricts nothing.
    pub fn is_any(&self) -> bool {
        self.entries.is_empty()
    }

    /// The list as it was written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True when nothing was written (the field is then left out of the JSON, as Go's
    /// `omitempty` does).
    pub fn is_unwritten(&self) -> bool {
        self.text.is_empty()
    }
}

impl<T> Default for AclList<T> {
    fn default() -> Self {
        AclList::any()
    }
}

impl<T: AclEntry> FromStr for AclList<T> {
    type Err = String;

    /// Reads every entry or fails on the first that does not parse (never skips one: a
    /// skipped entry would make a Block rule match more than was asked for, or an Allow less).
    /// A wildcard entry (protocol 256) makes the list match anything.
    fn from_str(text: &str) -> Result<AclList<T>, String> {
        let written: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        let entries = if written.iter().any(|e| T::is_wildcard(e)) {
            Vec::new()
        } else {
            written
                .into_iter()
                .map(T::parse_entry)
                .collect::<Result<_, _>>()?
        };
        Ok(AclList {
            text: text.to_string(),
            entries,
        })
    }
}

/// A list made of values, written the way HNS writes it (`"80,8000-8080"`).
impl<T: fmt::Display> From<Vec<T>> for AclList<T> {
    fn from(entries: Vec<T>) -> AclList<T> {
        let text = entries
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        AclList { text, entries }
    }
}

impl<T> fmt::Display for AclList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl AclAddresses {
    /// The prefixes the list names directly.
    pub fn prefixes(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.entries.iter().filter_map(AclAddress::prefix)
    }

    /// The set IDs the list names.
    pub fn sets(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().filter_map(AclAddress::set)
    }
}

impl<T> Serialize for AclList<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de, T: AclEntry> Deserialize<'de> for AclList<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_their_text_and_their_entries() {
        let a: AclAddresses = "192.168.100.0/24, 10.0.0.21".parse().unwrap();
        assert_eq!(a.as_str(), "192.168.100.0/24, 10.0.0.21");
        assert_eq!(
            a.prefixes().collect::<Vec<_>>(),
            [
                "192.168.100.0/24".parse::<IpNet>().unwrap(),
                "10.0.0.21/32".parse().unwrap()
            ]
        );
        let p: AclPorts = "80,8000-8080".parse().unwrap();
        assert_eq!(
            p.entries(),
            [
                PortRange::one(80),
                PortRange {
                    first: 8000,
                    last: 8080
                }
            ]
        );
        assert_eq!(AclPorts::from(p.entries().to_vec()), p);
        let any: AclProtocols = "".parse().unwrap();
        assert!(any.is_any() && any.is_unwritten());
        let any: AclProtocols = "6,256".parse().unwrap();
        assert!(any.is_any() && any.as_str() == "6,256");
    }

    #[test]
    fn an_address_list_names_sets_by_id() {
        let a: AclAddresses = "azure-npm-3216600258, 10.0.0.0/8, fd00::1".parse().unwrap();
        assert_eq!(a.sets().collect::<Vec<_>>(), ["azure-npm-3216600258"]);
        assert_eq!(a.prefixes().count(), 2);
        let e = "10.0.0.300".parse::<AclAddresses>().unwrap_err();
        assert!(e.contains("10.0.0.300"), "{e}");
        let e = "257".parse::<AclProtocols>().unwrap_err();
        assert!(e.contains("256"), "{e}");
    }

    #[test]
    fn one_bad_entry_refuses_the_whole_list() {
        let e = "10.0.0.0/8,10.0.0.0/33"
            .parse::<AclAddresses>()
            .unwrap_err();
        assert!(e.contains("10.0.0.0/33"), "{e}");
        let e = "80,90-85".parse::<AclPorts>().unwrap_err();
        assert!(e.contains("90-85"), "{e}");
        let e = "6,tcp".parse::<AclProtocols>().unwrap_err();
        assert!(e.contains("\"tcp\""), "{e}");
    }
}
