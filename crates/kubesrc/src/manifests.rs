//! A folder of manifests as `kubectl get -o yaml` (or `-o json`) prints them: Services,
//! EndpointSlices, Nodes, Namespaces, Pods, and `List`s of them, several documents per file. Bad
//! documents and unknown kinds are reported and skipped; the rest is used. Only files that
//! changed are read again, so one rewritten file among many is picked up quickly.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch as channel;

use crate::{ByKey, Objects, Sourced, key};

/// Reads every manifest in `dir`.
pub fn load(dir: &Path) -> Objects {
    Folder::new(dir.to_path_buf()).objects()
}

/// Parses one file's documents into `objects`; `origin` names the file in problems.
pub fn load_text(text: &str, origin: &str, objects: &mut Objects) {
    objects.synced = true;
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = match serde_json::Value::deserialize(doc) {
            Ok(serde_json::Value::Null) => continue,
            Ok(v) => v,
            Err(e) => {
                objects.problems.push(format!(
                    "{origin} document {}: not YAML or JSON: {e}",
                    i + 1
                ));
                // A syntax error ends the stream: the rest of the file cannot be read.
                break;
            }
        };
        load_object(value, &format!("{origin} document {}", i + 1), objects);
    }
}

fn load_object(value: serde_json::Value, origin: &str, objects: &mut Objects) {
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let name = value
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("?");
    let at = format!("{origin} ({kind} {name})");
    match kind {
        "List" | "ServiceList" | "EndpointSliceList" | "NodeList" | "NamespaceList" | "PodList" => {
            let items = value.get("items").and_then(|i| i.as_array());
            for (j, item) in items.into_iter().flatten().enumerate() {
                load_object(item.clone(), &format!("{origin} item {j}"), objects);
            }
        }
        "Service" => insert::<Service>(
            value,
            at,
            true,
            &mut objects.services,
            &mut objects.problems,
        ),
        "EndpointSlice" => {
            insert::<EndpointSlice>(value, at, true, &mut objects.slices, &mut objects.problems)
        }
        "Node" => insert::<Node>(value, at, false, &mut objects.nodes, &mut objects.problems),
        "Namespace" => insert::<Namespace>(
            value,
            at,
            false,
            &mut objects.namespaces,
            &mut objects.problems,
        ),
        "Pod" => insert::<Pod>(value, at, true, &mut objects.pods, &mut objects.problems),
        "" => objects.problems.push(format!("{at}: no kind; skipped")),
        other => objects.problems.push(format!(
            "{at}: kind {other} is not read (Service, EndpointSlice, Node, Namespace, Pod); skipped"
        )),
    }
}

/// Decodes one object; a namespaced object without a namespace is in `default`, as `kubectl
/// apply` would put it.
fn insert<K>(
    value: serde_json::Value,
    at: String,
    namespaced: bool,
    into: &mut ByKey<K>,
    problems: &mut Vec<String>,
) where
    K: kube::Resource + DeserializeOwned,
{
    match serde_json::from_value::<K>(value) {
        Ok(mut object) => {
            if namespaced && object.meta().namespace.is_none() {
                object.meta_mut().namespace = Some("default".into());
            }
            into.insert(key(&object), Arc::new(Sourced { origin: at, object }));
        }
        Err(e) => problems.push(format!("{at}: {e}; skipped")),
    }
}

/// What identifies a file's content without reading it: a rewrite changes one of these.
#[derive(Clone, Copy, Debug)]
struct Stamp {
    modified_ns: i128,
    len: u64,
    inode: u64,
    /// Modified so recently that a rewrite in the same clock tick would keep the same stamp
    /// (git's "racy clean"): such a file is read again at the next check.
    racy: bool,
}

impl PartialEq for Stamp {
    fn eq(&self, other: &Stamp) -> bool {
        (self.modified_ns, self.len, self.inode) == (other.modified_ns, other.len, other.inode)
    }
}

/// File times advance in kernel clock ticks (a few ms); a stamp this close to now is racy.
const RACY_NS: i128 = 50_000_000;

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    let modified_ns = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    Some(Stamp {
        modified_ns,
        len: m.len(),
        inode: m.ino(),
        racy: now_ns - modified_ns < RACY_NS,
    })
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

/// A manifest folder with each file's objects as last read, so a change re-reads one file.
struct Folder {
    dir: PathBuf,
    files: BTreeMap<PathBuf, (Option<Stamp>, Objects)>,
    listing_problem: Option<String>,
}

impl Folder {
    fn new(dir: PathBuf) -> Folder {
        let mut folder = Folder {
            dir,
            files: BTreeMap::new(),
            listing_problem: None,
        };
        folder.refresh();
        folder
    }

