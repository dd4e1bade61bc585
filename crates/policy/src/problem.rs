//! What a style cannot express on Windows, typed: the construct, what the style did about it,
//! and where in which policy it is. Logged, counted (`winnet_policy_skipped_constructs`) and
//! printed by `winnet policy --lint` as the peer itself reports it.

use std::fmt;

use crate::model::Direction;

/// A NetworkPolicy construct a Windows style cannot express.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Construct {
    /// A port given by container port name.
    NamedPort(String),
    /// A selector requirement matching by absence (`NotIn`, `DoesNotExist`).
    NegativeSelector,
    /// `ipBlock.except`: a negative address match.
    Except,
    /// SCTP.
    Sctp,
    /// An IPv6 peer (the Windows dataplanes program IPv4 only).
    Ipv6,
}

impl Construct {
    /// The metric label (`reason`).
    pub fn reason(&self) -> &'static str {
        match self {
            Construct::NamedPort(_) => "named_port",
            Construct::NegativeSelector => "negative_selector",
            Construct::Except => "except",
            Construct::Sctp => "sctp",
            Construct::Ipv6 => "ipv6",
        }
    }
}

impl fmt::Display for Construct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Construct::NamedPort(n) => write!(f, "named port \"{n}\""),
            Construct::NegativeSelector => f.write_str("a NotIn/DoesNotExist selector"),
            Construct::Except => f.write_str("ipBlock.except"),
            Construct::Sctp => f.write_str("SCTP"),
            Construct::Ipv6 => f.write_str("an IPv6 address"),
        }
    }
}

/// What the style did with the construct.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Effect {
    /// Felix skips the one rule (peer and port combination); the pod stays isolated, so the
    /// traffic that rule allowed is blocked on Windows.
    RuleSkipped,
    /// Azure NPM refuses the whole policy; the pods it selects are not isolated by it, so
    /// traffic it would block is allowed on Windows.
    PolicySkipped,
}

/// Which style reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Style {
    /// Calico for Windows (felix's `policysets`).
    Calico,
    /// Azure NPM's Windows dataplane.
    Npm,
}

impl Style {
    pub fn name(self) -> &'static str {
        match self {
            Style::Calico => "calico",
            Style::Npm => "npm",
        }
    }
}

impl std::str::FromStr for Style {
    type Err = String;
    fn from_str(s: &str) -> Result<Style, String> {
        match s {
            "calico" => Ok(Style::Calico),
            "npm" => Ok(Style::Npm),
            other => Err(format!(
                "--style: \"{other}\" is not a style; use calico or npm"
            )),
        }
    }
}

/// One construct a style could not express, and where.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    /// `namespace/name` of the NetworkPolicy.
    pub policy: String,
    /// The rule's direction and index, and the peer's index in it, when the construct is in
    /// a rule (NPM's refusal of a negative pod selector is the policy's).
    pub direction: Option<Direction>,
    pub rule: Option<usize>,
    pub peer: Option<usize>,
    pub construct: Construct,
    pub effect: Effect,
    pub style: Style,
}

impl Problem {
    /// Where: `x/allow-web spec.ingress[0].from[1]`.
    pub fn place(&self) -> String {
        let mut s = self.policy.clone();
        if let (Some(d), Some(r)) = (self.direction, self.rule) {
            s.push_str(&format!(" spec.{}[{r}]", d.name()));
            if let Some(p) = self.peer {
                let field = match d {
                    Direction::Ingress => "from",
                    Direction::Egress => "to",
                };
                s.push_str(&format!(".{field}[{p}]"));
            }
        }
        s
    }

    /// The peer's own words for it (felix's log line, NPM's translation error).
    pub fn upstream_message(&self) -> String {
        match (self.style, &self.construct) {
            (Style::Calico, Construct::Ipv6) => "Skipping no-op rule.".into(),
            (Style::Calico, Construct::NamedPort(_)) => {
                "Skipping rule because it contains named port ipsets (currently unsupported)."
                    .into()
            }
            (Style::Calico, _) => {
                "Skipping rule because it contains negative matches (currently unsupported).".into()
            }
            (Style::Npm, Construct::NamedPort(_)) => {
                "unsupported namedport translation features used on windows".into()
            }
            (Style::Npm, Construct::NegativeSelector) => {
                "unsupported NotExist operator translation features used on windows".into()
            }
            (Style::Npm, Construct::Except) => {
                "unsupported Except CIDR block translation features used on windows".into()
            }
            (Style::Npm, Construct::Sctp) => "unsupported SCTP protocol used on windows".into(),
            (Style::Npm, Construct::Ipv6) => "IPv6 is not supported on windows".into(),
        }
    }

    /// What a Linux node does differently.
    pub fn linux_difference(&self) -> &'static str {
        match self.effect {
            Effect::RuleSkipped => {
                "a Linux node allows what this rule allows; this Windows node blocks it"
            }
            Effect::PolicySkipped => {
                "a Linux node isolates the pods this policy selects; this Windows node does not apply it"
            }
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.effect {
            Effect::RuleSkipped => "rule skipped",
            Effect::PolicySkipped => "policy not applied",
        };
        write!(
            f,
            "{}: {} ({what}, {}: \"{}\"); {}",
            self.place(),
            self.construct,
            self.style.name(),
            self.upstream_message(),
            self.linux_difference()
        )
    }
}
