//! A walk driven to its end: the [`Walker`] asks, a query function answers. The stub serves
//! with [`walk`] over real queries; tests drive [`walk_with`] with a fake.

use std::net::SocketAddr;
use std::sync::Arc;

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use host::HostError;
use host::netns::Netns;

use crate::name::AskedName;
use crate::resolv_conf::ResolvConf;
use crate::rules::{Rules, Walker};
use crate::sockets::PodSockets;
use crate::upstream::{Schedule, Upstream};
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

/// What glibc in namespace `netns` does with `asked` under the resolv.conf `conf`: the Linux
/// pod's resolver (and a Windows pod's under `unrestricted`), its queries sent from inside
/// the namespace as the pod's would be.
pub async fn glibc_walk(
    netns: &Netns,
    conf: &ResolvConf,
    asked: &AskedName,
    qtype: RecordType,
) -> Result<Walk, HostError> {
    let ns = netns.clone();
    let sockets = tokio::task::spawn_blocking(move || PodSockets::open(&ns))
        .await
        .map_err(|e| HostError::io("open the pod's namespace", std::io::Error::other(e)))??;
    let servers = conf
        .nameservers
        .iter()
        .map(|ip| SocketAddr::new(*ip, 53))
        .collect();
    let schedule = Schedule::glibc(conf.nameservers.len(), conf.timeout, conf.attempts);
    let upstream = Upstream::new(servers, schedule, Arc::new(sockets));
    let rules = Rules::Glibc {
        search: conf.search.clone(),
        ndots: conf.ndots,
    };
    Ok(walk(&rules, asked, qtype, &upstream).await.0)
}
