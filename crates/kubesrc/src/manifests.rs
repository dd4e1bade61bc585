//! A folder of manifests as `kubectl get -o yaml` (or `-o json`) prints them: Services,
//! EndpointSlices, Nodes, Namespaces, Pods, NetworkPolicies, and `List`s of them, several documents per file.
//! Kinds not read are reported and skipped. Only files that changed are read again, so one
//! rewritten file among many is picked up quickly.
//!
//! A folder is a source that fails closed, file by file: a file is taken whole or not at all.
//! A file that cannot be read, does not parse (a syntax error, a document without a kind or a
//! name, an object that does not decode), or is empty after having objects (a writer truncated
//! it and is still writing) keeps the objects it had when last read whole; a folder that cannot
//! be listed (renamed, removed, unreadable) keeps every file's. A file rewritten in place is
//! taken once it has been still for [`QUIET`], so a slow writer's first half is not read as the
//! whole. Each of these is in [`Objects::errors`] while it lasts. Only a file that is gone from
//! a folder that was listed drops its objects. To change a file atomically, write another file
//! and rename it over the old one: that is taken at once.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch as channel;

use crate::{ByKey, Objects, Sourced, key};

/// How long a file rewritten in place must be still before it is read: a write in progress
/// keeps moving its modification time. Also the kernel's file-time granularity with a margin:
/// a rewrite within this of the last read could keep the same stamp ("racy clean", as git
/// says), so such a file is read again.
pub const QUIET: Duration = Duration::from_millis(50);

/// Reads every manifest in `dir` once: what a first read of the folder gives (not synced, and
/// in [`Objects::errors`], when the folder or a file cannot be read whole).
pub fn load(dir: &Path) -> Objects {
    Folder::new(dir.to_path_buf()).objects()
}

/// Parses one text's documents into `objects`, on its own (not as a file of a folder): the
/// documents that parse are used, the others reported in `objects.problems` and skipped;
/// `origin` names the text in problems.
pub fn load_text(text: &str, origin: &str, objects: &mut Objects) {
    objects.synced = true;
    let (read, errors) = parse(text, origin);
    merge(objects, &read);
    objects.problems.extend(read.problems);
    objects
        .problems
        .extend(errors.into_iter().map(|e| format!("{e}; skipped")));
}

/// A text's objects, with the documents of kinds not read in `problems`, and the errors: the
/// documents that do not parse or decode (after a syntax error nothing more can be read).
fn parse(text: &str, origin: &str) -> (Objects, Vec<String>) {
    let mut objects = Objects::default();
    let mut errors = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let at = format!("{origin} document {}", i + 1);
        match serde_json::Value::deserialize(doc) {
            Ok(serde_json::Value::Null) => {}
            Ok(v) => load_object(v, &at, &mut objects, &mut errors),
            Err(e) => {
                errors.push(format!("{at}: not YAML or JSON: {e}"));
                // A syntax error ends the stream: the rest of the text cannot be read.
                break;
            }
        }
    }
    (objects, errors)
}

