//! `winnet cluster apply|delete -f FILE`: NetworkPolicies (a multi-document YAML) added to or
//! removed from the running cluster's manifests, then a wait until every node's agent has
//! synced after the change (its `winnet_policy_syncs` counter moved past the value read
//! before the write: the agents sync on each change of the folder, not on a timer).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Deserialize;

use super::build::policy::{AGENT_HEALTHZ, policy_file};
use super::{State, sh_in};

/// Reads every NetworkPolicy of `file`, all checked before any is written or removed.
pub fn read(file: &Path) -> anyhow::Result<Vec<k8s_openapi::api::networking::v1::NetworkPolicy>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut out = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(&text).enumerate() {
        let at = format!("{} document {}", file.display(), i + 1);
        let v = serde_json::Value::deserialize(doc).with_context(|| format!("{at}: not YAML"))?;
        if v.is_null() {
            continue;
        }
        let p = lab::workloads::network_policy(&v).with_context(|| at.clone())?;
        policy::model::Policy::from_k8s(&p).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
        out.push(p);
    }
    if out.is_empty() {
        bail!("{}: no NetworkPolicy in it", file.display());
    }
    Ok(out)
}

/// Writes (`add`) or removes the policies of `file` in the cluster of `dir`, then waits for
/// the agents.
pub fn change(dir: &Path, file: &Path, add: bool) -> anyhow::Result<usize> {
    let state = State::load(dir)?.context("no cluster is up: run `winnet cluster up` first")?;
    let policies = read(file)?;
    let manifests = dir.join("manifests");
    let mut paths = Vec::new();
    for p in &policies {
        paths.push(policy_file(&manifests, p)?);
    }
    let before = syncs(&state);
    for (p, path) in policies.iter().zip(&paths) {
        if add {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_vec_pretty(p)?)?;
            std::fs::rename(&tmp, path)?;
        } else if let Err(e) = std::fs::remove_file(path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err(e).with_context(|| format!("remove {}", path.display()));
        }
    }
    wait_agents(&before)?;
    Ok(policies.len())
}

/// Each running agent's sync count (nodes whose agent does not answer are left out).
fn syncs(state: &State) -> Vec<(String, String, f64)> {
    state
        .nodes
        .iter()
        .filter_map(|n| Some((n.name.clone(), n.netns.clone(), sync_count(&n.netns)?)))
        .collect()
}

fn sync_count(netns: &str) -> Option<f64> {
    let url = format!("http://{AGENT_HEALTHZ}/metrics");
    let text = sh_in(netns, &["curl", "-sS", "--max-time", "1", &url]).ok()?;
    text.lines()
        .filter(|l| l.starts_with("winnet_policy_syncs"))
        .find_map(|l| l.split_whitespace().last()?.parse().ok())
}

fn wait_agents(before: &[(String, String, f64)]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    for (node, netns, was) in before {
        loop {
            let now = sync_count(netns);
            if now.is_some_and(|n| n > *was) {
                break;
            }
            if Instant::now() > deadline {
                bail!("the NetworkPolicy agent on {node} has not synced the change in 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}
