//! The rule an operator adds to a live switch (`winnet vfpctrl --add-rule SPEC`, Windows'
//! `vfpctrl /add-rule`): its text form, `key=value` words separated by spaces, and the same
//! rule as hnsd's `POST /linux/switch/rules` carries it.
//!
//! ```text
//! name=block-dns priority=10 dir=out proto=udp dst=10.96.0.10/32 dport=53 action=block
//! ```
//!
//! `name`, `priority` and `action` are required; a missing condition matches anything. Lists
//! are comma-separated (`dst=10.0.0.0/8,192.168.0.0/16`, `dport=80,8000-8080`). Only `allow`
//! and `block` can be added by hand: every other action needs objects (pools, backends,
//! provider addresses) that only the compiler makes from HNS objects.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The longest rule name; it becomes part of the rule's ID.
pub const NAME_MAX: usize = 64;

/// A rule as an operator writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RuleSpec {
    /// What the operator calls it (letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Lower is evaluated first.
    pub priority: u16,
    /// `None` matches both directions.
    #[serde(default)]
    pub direction: Option<SpecDirection>,
    /// IP protocol number; `None` matches any.
    #[serde(default)]
    pub protocol: Option<u8>,
    #[serde(default)]
    pub sources: Vec<IpNet>,
    #[serde(default)]
    pub destinations: Vec<IpNet>,
    /// Inclusive ranges.
    #[serde(default)]
    pub source_ports: Vec<(u16, u16)>,
    #[serde(default)]
    pub destination_ports: Vec<(u16, u16)>,
    pub action: SpecAction,
}

/// Which way a rule matches, as VFP names it: `out` leaves the port's vNIC, `in` arrives at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpecDirection {
    In,
    Out,
}

/// What a hand-added rule does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpecAction {
    Allow,
    Block,
}

/// Why a rule spec was refused, naming the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rule spec: {field}: {message}")]
pub struct SpecError {
    /// The key (`priority`, `dst`, ...), or `spec` for the text as a whole.
    pub field: String,
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> SpecError {
    SpecError {
        field: field.to_string(),
        message: message.into(),
    }
}

const KEYS: [&str; 9] = [
    "name", "priority", "dir", "proto", "src", "dst", "sport", "dport", "action",
];

impl FromStr for RuleSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<RuleSpec, SpecError> {
        let mut seen: Vec<&str> = Vec::new();
        let mut name = None;
        let mut priority = None;
        let mut action = None;
        let mut spec = RuleSpec {
            name: String::new(),
            priority: 0,
            direction: None,
            protocol: None,
            sources: Vec::new(),
            destinations: Vec::new(),
            source_ports: Vec::new(),
            destination_ports: Vec::new(),
            action: SpecAction::Allow,
        };
        for word in text.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else {
                return Err(err(
                    "spec",
                    format!("\"{word}\" is not key=value (keys: {})", KEYS.join(", ")),
                ));
            };
            let key = key.to_ascii_lowercase();
            if key.is_empty() {
                return Err(err("spec", format!("\"{word}\" has no key before '='")));
            }
            let Some(key) = KEYS.iter().find(|k| **k == key) else {
                return Err(err(
                    &key,
                    format!("unknown key (keys: {})", KEYS.join(", ")),
                ));
            };
            if seen.contains(key) {
                return Err(err(key, "given twice"));
            }
            seen.push(key);
            match *key {
                "name" => name = Some(parse_name(value)?),
                "priority" => {
                    priority = Some(value.parse::<u16>().map_err(|_| {
                        err("priority", format!("\"{value}\" is not a number 0-65535"))
                    })?)
                }
                "dir" => spec.direction = Some(parse_direction(value)?),
                "proto" => spec.protocol = Some(parse_protocol(value)?),
                "src" => spec.sources = parse_list("src", value, parse_net)?,
                "dst" => spec.destinations = parse_list("dst", value, parse_net)?,
                "sport" => spec.source_ports = parse_list("sport", value, parse_range)?,
                "dport" => spec.destination_ports = parse_list("dport", value, parse_range)?,
                _ => action = Some(parse_action(value)?),
            }
        }
        spec.name = name.ok_or_else(|| err("name", "missing (name=NAME)"))?;
        spec.priority = priority.ok_or_else(|| err("priority", "missing (priority=N)"))?;
        spec.action = action.ok_or_else(|| err("action", "missing (action=allow|block)"))?;
        spec.check()?;
        Ok(spec)
    }
}