/// Adds `from`'s objects to `into` (a later one wins on the same key).
fn merge(into: &mut Objects, from: &Objects) {
    fn extend<K>(into: &mut ByKey<K>, from: &ByKey<K>) {
        into.extend(from.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
    }
    extend(&mut into.services, &from.services);
    extend(&mut into.slices, &from.slices);
    extend(&mut into.nodes, &from.nodes);
    extend(&mut into.namespaces, &from.namespaces);
    extend(&mut into.pods, &from.pods);
    extend(&mut into.network_policies, &from.network_policies);
}

fn load_object(
    value: serde_json::Value,
    origin: &str,
    objects: &mut Objects,
    errors: &mut Vec<String>,
) {
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let name = value
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("?");
    let at = format!("{origin} ({kind} {name})");
    match kind {
        "List" | "ServiceList" | "EndpointSliceList" | "NodeList" | "NamespaceList" | "PodList"
        | "NetworkPolicyList" => {
            let items = value.get("items").and_then(|i| i.as_array());
            for (j, item) in items.into_iter().flatten().enumerate() {
                load_object(item.clone(), &format!("{origin} item {j}"), objects, errors);
            }
        }
        "Service" => insert::<Service>(value, at, true, &mut objects.services, errors),
        "EndpointSlice" => insert::<EndpointSlice>(value, at, true, &mut objects.slices, errors),
        "Node" => insert::<Node>(value, at, false, &mut objects.nodes, errors),
        "Namespace" => insert::<Namespace>(value, at, false, &mut objects.namespaces, errors),
        "Pod" => insert::<Pod>(value, at, true, &mut objects.pods, errors),
        "NetworkPolicy" => insert::<NetworkPolicy>(
            value,
            at,
            true,
            &mut objects.network_policies,
            errors,
        ),
        // A document cut short can lack its kind: an error, not a kind to skip.
        "" => errors.push(format!("{at}: no kind")),
        other => objects.problems.push(format!(
            "{at}: kind {other} is not read (Service, EndpointSlice, Node, Namespace, Pod, NetworkPolicy); skipped"
        )),
    }
}

/// Decodes one object; a namespaced object without a namespace is in `default`, as `kubectl
/// apply` would put it. One without a name is an error.
fn insert<K>(
    value: serde_json::Value,
    at: String,
    namespaced: bool,
    into: &mut ByKey<K>,
    errors: &mut Vec<String>,
) where
    K: kube::Resource + DeserializeOwned,
{
    match serde_json::from_value::<K>(value) {
        Ok(object) if object.meta().name.as_deref().is_none_or(str::is_empty) => {
            errors.push(format!("{at}: metadata.name is missing"));
        }
        Ok(mut object) => {
            if namespaced && object.meta().namespace.is_none() {
                object.meta_mut().namespace = Some("default".into());
            }
            into.insert(key(&object), Arc::new(Sourced { origin: at, object }));
        }
        Err(e) => errors.push(format!("{at}: {e}")),
    }
}

/// What identifies a file's content without reading it: a rewrite changes one of these.
#[derive(Clone, Copy, Debug)]
struct Stamp {
    modified_ns: i128,
    len: u64,
    inode: u64,
    /// Modified less than [`QUIET`] ago: maybe still being written, and a rewrite in the same
    /// clock tick would keep the same stamp.
    racy: bool,
}

impl PartialEq for Stamp {
    fn eq(&self, other: &Stamp) -> bool {
        (self.modified_ns, self.len, self.inode) == (other.modified_ns, other.len, other.inode)
    }
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let m = std::fs::metadata(path)?;
    let modified_ns = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    Ok(Stamp {
        modified_ns,
        len: m.len(),
        inode: m.ino(),
        racy: now_ns - modified_ns < QUIET.as_nanos() as i128,
    })
}

fn manifest_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        // An entry that cannot be read is an error of the listing: what it would have named
        // must not look deleted.
        let path = entry?.path();
        if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// One manifest file as last read.
#[derive(Default)]
struct File {
    /// The stamp of the content `objects` came from.
    taken: Option<Stamp>,
    /// Its objects as last read whole; `None` until it has been.
    objects: Option<Objects>,
    /// The stamp of content that was read and refused, so it is not read again until it
    /// changes.
    refused: Option<Stamp>,
    /// Why its current content is not taken, while it is not.
    error: Option<String>,
}

impl File {
    /// Reads the file again if its stamp says it changed; true when its objects did.
    fn refresh(&mut self, path: &Path) -> bool {
        let now = match stamp(path) {
            Ok(s) => s,
            Err(e) => {
                self.error = Some(format!("{}: {e}", path.display()));
                return false;
            }
        };
        let unchanged = |s: Option<Stamp>| s.is_some_and(|s| s == now && !s.racy);
        if unchanged(self.taken) {
            self.error = None;
            return false;
        }
        // Rewritten in place and moving: taken once it has been still for QUIET.
        let in_place = self.taken.is_some_and(|t| t.inode == now.inode);
        if unchanged(self.refused) || (in_place && now.racy) {
            return false;
        }
        match self.read(path) {
            Ok(objects) => {
                self.taken = Some(now);
                self.refused = None;
                self.error = None;
                // The same content read again: the objects stay as they were (the same
                // allocations), so consumers see no change.
                if self.objects.as_ref() == Some(&objects) {
                    return false;
                }
                self.objects = Some(objects);
                true
            }
            Err(e) => {
                self.refused = Some(now);
                self.error = Some(e);
                false
            }
        }
    }

    /// The file's objects if it reads whole; an error says why not.
    fn read(&self, path: &Path) -> Result<Objects, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (objects, errors) = parse(&text, &path.display().to_string());
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        let had = self.objects.as_ref().is_some_and(|o| !o.is_empty());
        if had && objects.is_empty() && objects.problems.is_empty() {
            return Err(format!(
                "{}: empty, as a file being written is (delete the file to remove its objects)",
                path.display()
            ));
        }
        Ok(objects)
    }
}