    /// Re-reads the files that changed; true when anything did.
    fn refresh(&mut self) -> bool {
        let files = match manifest_files(&self.dir) {
            Ok(f) => f,
            Err(e) => {
                let problem = Some(format!("{}: {e}", self.dir.display()));
                let changed = problem != self.listing_problem || !self.files.is_empty();
                self.listing_problem = problem;
                self.files.clear();
                return changed;
            }
        };
        let mut changed = self.listing_problem.take().is_some();
        let before = self.files.len();
        self.files.retain(|p, _| files.contains(p));
        changed |= self.files.len() != before;
        for file in files {
            let now = stamp(&file);
            if self
                .files
                .get(&file)
                .is_some_and(|(s, _)| s.is_some_and(|s| Some(s) == now && !s.racy))
            {
                continue;
            }
            let mut objects = Objects::default();
            match std::fs::read_to_string(&file) {
                Ok(text) => load_text(&text, &file.display().to_string(), &mut objects),
                Err(e) => objects.problems.push(format!("{}: {e}", file.display())),
            }
            match self.files.get_mut(&file) {
                // Read again only because it was racy, and the same: keep the objects as they
                // were (same allocations), so consumers see no change.
                Some((stamp, old)) if *old == objects => *stamp = now,
                _ => {
                    self.files.insert(file, (now, objects));
                    changed = true;
                }
            }
        }
        changed
    }

    /// All files' objects merged; a later file (by name) wins on the same key.
    fn objects(&self) -> Objects {
        let mut all = Objects {
            synced: true,
            ..Objects::default()
        };
        all.problems.extend(self.listing_problem.iter().cloned());
        for (_, o) in self.files.values() {
            all.services
                .extend(o.services.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
            all.slices
                .extend(o.slices.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
            all.nodes
                .extend(o.nodes.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
            all.namespaces
                .extend(o.namespaces.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
            all.pods
                .extend(o.pods.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
            all.problems.extend(o.problems.iter().cloned());
        }
        all
    }
}

/// Watches `dir`: sends the objects now and after every change, until the receiver goes.
pub fn watch(dir: PathBuf, poll: Duration) -> channel::Receiver<Arc<Objects>> {
    let mut folder = Folder::new(dir);
    let (tx, rx) = channel::channel(Arc::new(folder.objects()));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(poll).await;
            // Reading and parsing are blocking work; keep them off the threads that serve.
            let Ok(update) = tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                let changed = folder.refresh();
                let objects = changed.then(|| Arc::new(folder.objects()));
                if changed {
                    tracing::debug!(took = ?started.elapsed(), "manifests re-read");
                }
                (folder, objects)
            })
            .await
            else {
                return;
            };
            folder = update.0;
            if let Some(objects) = update.1
                && tx.send(objects).is_err()
            {
                return;
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    const SVC: &str =
        "kind: Service\napiVersion: v1\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.20}\n";

    #[test]
    fn only_changed_files_are_read_again_and_removed_files_drop_their_objects() {
        let dir = tempfile::Builder::new()
            .prefix("wnt-dns-kubesrc-")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("a.yaml"), SVC).unwrap();
        std::fs::write(dir.path().join("b.yaml"), SVC.replace("web", "db")).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
        let past = std::time::SystemTime::now() - Duration::from_secs(10);
        for f in ["a.yaml", "b.yaml"] {
            let file = std::fs::File::options()
                .write(true)
                .open(dir.path().join(f))
                .unwrap();
            file.set_modified(past).unwrap();
        }
        let mut folder = Folder::new(dir.path().to_path_buf());
        let first = folder.objects();
        assert_eq!(
            first.services.keys().collect::<Vec<_>>(),
            ["default/db", "default/web"]
        );
        assert!(!folder.refresh(), "nothing changed");
        std::fs::write(
            dir.path().join("b.yaml"),
            SVC.replace("web", "db").replace(".20", ".21"),
        )
        .unwrap();
        assert!(folder.refresh());
        let second = folder.objects();
        // The untouched file's object is the same allocation: consumers can skip it.
        assert!(Arc::ptr_eq(
            &first.services["default/web"],
            &second.services["default/web"]
        ));
        assert!(!Arc::ptr_eq(
            &first.services["default/db"],
            &second.services["default/db"]
        ));
        // Just written, so read again at the next check (same-tick rewrites are not missed),
        // but the same content is no change.
        assert!(!folder.refresh());
        let third = folder.objects();
        assert!(Arc::ptr_eq(
            &second.services["default/db"],
            &third.services["default/db"]
        ));
        std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
        assert!(folder.refresh());
        assert_eq!(
            folder.objects().services.keys().collect::<Vec<_>>(),
            ["default/db"]
        );
    }

    #[test]
    fn a_missing_folder_is_a_problem_not_a_panic() {
        let o = load(Path::new("/nonexistent/wnt-dns"));
        assert!(o.services.is_empty());
        assert!(
            o.problems[0].contains("/nonexistent/wnt-dns"),
            "{:?}",
            o.problems
        );
    }
}
