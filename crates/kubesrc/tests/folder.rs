//! A manifest folder as a source that fails closed: what `watch` sends while the folder is
//! renamed away, while a file is half-written, and when the path is wrong from the start.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubesrc::Objects;
use tokio::sync::watch::Receiver;

const POLL: Duration = Duration::from_millis(5);

fn service(name: &str, ip: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  clusterIP: {ip}\n"
    )
}

fn names(o: &Objects) -> Vec<String> {
    o.services.keys().cloned().collect()
}

/// Every value the source sends for `period` (the one it holds, then each change).
async fn sent_during(rx: &mut Receiver<Arc<Objects>>, period: Duration) -> Vec<Arc<Objects>> {
    let mut seen = vec![Arc::clone(&rx.borrow_and_update())];
    let end = Instant::now() + period;
    while let Ok(Ok(())) = tokio::time::timeout_at(end.into(), rx.changed()).await {
        seen.push(Arc::clone(&rx.borrow_and_update()));
    }
    seen
}

/// Waits until the source sends objects that pass `check`.
async fn until(rx: &mut Receiver<Arc<Objects>>, what: &str, check: impl Fn(&Objects) -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|o| check(o)))
        .await
        .is_ok_and(|r| r.is_ok());
    assert!(waited, "{what}: last {:?}", rx.borrow());
}

fn write(dir: &Path, file: &str, text: &str) {
    std::fs::write(dir.join(file), text).expect("write manifest");
}

#[tokio::test]
async fn a_folder_renamed_away_for_a_while_loses_no_object() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("manifests");
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "web.yaml", &service("web", "10.96.0.10"));
    write(&dir, "db.yaml", &service("db", "10.96.0.11"));
    let mut rx = kubesrc::manifests::watch(dir.clone(), POLL);
    let want = ["default/db", "default/web"];
    until(&mut rx, "both Services", |o| names(o) == want).await;
    std::fs::rename(&dir, parent.path().join("away")).unwrap();
    let during = sent_during(&mut rx, Duration::from_millis(300)).await;
    for o in &during {
        assert_eq!(names(o), want, "objects lost while the folder was away");
        assert!(o.synced);
    }
    assert!(
        during.iter().any(|o| !o.errors.is_empty()),
        "the unreadable folder is reported"
    );
    std::fs::rename(parent.path().join("away"), &dir).unwrap();
    until(&mut rx, "the error to clear", |o| o.errors.is_empty()).await;
    assert_eq!(names(&rx.borrow()), want);
}

#[tokio::test]
async fn a_half_written_file_keeps_its_objects() {
    let dir = tempfile::tempdir().unwrap();
    let whole = format!(
        "{}---\n{}",
        service("web", "10.96.0.10"),
        service("db", "10.96.0.11")
    );
    write(dir.path(), "svc.yaml", &whole);
    let mut rx = kubesrc::manifests::watch(dir.path().to_path_buf(), POLL);
    let want = ["default/db", "default/web"];
    until(&mut rx, "both Services", |o| names(o) == want).await;
    // A writer truncated the file and stopped mid-way: first nothing, then half a document.
    for partial in [
        "",
        "apiVersion: v1\nkind: Service\nmetadata: {name: web, names",
    ] {
        write(dir.path(), "svc.yaml", partial);
        for o in sent_during(&mut rx, Duration::from_millis(200)).await {
            assert_eq!(names(&o), want, "{partial:?} lost objects");
        }
        assert!(!rx.borrow().errors.is_empty(), "{partial:?} is reported");
    }
    write(dir.path(), "svc.yaml", &service("web", "10.96.0.10"));
    until(&mut rx, "the whole file", |o| {
        names(o) == ["default/web"] && o.errors.is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_mistyped_folder_is_never_synced() {
    let mut rx = kubesrc::manifests::watch("/nonexistent/wnt-manifests".into(), POLL);
    for o in sent_during(&mut rx, Duration::from_millis(100)).await {
        assert!(!o.synced, "a folder that was never read is not synced");
    }
    assert!(!kubesrc::manifests::load(Path::new("/nonexistent/wnt-manifests")).synced);
}