/// A manifest folder with each file's objects as last read whole, so a change re-reads one
/// file and an error loses nothing.
struct Folder {
    dir: PathBuf,
    files: BTreeMap<PathBuf, File>,
    /// Why the folder cannot be listed, while it cannot.
    listing_error: Option<String>,
    /// Listed and every file read whole, once.
    synced: bool,
}

impl Folder {
    fn new(dir: PathBuf) -> Folder {
        let mut folder = Folder {
            dir,
            files: BTreeMap::new(),
            listing_error: None,
            synced: false,
        };
        folder.refresh();
        folder
    }

    /// Re-reads the files that changed; true when the objects, the errors or being synced did.
    fn refresh(&mut self) -> bool {
        let before = (self.errors(), self.synced);
        let mut changed = false;
        match manifest_files(&self.dir) {
            Err(e) => {
                self.listing_error = Some(format!(
                    "{}: {e} (is --manifests right? was the folder moved?)",
                    self.dir.display()
                ));
            }
            Ok(paths) => {
                self.listing_error = None;
                let count = self.files.len();
                // Gone from a folder that was listed: deleted, the only way objects go.
                self.files.retain(|p, _| paths.binary_search(p).is_ok());
                changed |= self.files.len() != count;
                for path in paths {
                    changed |= self.files.entry(path.clone()).or_default().refresh(&path);
                }
                self.synced |= self.files.values().all(|f| f.objects.is_some());
            }
        }
        changed || before != (self.errors(), self.synced)
    }

    /// The errors of the folder and its files, now.
    fn errors(&self) -> Vec<String> {
        let files = self.files.values().filter_map(|f| f.error.clone());
        self.listing_error.iter().cloned().chain(files).collect()
    }

    /// All files' objects merged; a later file (by name) wins on the same key.
    fn objects(&self) -> Objects {
        let mut all = Objects {
            synced: self.synced,
            errors: self.errors(),
            ..Objects::default()
        };
        for o in self.files.values().filter_map(|f| f.objects.as_ref()) {
            merge(&mut all, o);
            all.problems.extend(o.problems.iter().cloned());
        }
        all
    }
}