impl RuleSpec {
    /// What the text form checks beyond the syntax, also asked of a spec that came as JSON.
    pub fn check(&self) -> Result<(), SpecError> {
        parse_name(&self.name)?;
        let ported = matches!(self.protocol, Some(6 | 17 | 132));
        if (!self.source_ports.is_empty() || !self.destination_ports.is_empty()) && !ported {
            return Err(err(
                if self.destination_ports.is_empty() {
                    "sport"
                } else {
                    "dport"
                },
                "ports need proto=tcp, udp or sctp",
            ));
        }
        for (field, ranges) in [
            ("sport", &self.source_ports),
            ("dport", &self.destination_ports),
        ] {
            if let Some((a, b)) = ranges.iter().find(|(a, b)| a > b) {
                return Err(err(field, format!("range {a}-{b} ends before it starts")));
            }
        }
        Ok(())
    }
}

fn parse_name(v: &str) -> Result<String, SpecError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if v.is_empty() || v.len() > NAME_MAX || !v.chars().all(ok) {
        return Err(err(
            "name",
            format!(
                "\"{v}\": 1 to {NAME_MAX} letters, digits, '-', '_' or '.' (it becomes part of the rule's ID)"
            ),
        ));
    }
    Ok(v.to_string())
}

fn parse_direction(v: &str) -> Result<SpecDirection, SpecError> {
    match v.to_ascii_lowercase().as_str() {
        "in" => Ok(SpecDirection::In),
        "out" => Ok(SpecDirection::Out),
        _ => Err(err("dir", format!("\"{v}\" is not in or out"))),
    }
}

fn parse_action(v: &str) -> Result<SpecAction, SpecError> {
    match v.to_ascii_lowercase().as_str() {
        "allow" => Ok(SpecAction::Allow),
        "block" => Ok(SpecAction::Block),
        _ => Err(err(
            "action",
            format!(
                "\"{v}\" is not allow or block (other actions are compiled from HNS objects only)"
            ),
        )),
    }
}

fn parse_protocol(v: &str) -> Result<u8, SpecError> {
    match v.to_ascii_lowercase().as_str() {
        "tcp" => Ok(6),
        "udp" => Ok(17),
        "icmp" => Ok(1),
        "icmpv6" => Ok(58),
        "sctp" => Ok(132),
        n => n.parse().map_err(|_| {
            err(
                "proto",
                format!("\"{v}\" is not tcp, udp, icmp, icmpv6, sctp or a number 0-255"),
            )
        }),
    }
}

fn parse_net(field: &str, v: &str) -> Result<IpNet, SpecError> {
    if let Ok(n) = v.parse::<IpNet>() {
        return Ok(n.trunc());
    }
    v.parse::<IpAddr>()
        .map(IpNet::from)
        .map_err(|_| err(field, format!("\"{v}\" is not an address or a prefix")))
}

fn parse_range(field: &str, v: &str) -> Result<(u16, u16), SpecError> {
    let port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| err(field, format!("\"{p}\" is not a port 0-65535")))
    };
    match v.split_once('-') {
        Some((a, b)) => Ok((port(a)?, port(b)?)),
        None => port(v).map(|p| (p, p)),
    }
}

fn parse_list<T>(
    field: &str,
    v: &str,
    one: impl Fn(&str, &str) -> Result<T, SpecError>,
) -> Result<Vec<T>, SpecError> {
    v.split(',').map(|item| one(field, item)).collect()
}

