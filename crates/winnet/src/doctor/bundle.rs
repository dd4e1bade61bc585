//! A support bundle: one JSON document with every node's snapshot (HNS objects, the compiled
//! switch with owners and counters, devices, addresses, routes, neighbours, resolv.conf, the
//! Kubernetes objects), the manifests as they were, and the tail of each component's log —
//! what Microsoft's collectlogs.ps1 gathers, and what winnet knows besides. `doctor --bundle`
//! and `trace --bundle` read it with no node and no root.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use doctor::NodeSnapshot;
use serde::{Deserialize, Serialize};

/// The format's name and version, checked on reading.
pub const FORMAT: &str = "winnet-bundle/1";

/// Lines kept from the end of each log.
const LOG_LINES: usize = 400;

/// One bundle.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Bundle {
    pub format: String,
    /// Seconds since the Unix epoch when it was collected.
    pub collected_at: u64,
    pub nodes: Vec<NodeSnapshot>,
    /// Manifest files by name, as the proxy read them.
    #[serde(default)]
    pub manifests: BTreeMap<String, String>,
    /// The end of each log, by file name.
    #[serde(default)]
    pub logs: BTreeMap<String, String>,
}

impl Bundle {
    /// A bundle of `nodes`, with the manifests of `manifests` and the logs under `logs`.
    pub fn new(nodes: Vec<NodeSnapshot>, manifests: Option<&Path>, logs: Option<&Path>) -> Bundle {
        let collected_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Bundle {
            format: FORMAT.into(),
            collected_at,
            nodes,
            manifests: manifests.map(read_files).unwrap_or_default(),
            logs: logs.map(read_logs).unwrap_or_default(),
        }
    }

    /// Writes the bundle to `path`.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_vec_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
    }

    /// Reads the bundle at `path`.
    pub fn read(path: &Path) -> anyhow::Result<Bundle> {
        let text = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        let b: Bundle = serde_json::from_slice(&text).with_context(|| {
            format!(
                "{} is not a winnet bundle (made by `winnet collect`)",
                path.display()
            )
        })?;
        if b.format != FORMAT {
            anyhow::bail!(
                "{}: format \"{}\", this winnet reads \"{FORMAT}\"",
                path.display(),
                b.format
            );
        }
        Ok(b)
    }

    /// The snapshot of `node`, or a clear error naming the nodes there are.
    pub fn node(&self, node: &str) -> anyhow::Result<&NodeSnapshot> {
        self.nodes.iter().find(|n| n.node == node).with_context(|| {
            let names: Vec<&str> = self.nodes.iter().map(|n| n.node.as_str()).collect();
            format!(
                "--node {node}: the bundle has no such node (it has: {})",
                names.join(", ")
            )
        })
    }
}

fn read_files(dir: &Path) -> BTreeMap<String, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), text))
        })
        .collect()
}

/// The `*.log` files under `dir` (and one level of subfolders: each node's), each cut to its
/// last lines.
fn read_logs(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut visit = |d: &Path, prefix: &str| {
        let Ok(entries) = std::fs::read_dir(d) else {
            return Vec::new();
        };
        let mut subdirs = Vec::new();
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            if p.is_dir() {
                subdirs.push((p, format!("{name}/")));
            } else if name.ends_with(".log")
                && let Ok(text) = std::fs::read_to_string(&p)
            {
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(LOG_LINES)..].join("\n");
                out.insert(name, tail);
            }
        }
        subdirs
    };
    for (sub, prefix) in visit(dir, "") {
        visit(&sub, &prefix);
    }
    out
}
