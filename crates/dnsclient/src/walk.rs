//! What a resolver did with a name, step by step: the typed answer of `winnet resolve` (and of
//! hnsd's `POST /resolve`), with the one text rendering every caller prints.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a name was tried.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "rule", rename_all = "PascalCase")]
pub enum Reason {
    /// Windows: a single label gets the connection-specific suffix number `index` (0 = first).
    SingleLabelSuffix { suffix: String, index: usize },
    /// Windows: a name with a dot is queried as it is, once (`AppendToMultiLabelName` off).
    MultiLabelAsIs,
    /// Either: a name with a trailing dot is fully qualified and queried as it is only.
    RootedAsIs,
    /// glibc: the name has at least `ndots` dots, so it is tried as it is before the search list.
    AsIsFirst { dots: usize, ndots: usize },
    /// glibc: search-list entry number `index` appended.
    Search { entry: String, index: usize },
    /// glibc: after the search list, the name as it is (not tried yet).
    AsIsLast,
}

/// What one query got back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "PascalCase")]
pub enum Outcome {
    /// NOERROR with records of the asked type (CNAMEs on the way included), as text.
    Answer { records: Vec<String> },
    /// NOERROR with no record of the asked type.
    NoData,
    /// NXDOMAIN.
    NxDomain,
    /// SERVFAIL.
    ServFail,
    /// Another RCODE (REFUSED, NOTIMP, FORMERR...).
    Rcode { rcode: String },
    /// No server answered within the retry schedule.
    Timeout,
    /// The query could not be sent or the server refused the connection.
    Unreachable { why: String },
}

impl Outcome {
    /// True for a positive answer.
    pub fn is_answer(&self) -> bool {
        matches!(self, Outcome::Answer { .. })
    }

    /// True for NXDOMAIN or NODATA: the name, or the type, is not there.
    pub fn is_negative(&self) -> bool {
        matches!(self, Outcome::NxDomain | Outcome::NoData)
    }
}

/// The rule that ended a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum End {
    /// A query was answered.
    Answered,
    /// Windows: a dotted name got its one as-is query; no suffix follows a failure.
    MultiLabelQueriedOnce,
    /// A name with a trailing dot got its one query.
    RootedQueriedOnce,
    /// Windows: every honoured suffix of a single label was negative.
    SuffixesExhausted,
    /// Windows: a single label with no DNS suffix is not sent to DNS (LLMNR and NetBIOS,
    /// which Windows would try next, are not emulated).
    NoSuffix,
    /// Windows: a timeout returns at once, no further suffix is tried.
    TimeoutEndsWalk,
    /// Windows: a server failure (SERVFAIL, REFUSED...) returns at once.
    ServerFailure,
    /// glibc: the search list and the name as it is were all negative or failed.
    SearchExhausted,
    /// glibc: a refused connection stops the resolver (`ECONNREFUSED`).
    ConnectionRefused,
}

impl End {
    fn text(self) -> &'static str {
        match self {
            End::Answered => "answered",
            End::MultiLabelQueriedOnce => {
                "a name with a dot is queried as it is, once; Windows appends no suffix after a failure"
            }
            End::RootedQueriedOnce => "a name with a trailing dot is queried as it is only",
            End::SuffixesExhausted => "every suffix the DNS Client honours was tried",
            End::NoSuffix => {
                "a single label without a DNS suffix is not sent to DNS (LLMNR/NetBIOS not emulated)"
            }
            End::TimeoutEndsWalk => {
                "a timeout ends the Windows DNS Client's walk; no further suffix"
            }
            End::ServerFailure => "a server failure ends the Windows DNS Client's walk",
            End::SearchExhausted => "the search list and the name as it is were all tried",
            End::ConnectionRefused => "the server refused the connection; glibc stops",
        }
    }
}

/// One query of a walk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Step {
    /// The fully qualified name queried.
    pub name: String,
    pub reason: Reason,
    /// The server that answered, or the last one asked.
    pub server: Option<String>,
    /// How many times the query was sent (retries included).
    pub sent: u32,
    pub outcome: Outcome,
}

/// A resolver's whole walk for one name and type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Walk {
    /// The name as asked.
    pub name: String,
    /// The record type asked (`A`, `AAAA`, `SRV`...).
    pub qtype: String,
    /// The resolver whose rules ran, in words (`Windows DNS Client (ws2022) ...`).
    pub resolver: String,
    pub steps: Vec<Step>,
    pub end: End,
    /// What the application gets.
    pub result: Outcome,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::SingleLabelSuffix { suffix, index } => write!(
                f,
                "single label: DNS suffix #{} ({suffix}) appended",
                index + 1
            ),
            Reason::MultiLabelAsIs => f.write_str("name with a dot: queried as it is"),
            Reason::RootedAsIs => f.write_str("trailing dot: fully qualified, queried as it is"),
            Reason::AsIsFirst { dots, ndots } => {
                write!(f, "{dots} dot(s) >= ndots:{ndots}: as it is, first")
            }
            Reason::Search { entry, index } => {
                write!(f, "search entry #{} ({entry}) appended", index + 1)
            }
            Reason::AsIsLast => f.write_str("after the search list: as it is"),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Answer { records } => write!(f, "NOERROR: {}", records.join("; ")),
            Outcome::NoData => f.write_str("NOERROR, no record of that type (NODATA)"),
            Outcome::NxDomain => f.write_str("NXDOMAIN"),
            Outcome::ServFail => f.write_str("SERVFAIL"),
            Outcome::Rcode { rcode } => f.write_str(rcode),
            Outcome::Timeout => f.write_str("timeout: no server answered"),
            Outcome::Unreachable { why } => write!(f, "unreachable: {why}"),
        }
    }
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl fmt::Display for Walk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} ({}), by {}", self.name, self.qtype, self.resolver)?;
        for (i, s) in self.steps.iter().enumerate() {
            writeln!(f, "  {}. {} {}  ({})", i + 1, s.name, self.qtype, s.reason)?;
            let server = s.server.as_deref().unwrap_or("no server");
            let tries = if s.sent > 1 {
                format!(", sent {} times", s.sent)
            } else {
                String::new()
            };
            writeln!(f, "     {server}{tries}: {}", s.outcome)?;
        }
        if self.steps.is_empty() {
            writeln!(f, "  no query sent")?;
        }
        writeln!(f, "  ended: {}", self.end)?;
        write!(f, "  result: {}", self.result)
    }
}
