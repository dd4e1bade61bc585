//! The ACL rows of the matrix on the real cluster ([`Step`]): a lone Block ACL put on a pod's
//! endpoint through its node's hnsd for the flow and the endpoint's own ACLs put back after;
//! and a live TCP connection from the client's namespace across a NetworkPolicy change made
//! with `winnet cluster apply` (the agents reprogram the destination's ACLs), then removed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, anyhow};
use hcn::policy::AclPolicySetting;
use hns_client::Client;
use hns_client::acl::endpoint_acls;

use super::flows::Flow;
use super::policy_rows::{self, Step};
use super::{DIR, State, netpol};

/// Runs `f` with its step; what happened, in the words of the other rows.
pub fn run(f: &Flow, step: &Step, tcp: impl Fn(&Flow) -> (bool, String)) -> (bool, String) {
    let r = match step {
        Step::LoneBlock { node } => lone_block(f, node, tcp),
        Step::AclUpdate => across_update(f),
    };
    r.unwrap_or_else(|e| (false, format!("the step failed: {e:#}")))
}

/// The destination's ACLs replaced with the lone Block for the flow, then put back.
fn lone_block(
    f: &Flow,
    node: &str,
    tcp: impl Fn(&Flow) -> (bool, String),
) -> anyhow::Result<(bool, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = Client::new(Path::new(DIR).join(node).join("hns.sock"));
    let endpoints = rt
        .block_on(client.list_endpoints())
        .map_err(|e| anyhow!("{node}'s HNS: {e}"))?;
    let ep = endpoints
        .iter()
        .find(|e| e.ips().any(|ip| ip == f.to))
        .with_context(|| format!("no HNS endpoint of {} on {node}", f.to))?;
    let held: Vec<AclPolicySetting> = endpoint_acls(ep).into_iter().cloned().collect();
    rt.block_on(client.set_endpoint_acls(ep.id, vec![policy_rows::lone_block()?]))
        .map_err(|e| anyhow!("the lone Block: {e}"))?;
    let ran = tcp(f);
    rt.block_on(client.set_endpoint_acls(ep.id, held))
        .map_err(|e| anyhow!("putting the endpoint's ACLs back: {e}"))?;
    Ok(ran)
}

/// A connection opened, half a request sent (the server waits for the rest), the update
/// policy applied through the agents, the rest sent and the answer read; the policy removed.
fn across_update(f: &Flow) -> anyhow::Result<(bool, String)> {
    let dir = Path::new(DIR);
    let state = State::load(dir)?.context("no cluster is up")?;
    let to = state
        .nodes
        .iter()
        .flat_map(|n| &n.pods)
        .find(|p| std::net::IpAddr::V4(p.ip) == f.to)
        .context("the destination is not a pod of the cluster")?;
    // In the cluster's directory, which goes with the cluster.
    let file = dir.join("acl-update.json");
    std::fs::write(&file, policy_rows::update_policy(to).to_string())?;
    let addr = SocketAddr::new(f.to, f.port);
    let mut s = host::netns::Netns::named(&f.netns).run(move || {
        let io = |e| host::HostError::io("TCP connect", e);
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(io)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(io)?;
        Ok(s)
    })?;
    s.write_all(b"GET / HTTP/1.1\r\n")?;
    let applied = netpol::change(dir, &file, true);
    let answer = applied.as_ref().map(|_| finish(&mut s));
    netpol::change(dir, &file, false)?;
    std::fs::remove_file(&file)?;
    let (passed, detail) = answer.map_err(|e| anyhow!("cluster apply: {e:#}"))?;
    Ok((passed, format!("{detail} (after the ACL update)")))
}

/// The rest of the request, and what came back.
fn finish(s: &mut TcpStream) -> (bool, String) {
    let mut out = String::new();
    let sent = s.write_all(b"Host: matrix\r\n\r\n");
    match sent.and_then(|()| s.read_to_string(&mut out)) {
        Ok(_) if out.starts_with("HTTP/1.1 200") => {
            let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().trim();
            (
                true,
                format!("HTTP {body}, on the connection opened before"),
            )
        }
        Ok(_) => (false, "the connection closed without an answer".into()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            (false, "connection reset".into())
        }
        Err(e) => (false, format!("no answer: {e}")),
    }
}
