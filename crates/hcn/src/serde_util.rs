//! Helpers for hcsshim's marshalling rules: Go's `omitempty` and HNS's lenient input.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

/// Go's `omitempty` for any type whose zero value is its `Default`.
pub fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// An optional IP address; `""` means none, as Go's empty string does.
pub fn opt_ip<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    match s.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => parse_ip(t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// One IP address with an error that says how to write one; decoded element by element so
/// that an error names the index (`FrontendVIPs[1]`).
struct Ip(IpAddr);

impl<'de> Deserialize<'de> for Ip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_ip(s.trim()).map(Ip).map_err(serde::de::Error::custom)
    }
}

/// A list of IP addresses.
pub fn ip_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpAddr>, D::Error> {
    let v: Option<Vec<Ip>> = Option::deserialize(d)?;
    Ok(v.unwrap_or_default().into_iter().map(|ip| ip.0).collect())
}

/// An optional CIDR prefix; `""` means none.
pub fn opt_prefix<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpNet>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    match s.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => parse_prefix(t).map(Some).map_err(serde::de::Error::custom),
    }
}

/// Parses an IP address with an error that says how to write one.
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("\"{s}\" is not an IP address; write e.g. 10.244.1.5 or fd00::5"))
}

/// Parses a CIDR prefix; a bare address is taken as a host prefix (/32 or /128), as HNS does for
/// exception lists.
pub fn parse_prefix(s: &str) -> Result<IpNet, String> {
    if !s.contains('/') {
        return parse_ip(s).map(IpNet::from);
    }
    s.parse().map_err(|_| {
        format!("\"{s}\" is not a CIDR prefix; write address/length, e.g. 10.244.0.0/16 (IPv4 length <= 32, IPv6 <= 128)")
    })
}

/// Prefixes or addresses as a list of strings, each validated, kept as written.
pub fn prefix_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v: Option<Vec<String>> = Option::deserialize(d)?;
    let v = v.unwrap_or_default();
    for s in &v {
        if !s.trim().is_empty() {
            parse_prefix(s.trim()).map_err(serde::de::Error::custom)?;
        }
    }
    Ok(v.into_iter().filter(|s| !s.trim().is_empty()).collect())
}

/// A protocol given as a number or a name (`6`, `"6"`, `"tcp"`), as v1 configs write it.
pub fn protocol<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrName {
        Num(u32),
        Name(String),
    }
    match NumOrName::deserialize(d)? {
        NumOrName::Num(n) if n <= 255 => Ok(n),
        NumOrName::Num(n) => Err(serde::de::Error::custom(format!(
            "protocol {n} is not an IP protocol number (0-255); use 6 for TCP or 17 for UDP"
        ))),
        NumOrName::Name(s) => crate::types::Protocol::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "\"{s}\" is not a protocol; use 6 (TCP), 17 (UDP), 1 (ICMP) or a name like \"tcp\""
            ))
        }),
    }
}

/// Declares a string enum whose JSON values match case-insensitively and are written canonically.
macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Every canonical spelling, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The canonical spelling.
            pub fn as_str(&self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                $(if s.eq_ignore_ascii_case($text) { return Ok($name::$variant); })+
                Err(format!("\"{}\" is not one of {}", s, Self::NAMES.join(", ")))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use string_enum;
