//! `doctor --fix`: the repairs that are safe without a person — delete a stale remote
//! endpoint, have kube-proxy resync against HNS (which makes a missing load balancer again),
//! delete a namespace no HostComputeNamespace owns. Each is listed before any is made, and
//! each is checked again just before it is made: a change that would cut a live pod off is
//! refused.

use std::path::Path;

use anyhow::Context;
use doctor::{Finding, NodeSnapshot, Repair};

use super::collect::NodeSource;

/// A repair on one node, or why it is refused.
#[derive(Clone, Debug)]
pub struct Planned {
    pub node: String,
    pub repair: Repair,
    /// Set when the repair will not be made.
    pub refused: Option<String>,
}

/// The repairs `findings` ask for, each once per node, checked against the snapshots.
pub fn plan(snaps: &[NodeSnapshot], findings: &[Finding]) -> Vec<Planned> {
    let mut out: Vec<Planned> = Vec::new();
    for f in findings {
        let Some(repair) = &f.repair else { continue };
        if out.iter().any(|p| p.node == f.node && p.repair == *repair) {
            continue;
        }
        let snap = snaps.iter().find(|s| s.node == f.node);
        out.push(Planned {
            node: f.node.clone(),
            repair: repair.clone(),
            refused: snap.and_then(|s| refusal(s, repair)),
        });
    }
    out
}

/// Why `repair` would cut a live pod off, if it would.
fn refusal(snap: &NodeSnapshot, repair: &Repair) -> Option<String> {
    match repair {
        Repair::DeleteEndpoint { id, .. } => {
            let ep = snap
                .hns
                .endpoints
                .iter()
                .find(|e| e.id.to_string().eq_ignore_ascii_case(id))?;
            (!ep.is_remote()).then(|| {
                format!(
                    "endpoint {id} is a local endpoint (a pod's vNIC): deleting it would cut its pod off"
                )
            })
        }
        Repair::DeleteNetns { .. } | Repair::ResyncProxy => None,
    }
}

/// Makes the planned repairs that are not refused; `sources` say where each node's hnsd and
/// kube-proxy are. Returns one line per repair saying what happened.
pub fn apply(
    rt: &tokio::runtime::Runtime,
    planned: &[Planned],
    sources: &[NodeSource],
) -> Vec<String> {
    let mut out = Vec::new();
    for p in planned {
        if let Some(why) = &p.refused {
            out.push(format!("{}: refused: {}: {why}", p.node, p.repair));
            continue;
        }
        let source = sources.iter().find(|s| s.name == p.node);
        let result = match (&p.repair, source) {
            (_, None) => Err(anyhow::anyhow!("no source for node {}", p.node)),
            (Repair::DeleteEndpoint { id, .. }, Some(s)) => delete_endpoint(rt, s, id),
            (Repair::ResyncProxy, Some(s)) => resync_proxy(&s.name),
            (Repair::DeleteNetns { name }, Some(_)) => delete_netns(name),
        };
        out.push(match result {
            Ok(()) => format!("{}: done: {}", p.node, p.repair),
            Err(e) => format!("{}: refused: {}: {e:#}", p.node, p.repair),
        });
    }
    out
}

fn delete_endpoint(rt: &tokio::runtime::Runtime, s: &NodeSource, id: &str) -> anyhow::Result<()> {
    let guid: hcn::Guid = id
        .parse()
        .map_err(|e: String| anyhow::anyhow!("endpoint ID {id}: {e}"))?;
    let client = hns_client::Client::new(&s.socket);
    // Checked again on the live node: only a remote endpoint goes.
    let ep = rt
        .block_on(client.get_endpoint_by_id(guid))
        .with_context(|| format!("endpoint {id}"))?;
    if !ep.is_remote() {
        anyhow::bail!(
            "it is now a local endpoint (a pod's vNIC); deleting it would cut its pod off"
        );
    }
    rt.block_on(client.delete_endpoint(guid))?;
    Ok(())
}

/// Sends SIGHUP to the node's kube-proxy in the local cluster (a full resync against HNS).
fn resync_proxy(node: &str) -> anyhow::Result<()> {
    let dir = Path::new(crate::cluster::DIR);
    let state = crate::cluster::State::load(dir)?
        .context("kube-proxy is not one the local cluster started; restart it by hand to resync")?;
    let name = format!("{node} proxy");
    let proc = state
        .procs
        .iter()
        .find(|p| p.name == name && p.alive())
        .with_context(|| format!("no running kube-proxy of {node} in the local cluster"))?;
    let pid = i32::try_from(proc.pid).context("PID out of range")?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .with_context(|| format!("signal kube-proxy (PID {pid})"))?;
    Ok(())
}

/// Deletes a leaked namespace, unless a process runs in it or it holds an interface besides
/// `lo` (a live pod's).
fn delete_netns(name: &str) -> anyhow::Result<()> {
    let ns = host::netns::Netns::named(name);
    if !ns.exists() {
        return Ok(());
    }
    let path = ns.path().to_string_lossy().into_owned();
    let procs = super::collect::processes_in(&path);
    if procs > 0 {
        anyhow::bail!("{procs} processes run in it (a live pod)");
    }
    let links = ns.run(|| host::netlink::Netlink::open()?.links())?;
    let devices: Vec<String> = links
        .into_iter()
        .filter(|l| l.name != "lo")
        .map(|l| l.name)
        .collect();
    if !devices.is_empty() {
        anyhow::bail!("it holds {} (a pod's interfaces)", devices.join(", "));
    }
    // Its resolv.conf, if hnsd wrote one; none is the usual case, and a failure to remove it
    // leaves only a file under /etc/netns.
    let _ = host::resolv::remove(name);
    ns.delete()?;
    Ok(())
}
