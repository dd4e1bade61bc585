//! A folder of manifests as `kubectl get -o yaml` (or `-o json`) prints them: Services,
//! EndpointSlices, Nodes, and `List`s of them, several documents per file. Bad files and
//! unknown kinds are reported and skipped; the rest is used.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Node, Service as K8sService};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Deserialize;
use tokio::sync::watch;

use super::Snapshot;
use crate::model::{Service, Slice};

/// How often the folder is checked for changes.
pub const POLL: Duration = Duration::from_millis(500);

/// Reads every manifest in `dir` into a snapshot.
pub fn load(dir: &Path) -> Snapshot {
    let mut snap = Snapshot::default();
    let files = match manifest_files(dir) {
        Ok(f) => f,
        Err(e) => {
            snap.problems.push(format!("{}: {e}", dir.display()));
            return snap;
        }
    };
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => load_text(&text, &file.display().to_string(), &mut snap),
            Err(e) => snap.problems.push(format!("{}: {e}", file.display())),
        }
    }
    snap
}

fn manifest_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            )
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The newest modification time and the file count: a change in either means reload.
fn fingerprint(dir: &Path) -> Option<(SystemTime, usize)> {
    let files = manifest_files(dir).ok()?;
    let newest = files
        .iter()
        .filter_map(|f| f.metadata().and_then(|m| m.modified()).ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Some((newest, files.len()))
}

/// Parses one file's documents into `snap`.
pub fn load_text(text: &str, origin: &str, snap: &mut Snapshot) {
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = match serde_json::Value::deserialize(doc) {
            Ok(serde_json::Value::Null) => continue,
            Ok(v) => v,
            Err(e) => {
                snap.problems.push(format!(
                    "{origin} document {}: not YAML or JSON: {e}",
                    i + 1
                ));
                // A syntax error ends the stream: the rest of the file cannot be read.
                break;
            }
        };
        load_object(value, &format!("{origin} document {}", i + 1), snap);
    }
}

fn load_object(value: serde_json::Value, origin: &str, snap: &mut Snapshot) {
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or("")
        .to_string();
    let name = value
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("?")
        .to_string();
    let at = format!("{origin} ({kind} {name})");
    match kind.as_str() {
        "List" | "ServiceList" | "EndpointSliceList" | "NodeList" => {
            let items = value
                .get("items")
                .and_then(|i| i.as_array())
                .cloned()
                .unwrap_or_default();
            for (j, item) in items.into_iter().enumerate() {
                load_object(item, &format!("{origin} item {j}"), snap);
            }
        }
        "Service" => match serde_json::from_value::<K8sService>(value)
            .map_err(|e| e.to_string())
            .and_then(|s| Service::from_k8s(&s))
        {
            Ok(s) => {
                snap.services.insert(s.key.clone(), s);
            }
            Err(e) => snap.problems.push(format!("{at}: {e}; skipped")),
        },
        "EndpointSlice" => match serde_json::from_value::<EndpointSlice>(value)
            .map_err(|e| e.to_string())
            .and_then(|s| Slice::from_k8s(&s))
        {
            Ok(s) => {
                snap.slices
                    .insert(format!("{}/{}", s.service.namespace, s.name), s);
            }
            Err(e) => snap.problems.push(format!("{at}: {e}; skipped")),
        },
        "Node" => match serde_json::from_value::<Node>(value) {
            Ok(n) => {
                let addrs = node_addresses(&n);
                snap.nodes.insert(name, addrs);
            }
            Err(e) => snap.problems.push(format!("{at}: {e}; skipped")),
        },
        "" => snap.problems.push(format!("{at}: no kind; skipped")),
        other => snap.problems.push(format!(
            "{at}: kind {other} is not used by the proxy (Service, EndpointSlice, Node); skipped"
        )),
    }
}

/// A Node's addresses, InternalIP first.
pub fn node_addresses(n: &Node) -> Vec<std::net::IpAddr> {
    let mut addrs: Vec<(bool, std::net::IpAddr)> = n
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|a| {
            a.address
                .parse()
                .ok()
                .map(|ip| (a.type_ != "InternalIP", ip))
        })
        .collect();
    addrs.sort_by_key(|(external, _)| *external);
    addrs.into_iter().map(|(_, ip)| ip).collect()
}

/// Watches `dir`: sends a snapshot now and after every change, until the receiver goes.
pub fn watch(dir: PathBuf) -> watch::Receiver<Snapshot> {
    let (tx, rx) = watch::channel(load(&dir));
    tokio::spawn(async move {
        let mut seen = fingerprint(&dir);
        loop {
            tokio::time::sleep(POLL).await;
            let now = fingerprint(&dir);
            if now != seen {
                seen = now;
                if tx.send(load(&dir)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}
