//! The name-walk rules of the two resolvers a pod can have, as a pure state machine: which
//! names to query in which order, and which outcome ends the walk. The stub (serving), `winnet
//! resolve` (explaining) and the tests drive the same [`Walker`]; only the query function
//! differs.

use crate::name::AskedName;
use crate::walk::{End, Outcome, Reason, Step, Walk};

/// A resolver's rules for turning an asked name into queries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rules {
    /// The Windows DNS Client of a Windows node's pod (reference §A.2): a single label gets
    /// the first `honoured` connection-specific suffixes in order (one in pods: only the first
    /// entry of the search list works); a name with a dot or a trailing dot is queried as it
    /// is, once; a negative answer moves to the next suffix, a timeout or a server failure
    /// ends the walk.
    Windows {
        /// The endpoint's DNS suffixes (`Dns.Domain` first when set, then `Dns.Search`).
        suffixes: Vec<AskedName>,
        /// How many of them a single label is tried with.
        honoured: usize,
        /// The profile, for the explanation (`ws2022`).
        profile: String,
    },
    /// glibc's `res_search` (reference §C.1): a Linux pod, or a Windows pod under
    /// `unrestricted`.
    Glibc {
        /// The `search` list.
        search: Vec<AskedName>,
        /// `options ndots:N` (glibc's default 1, kubelet writes 5).
        ndots: usize,
    },
}

impl Rules {
    /// The resolver in words, for a walk's header.
    pub fn describe(&self) -> String {
        match self {
            Rules::Windows {
                suffixes,
                honoured,
                profile,
            } => {
                let list: Vec<String> = suffixes.iter().map(ToString::to_string).collect();
                format!(
                    "the Windows DNS Client ({profile}): suffixes [{}], {} honoured for single labels, dotted names as they are",
                    list.join(" "),
                    honoured
                )
            }
            Rules::Glibc { search, ndots } => {
                let list: Vec<String> = search.iter().map(ToString::to_string).collect();
                format!(
                    "glibc res_search: search [{}], ndots:{ndots}",
                    list.join(" ")
                )
            }
        }
    }
}

/// The glibc bookkeeping that decides the final error (res_query.c's `saved_herrno`,
/// `got_nodata`, `got_servfail`).
#[derive(Clone, Debug, Default)]
struct GlibcSeen {
    as_is: Option<Outcome>,
    nodata: bool,
    servfail: bool,
}

/// One walk in progress: ask [`Walker::next`] for the name to query, feed back what the query
/// got with [`Walker::record`], until `next` gives `None`; then [`Walker::finish`].
#[derive(Clone, Debug)]
pub struct Walker {
    rules: Rules,
    asked: AskedName,
    plan: Vec<(AskedName, Reason)>,
    pos: usize,
    steps: Vec<Step>,
    seen: GlibcSeen,
    end: Option<End>,
}

impl Walker {
    /// Starts the walk of `asked` under `rules`.
    pub fn new(rules: &Rules, asked: &AskedName) -> Walker {
        let plan = plan(rules, asked);
        let end = plan.is_empty().then_some(End::NoSuffix);
        Walker {
            rules: rules.clone(),
            asked: asked.clone(),
            plan,
            pos: 0,
            steps: Vec::new(),
            seen: GlibcSeen::default(),
            end,
        }
    }

    /// The next name to query and why, or `None` when the walk has ended.
    pub fn next(&self) -> Option<(&AskedName, &Reason)> {
        if self.end.is_some() {
            return None;
        }
        self.plan.get(self.pos).map(|(n, r)| (n, r))
    }

    /// Records what the query [`Walker::next`] gave got: `server` answered (or was the last
    /// asked), after `sent` sends.
    pub fn record(&mut self, outcome: Outcome, server: Option<String>, sent: u32) {
        let Some((name, reason)) = self.plan.get(self.pos).cloned() else {
            return;
        };
        self.steps.push(Step {
            name: name.fqdn(),
            reason: reason.clone(),
            server,
            sent,
            outcome: outcome.clone(),
        });
        self.pos += 1;
        if outcome.is_answer() {
            self.end = Some(End::Answered);
            return;
        }
        self.end = match &self.rules {
            Rules::Windows { .. } => self.windows_after(&reason, &outcome),
            Rules::Glibc { .. } => self.glibc_after(&reason, outcome),
        };
        if self.end.is_none() && self.pos >= self.plan.len() {
            self.end = Some(match self.rules {
                Rules::Windows { .. } => End::SuffixesExhausted,
                Rules::Glibc { .. } => End::SearchExhausted,
            });
        }
    }