/// Watches `dir`: sends the objects now and after every change, until the receiver goes.
/// Read errors keep the last good objects, are logged, and are in [`Objects::errors`].
pub fn watch(dir: PathBuf, poll: Duration) -> channel::Receiver<Arc<Objects>> {
    let mut folder = Folder::new(dir);
    let first = folder.objects();
    crate::report_errors(&[], &first.errors);
    let (tx, rx) = channel::channel(Arc::new(first));
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
                && !crate::publish(&tx, objects)
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

    fn folder_dir() -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix("wnt-kubesrc-")
            .tempdir()
            .unwrap()
    }

    /// Writes `text` to `file` in place and dates it `secs` seconds back: still, not racy.
    fn write_still(file: &Path, text: &str, secs: u64) {
        std::fs::write(file, text).unwrap();
        let f = std::fs::File::options().write(true).open(file).unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(secs))
            .unwrap();
    }

    fn services(o: &Objects) -> Vec<&str> {
        o.services.keys().map(String::as_str).collect()
    }

    #[test]
    fn network_policies_are_read_in_their_namespace_and_a_bad_one_is_named() {
        let mut o = Objects::default();
        let text = "kind: NetworkPolicyList\napiVersion: networking.k8s.io/v1\nitems:\n- kind: NetworkPolicy\n  apiVersion: networking.k8s.io/v1\n  metadata: {name: deny}\n  spec: {podSelector: {}}\n---\nkind: NetworkPolicy\napiVersion: networking.k8s.io/v1\nmetadata: {name: bad, namespace: x}\nspec: {podSelector: 7}\n";
        load_text(text, "np.yaml", &mut o);
        assert_eq!(
            o.network_policies.keys().collect::<Vec<_>>(),
            ["default/deny"]
        );
        assert!(
            o.problems.len() == 1
                && o.problems[0].contains("np.yaml document 2 (NetworkPolicy bad)"),
            "{:?}",
            o.problems
        );
    }

    #[test]
    fn only_changed_files_are_read_again_and_removed_files_drop_their_objects() {
        let dir = folder_dir();
        write_still(&dir.path().join("a.yaml"), SVC, 20);
        write_still(&dir.path().join("b.yaml"), &SVC.replace("web", "db"), 20);
        std::fs::write(dir.path().join("notes.txt"), "not a manifest").unwrap();
        let mut folder = Folder::new(dir.path().to_path_buf());
        let first = folder.objects();
        assert!(first.synced && first.errors.is_empty(), "{first:?}");
        assert_eq!(services(&first), ["default/db", "default/web"]);
        assert!(!folder.refresh(), "nothing changed");
        let db2 = SVC.replace("web", "db").replace(".20", ".21");
        write_still(&dir.path().join("b.yaml"), &db2, 10);
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
        // A new file (another inode, as a rename makes) is taken at once, though just written;
        // and read again at the next check (a same-tick rewrite is not missed), where the same
        // content is no change.
        std::fs::write(dir.path().join("c.yaml"), SVC.replace("web", "api")).unwrap();
        assert!(folder.refresh());
        let third = folder.objects();
        assert_eq!(
            services(&third),
            ["default/api", "default/db", "default/web"]
        );
        let f = std::fs::File::options()
            .write(true)
            .open(dir.path().join("c.yaml"))
            .unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(5))
            .unwrap();
        assert!(!folder.refresh());
        assert!(Arc::ptr_eq(
            &third.services["default/api"],
            &folder.objects().services["default/api"]
        ));
        std::fs::remove_file(dir.path().join("a.yaml")).unwrap();
        assert!(folder.refresh());
        assert_eq!(services(&folder.objects()), ["default/api", "default/db"]);
    }

    #[test]
    fn a_missing_folder_is_an_error_and_never_synced() {
        let o = load(Path::new("/nonexistent/wnt-kubesrc"));
        assert!(o.services.is_empty());
        assert!(!o.synced, "a folder never listed is not synced");
        assert!(
            o.errors[0].contains("/nonexistent/wnt-kubesrc"),
            "{:?}",
            o.errors
        );
    }

    #[test]
    fn a_renamed_folder_keeps_every_object_until_it_is_back() {
        let parent = folder_dir();
        let dir = parent.path().join("manifests");
        std::fs::create_dir(&dir).unwrap();
        write_still(&dir.join("a.yaml"), SVC, 20);
        let mut folder = Folder::new(dir.clone());
        let before = folder.objects();
        std::fs::rename(&dir, parent.path().join("away")).unwrap();
        assert!(folder.refresh(), "the error is news");
        let away = folder.objects();
        assert_eq!(services(&away), ["default/web"]);
        assert!(away.synced);
        assert!(away.errors[0].contains("manifests"), "{:?}", away.errors);
        std::fs::rename(parent.path().join("away"), &dir).unwrap();
        assert!(folder.refresh(), "the error went");
        let back = folder.objects();
        assert!(back.errors.is_empty(), "{:?}", back.errors);
        assert!(Arc::ptr_eq(
            &before.services["default/web"],
            &back.services["default/web"]
        ));
    }

    #[test]
    fn a_file_that_does_not_read_whole_keeps_its_last_good_objects() {
        let dir = folder_dir();
        let file = dir.path().join("a.yaml");
        let two = format!("{SVC}---\n{}", SVC.replace("web", "db"));
        write_still(&file, &two, 60);
        write_still(&dir.path().join("b.yaml"), &SVC.replace("web", "other"), 60);
        let mut folder = Folder::new(dir.path().to_path_buf());
        let good = folder.objects();
        assert_eq!(
            services(&good),
            ["default/db", "default/other", "default/web"]
        );
        let half = &two[..two.len() - 12];
        for (i, bad) in [
            "",
            "   \n# nothing yet\n",
            half,
            "kind: Service\napiVersion: v1\nmetadata: {name: web",
            "apiVersion: v1\n",
            "kind: Service\napiVersion: v1\nmetadata: {}\n",
            "kind: Service\napiVersion: v1\nmetadata: {name: web}\nspec: {ports: 7}\n",
            "- just\n- a list\n",
        ]
        .iter()
        .enumerate()
        {
            write_still(&file, bad, 50 - i as u64);
            folder.refresh();
            let o = folder.objects();
            assert_eq!(o.services, good.services, "{bad:?} lost objects");
            assert!(o.synced);
            assert!(
                o.errors.len() == 1 && o.errors[0].contains("a.yaml"),
                "{bad:?}: {:?}",
                o.errors
            );
        }
        // Written whole again: taken, and the error is gone.
        write_still(&file, SVC, 5);
        assert!(folder.refresh());
        let o = folder.objects();
        assert_eq!(services(&o), ["default/other", "default/web"]);
        assert!(o.errors.is_empty(), "{:?}", o.errors);
    }

    #[test]
    fn a_file_that_never_read_whole_holds_the_folder_unsynced() {
        let dir = folder_dir();
        write_still(&dir.path().join("a.yaml"), SVC, 20);
        write_still(
            &dir.path().join("b.yaml"),
            "kind: Service\nmetadata: {name: x",
            20,
        );
        let mut folder = Folder::new(dir.path().to_path_buf());
        let o = folder.objects();
        assert!(!o.synced, "b.yaml has never been read whole");
        assert!(o.errors[0].contains("b.yaml"), "{:?}", o.errors);
        assert!(!folder.refresh(), "the same broken content is not news");
        write_still(&dir.path().join("b.yaml"), &SVC.replace("web", "x"), 10);
        assert!(folder.refresh());
        let o = folder.objects();
        assert!(o.synced && o.errors.is_empty(), "{o:?}");
        // Synced stays: a later broken file is an error, not a folder that was never read.
        write_still(&dir.path().join("c.yaml"), "{", 10);
        assert!(folder.refresh());
        let o = folder.objects();
        assert!(o.synced && o.errors[0].contains("c.yaml"), "{o:?}");
    }

    #[test]
    fn a_file_rewritten_in_place_is_taken_once_it_is_still() {
        let dir = folder_dir();
        let file = dir.path().join("a.yaml");
        write_still(&file, SVC, 20);
        let mut folder = Folder::new(dir.path().to_path_buf());
        // A writer's first half, just written in place: valid YAML, but not taken yet.
        let half = "kind: Service\napiVersion: v1\nmetadata: {name: we}\n";
        std::fs::write(&file, half).unwrap();
        assert!(!folder.refresh());
        assert_eq!(services(&folder.objects()), ["default/web"]);
        let f = std::fs::File::options().write(true).open(&file).unwrap();
        f.set_modified(std::time::SystemTime::now() - Duration::from_secs(1))
            .unwrap();
        assert!(folder.refresh(), "still now: taken");
        assert_eq!(services(&folder.objects()), ["default/we"]);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Services `name-0..n` at 10.96.0.x, in kubectl's block YAML, one document each.
        fn block_yaml(name: &str, n: usize) -> String {
            (0..n)
                .map(|i| {
                    format!(
                        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}-{i}\n  namespace: default\nspec:\n  clusterIP: 10.96.0.{}\n  ports:\n  - port: 80\n    protocol: TCP\n",
                        i + 1
                    )
                })
                .collect::<Vec<_>>()
                .join("---\n")
        }

        /// The same as one JSON document per object (what `yaml_stream` in the tests writes).
        fn json_docs(name: &str, n: usize) -> String {
            (0..n)
                .map(|i| {
                    format!(
                        "---\n{{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{{\"name\":\"{name}-{i}\",\"namespace\":\"default\"}},\"spec\":{{\"clusterIP\":\"10.96.1.{}\"}}}}\n",
                        i + 1
                    )
                })
                .collect()
        }

        /// A folder whose `a.yaml` was read whole with `good`, and whose `b.yaml` holds one
        /// Service nobody touches.
        fn folder_with(good: &str) -> (tempfile::TempDir, Folder) {
            let dir = folder_dir();
            write_still(&dir.path().join("a.yaml"), good, 100);
            write_still(&dir.path().join("b.yaml"), &block_yaml("other", 1), 100);
            let folder = Folder::new(dir.path().to_path_buf());
            (dir, folder)
        }

        /// Writes `bytes` over `a.yaml` (still, so it is read) and refreshes.
        fn overwrite(dir: &Path, folder: &mut Folder, bytes: &[u8]) -> Objects {
            let file = dir.join("a.yaml");
            std::fs::write(&file, bytes).unwrap();
            let f = std::fs::File::options().write(true).open(&file).unwrap();
            f.set_modified(std::time::SystemTime::now() - Duration::from_secs(10))
                .unwrap();
            folder.refresh();
            folder.objects()
        }

        /// Text that is YAML-ish: pieces of manifests and YAML syntax in any order.
        fn yamlish() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("kind: Service\n".to_string()),
                Just("kind: EndpointSlice\n".to_string()),
                Just("kind: List\nitems:\n".to_string()),
                Just("apiVersion: v1\n".to_string()),
                Just("metadata: {name: web}\n".to_string()),
                Just("metadata:\n  name: x\n".to_string()),
                Just("spec: {clusterIP: 10.96.0.9}\n".to_string()),
                Just("---\n".to_string()),
                Just("- ".to_string()),
                Just("{".to_string()),
                Just("\"".to_string()),
                Just("  ".to_string()),
                Just("# c\n".to_string()),
                "[a-z:{}\\[\\], \\-\n]{0,12}",
            ];
            prop::collection::vec(piece, 0..12).prop_map(|p| p.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

            /// Whatever is written over a file that was read whole (a prefix of its next
            /// version cut at any byte, YAML-ish text, bytes that are not UTF-8), the folder
            /// holds either the file's last good objects, with an error naming the file, or
            /// exactly what a whole clean read of the new text gives; the other file is
            /// untouched; nothing panics.
            #[test]
            fn a_file_is_taken_whole_or_its_last_good_objects_are_kept(
                n in 1usize..5,
                cut in any::<prop::sample::Index>(),
                text in yamlish(),
                bytes in prop::collection::vec(any::<u8>(), 0..64),
                pick in 0u8..3,
            ) {
                let good = block_yaml("web", n);
                let next = block_yaml("api", n + 1);
                let written: Vec<u8> = match pick {
                    0 => next.as_bytes()[..cut.index(next.len() + 1)].to_vec(),
                    1 => text.into_bytes(),
                    _ => bytes,
                };
                let (dir, mut folder) = folder_with(&good);
                let before = folder.objects();
                let after = overwrite(dir.path(), &mut folder, &written);
                prop_assert!(after.synced);
                let whole = std::str::from_utf8(&written)
                    .ok()
                    .map(|t| parse(t, "x"))
                    .filter(|(o, errors)| errors.is_empty() && !(o.is_empty() && o.problems.is_empty()));
                match whole {
                    Some((o, _)) => {
                        let mut expected = o.services.keys().cloned().collect::<Vec<_>>();
                        expected.push("default/other-0".into());
                        expected.sort();
                        prop_assert_eq!(after.services.keys().cloned().collect::<Vec<_>>(), expected);
                        prop_assert!(after.errors.is_empty(), "{:?}", after.errors);
                    }
                    None => {
                        prop_assert_eq!(&after.services, &before.services);
                        prop_assert!(after.errors.len() == 1 && after.errors[0].contains("a.yaml"), "{:?}", after.errors);
                    }
                }
            }

            /// A stream of one JSON document per object cut at any byte: the file's Services
            /// are its last good ones or the new documents that were written whole, never an
            /// object cut short.
            #[test]
            fn a_json_stream_cut_anywhere_never_yields_a_cut_object(
                n in 1usize..6,
                cut in any::<prop::sample::Index>(),
            ) {
                let (dir, mut folder) = folder_with(&json_docs("web", 2));
                let before = folder.objects();
                let next = json_docs("api", n);
                let written = &next.as_bytes()[..cut.index(next.len() + 1)];
                let after = overwrite(dir.path(), &mut folder, written);
                let names: Vec<String> = after.services.keys().filter(|k| *k != "default/other-0").cloned().collect();
                let kept = after.services == before.services;
                let whole_prefix = (0..=n).any(|k| {
                    let mut want: Vec<String> = (0..k).map(|i| format!("default/api-{i}")).collect();
                    want.sort();
                    names == want
                });
                prop_assert!(kept || (whole_prefix && !names.is_empty()), "{names:?} from {:?}", String::from_utf8_lossy(written));
            }
        }
    }
}