impl fmt::Display for RuleSpec {
    /// The text form, which [`RuleSpec::from_str`] reads back to the same spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "name={} priority={}", self.name, self.priority)?;
        if let Some(d) = self.direction {
            f.write_str(match d {
                SpecDirection::In => " dir=in",
                SpecDirection::Out => " dir=out",
            })?;
        }
        if let Some(p) = self.protocol {
            write!(f, " proto={p}")?;
        }
        let join = |v: &[IpNet]| {
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let ranges = |v: &[(u16, u16)]| {
            v.iter()
                .map(|(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        if !self.sources.is_empty() {
            write!(f, " src={}", join(&self.sources))?;
        }
        if !self.destinations.is_empty() {
            write!(f, " dst={}", join(&self.destinations))?;
        }
        if !self.source_ports.is_empty() {
            write!(f, " sport={}", ranges(&self.source_ports))?;
        }
        if !self.destination_ports.is_empty() {
            write!(f, " dport={}", ranges(&self.destination_ports))?;
        }
        f.write_str(match self.action {
            SpecAction::Allow => " action=allow",
            SpecAction::Block => " action=block",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn field(text: &str) -> String {
        text.parse::<RuleSpec>()
            .expect_err("refused")
            .field
            .to_string()
    }

    #[test]
    fn a_full_spec_reads_as_written() {
        let s: RuleSpec =
            "name=block-dns priority=10 dir=out proto=udp dst=10.96.0.10,10.0.0.0/8 dport=53,1000-1010 action=block"
                .parse()
                .expect("valid");
        assert_eq!(s.name, "block-dns");
        assert_eq!(s.priority, 10);
        assert_eq!(s.direction, Some(SpecDirection::Out));
        assert_eq!(s.protocol, Some(17));
        assert_eq!(
            s.destinations,
            vec![
                "10.96.0.10/32".parse::<IpNet>().expect("net"),
                "10.0.0.0/8".parse().expect("net")
            ]
        );
        assert_eq!(s.destination_ports, vec![(53, 53), (1000, 1010)]);
        assert_eq!(s.action, SpecAction::Block);
        assert_eq!(s.to_string().parse::<RuleSpec>(), Ok(s));
    }

    #[test]
    fn bad_specs_name_their_field() {
        assert_eq!(field("priority=1 action=allow"), "name");
        assert_eq!(field("name=a action=allow"), "priority");
        assert_eq!(field("name=a priority=1"), "action");
        assert_eq!(field("name=a priority=x action=allow"), "priority");
        assert_eq!(field("name=a priority=70000 action=allow"), "priority");
        assert_eq!(field("name=a:b priority=1 action=allow"), "name");
        assert_eq!(field("name=a priority=1 action=encap"), "action");
        assert_eq!(field("name=a priority=1 action=allow dir=up"), "dir");
        assert_eq!(field("name=a priority=1 action=allow proto=gre"), "proto");
        assert_eq!(
            field("name=a priority=1 action=allow dst=10.0.0.300"),
            "dst"
        );
        assert_eq!(field("name=a priority=1 action=allow src=x"), "src");
        assert_eq!(field("name=a priority=1 action=allow dport=80"), "dport");
        assert_eq!(
            field("name=a priority=1 action=allow proto=tcp sport=90-80"),
            "sport"
        );
        assert_eq!(field("name=a priority=1 action=allow colour=red"), "colour");
        assert_eq!(field("name=a name=b priority=1 action=allow"), "name");
        assert_eq!(field("name=a priority=1 allow"), "spec");
        assert_eq!(field("name=a priority=1 action=allow =x"), "spec");
        let e = "name=a priority=1 action=allow proto=tcp dport=99999"
            .parse::<RuleSpec>()
            .expect_err("refused");
        assert_eq!(
            e.to_string(),
            "rule spec: dport: \"99999\" is not a port 0-65535"
        );
    }

    fn spec() -> impl Strategy<Value = RuleSpec> {
        let net = (any::<[u8; 4]>(), 0u8..=32)
            .prop_map(|(a, p)| IpNet::new(IpAddr::from(a), p).expect("prefix").trunc());
        let range = (any::<u16>(), any::<u16>()).prop_map(|(a, b)| (a.min(b), a.max(b)));
        (
            "[A-Za-z0-9_.-]{1,20}",
            any::<u16>(),
            prop::option::of(prop_oneof![
                Just(SpecDirection::In),
                Just(SpecDirection::Out)
            ]),
            prop::option::of(prop_oneof![Just(6u8), Just(17), Just(1), Just(47)]),
            prop::collection::vec(net.clone(), 0..3),
            prop::collection::vec(net, 0..3),
            prop::collection::vec(range.clone(), 0..3),
            prop::collection::vec(range, 0..3),
            prop_oneof![Just(SpecAction::Allow), Just(SpecAction::Block)],
        )
            .prop_map(
                |(name, priority, direction, protocol, src, dst, sp, dp, action)| {
                    let ported = matches!(protocol, Some(6 | 17));
                    RuleSpec {
                        name,
                        priority,
                        direction,
                        protocol,
                        sources: src,
                        destinations: dst,
                        source_ports: if ported { sp } else { Vec::new() },
                        destination_ports: if ported { dp } else { Vec::new() },
                        action,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn the_text_form_reads_back_to_the_same_spec(s in spec()) {
            prop_assert_eq!(s.to_string().parse::<RuleSpec>(), Ok(s));
        }

        #[test]
        fn any_text_is_read_or_refused_with_a_field(text in ".{0,120}") {
            if let Err(e) = text.parse::<RuleSpec>() {
                prop_assert!(!e.field.is_empty());
            }
        }

        #[test]
        fn spec_shaped_text_is_read_or_refused_with_a_field(
            words in prop::collection::vec(
                ("(name|priority|dir|proto|src|dst|sport|dport|action|x)", "[a-z0-9./,:-]{0,12}")
                    .prop_map(|(k, v)| format!("{k}={v}")),
                0..8,
            )
        ) {
            if let Err(e) = words.join(" ").parse::<RuleSpec>() {
                prop_assert!(!e.field.is_empty());
            }
        }
    }
}
