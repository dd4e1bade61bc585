//! A walk driven to its end: the [`Walker`] asks, a query function answers. The stub serves
//! with [`walk`] over real queries; tests drive [`walk_with`] with a fake.

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

use crate::name::AskedName;
use crate::rules::{Rules, Walker};
use crate::upstream::Upstream;
use crate::walk::{Outcome, Walk};

/// Walks `asked` `qtype` under `rules` through `upstream`; returns the walk and the last answer
/// received (what the stub relays).
pub async fn walk(
    rules: &Rules,
    asked: &AskedName,
    qtype: RecordType,
    upstream: &Upstream,
) -> (Walk, Option<Message>) {
    let mut walker = Walker::new(rules, asked);
    let mut last = None;
    while let Some((name, _)) = walker.next() {
        let ex = upstream.query(&name.to_wire(), qtype).await;
        last = ex.response;
        walker.record(ex.outcome, ex.server.map(|s| s.to_string()), ex.sent);
    }
    (walker.finish(&qtype.to_string()), last)
}

/// Walks `asked` under `rules`, answering each query with `query(name)`; the server is
/// recorded as `server`.
pub fn walk_with(
    rules: &Rules,
    asked: &AskedName,
    qtype: &str,
    server: &str,
    mut query: impl FnMut(&AskedName) -> Outcome,
) -> Walk {
    let mut walker = Walker::new(rules, asked);
    while let Some((name, _)) = walker.next() {
        let outcome = query(name);
        walker.record(outcome, Some(server.to_string()), 1);
    }
    walker.finish(qtype)
}