    fn windows_after(&self, reason: &Reason, outcome: &Outcome) -> Option<End> {
        match (reason, outcome) {
            (_, Outcome::Timeout) => Some(End::TimeoutEndsWalk),
            (Reason::RootedAsIs, _) => Some(End::RootedQueriedOnce),
            (Reason::MultiLabelAsIs, _) => Some(End::MultiLabelQueriedOnce),
            (_, o) if o.is_negative() => None,
            _ => Some(End::ServerFailure),
        }
    }

    fn glibc_after(&mut self, reason: &Reason, outcome: Outcome) -> Option<End> {
        match reason {
            Reason::RootedAsIs => Some(End::RootedQueriedOnce),
            Reason::AsIsFirst { .. } => {
                self.seen.as_is = Some(outcome);
                None
            }
            Reason::Search { .. } => match outcome {
                Outcome::NoData => {
                    self.seen.nodata = true;
                    None
                }
                Outcome::NxDomain => None,
                Outcome::ServFail => {
                    self.seen.servfail = true;
                    None
                }
                Outcome::Unreachable { .. } => Some(End::ConnectionRefused),
                // A timeout or another rcode stops the search loop; the as-is query follows.
                _ => {
                    self.skip_search();
                    None
                }
            },
            _ => Some(End::SearchExhausted),
        }
    }

    fn skip_search(&mut self) {
        while matches!(self.plan.get(self.pos), Some((_, Reason::Search { .. }))) {
            self.pos += 1;
        }
    }

    /// The finished walk for record type `qtype`.
    pub fn finish(self, qtype: &str) -> Walk {
        let end = self.end.unwrap_or(End::SearchExhausted);
        let last = self.steps.last().map(|s| s.outcome.clone());
        let result = match (&self.rules, end) {
            (_, End::Answered) | (Rules::Windows { .. }, _) => last.unwrap_or(Outcome::NxDomain),
            (Rules::Glibc { .. }, _) => match (self.seen.as_is, self.seen.nodata) {
                (Some(o), _) => o,
                (None, true) => Outcome::NoData,
                (None, false) if self.seen.servfail => Outcome::ServFail,
                _ => last.unwrap_or(Outcome::NxDomain),
            },
        };
        Walk {
            name: self.asked.to_string(),
            qtype: qtype.to_string(),
            resolver: self.rules.describe(),
            steps: self.steps,
            end,
            result,
        }
    }
}

/// The names a walk may query, in order; outcomes decide how far it goes.
fn plan(rules: &Rules, asked: &AskedName) -> Vec<(AskedName, Reason)> {
    let as_is = asked.qualified();
    match rules {
        _ if asked.rooted() => vec![(as_is, Reason::RootedAsIs)],
        Rules::Windows {
            suffixes, honoured, ..
        } => {
            if !asked.is_single_label() {
                return vec![(as_is, Reason::MultiLabelAsIs)];
            }
            suffixes
                .iter()
                .take(*honoured)
                .enumerate()
                .filter_map(|(index, s)| {
                    let suffix = s.to_string();
                    Some((
                        asked.with_suffix(s)?,
                        Reason::SingleLabelSuffix { suffix, index },
                    ))
                })
                .collect()
        }
        Rules::Glibc { search, ndots } => {
            let mut plan = Vec::new();
            let first = asked.dots() >= *ndots;
            if first {
                let (dots, ndots) = (asked.dots(), *ndots);
                plan.push((as_is.clone(), Reason::AsIsFirst { dots, ndots }));
            }
            for (index, s) in search.iter().enumerate() {
                if let Some(n) = asked.with_suffix(s) {
                    let entry = s.to_string();
                    plan.push((n, Reason::Search { entry, index }));
                }
            }
            if !first {
                plan.push((as_is, Reason::AsIsLast));
            }
            plan
        }
    }
}
