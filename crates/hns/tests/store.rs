//! hnsd's store on disk: a damaged store (truncated, emptied, edited, or holding an object whose
//! references do not resolve) never starts silently. hnsd refuses it with a message that names
//! the file, what is damaged and how to recover, and leaves no socket behind.

mod common;

use std::path::{Path, PathBuf};

use common::{Hnsd, l2bridge};
use hcn::{Endpoint, Guid};
use hns::Profile;
use hns::server::Config;
use serde_json::json;

const EP_NAME: &str = "store-ep-alpha";

fn config(dir: &Path) -> Config {
    Config {
        state_dir: dir.join("state"),
        socket: dir.join("hns.sock"),
        profile: Profile::Ws2022,
    }
}

fn store_file(dir: &Path) -> PathBuf {
    dir.join("state").join("hns.redb")
}

/// A store with a network and an endpoint, written by hnsd and closed cleanly.
async fn store_with_objects() -> tempfile::TempDir {
    let h = Hnsd::start(Profile::Ws2022).await;
    let net = testkit::hnsd::create_network(
        &h.client(),
        &l2bridge("store-net", "10.244.1.0/24", "10.244.1.1"),
    )
    .await;
    h.client()
        .create_endpoint(&Endpoint {
            name: EP_NAME.into(),
            host_compute_network: net.id,
            ..Endpoint::default()
        })
        .await
        .expect("create the endpoint");
    h.stop().await
}

/// hnsd's start on `dir`'s store must be refused; returns the message.
fn refused(dir: &Path) -> String {
    match hns::server::open(&config(dir)) {
        Ok((_, service)) => panic!(
            "hnsd started on a damaged store, serving {} endpoints",
            service.read(|s| s.count(hns::Kind::Endpoint))
        ),
        Err(e) => {
            assert!(
                !dir.join("hns.sock").exists(),
                "a refused hnsd leaves no socket behind"
            );
            e.to_string()
        }
    }
}

fn assert_names_file_and_recovery(message: &str, file: &Path) {
    assert!(
        message.contains(&file.display().to_string()),
        "the message names the store file: {message}"
    );
    assert!(
        message.contains("--repair"),
        "the message says how to recover: {message}"
    );
}

#[tokio::test]
async fn a_truncated_store_is_refused_naming_the_damage_and_the_recovery() {
    let dir = store_with_objects().await;
    let file = store_file(dir.path());
    let len = std::fs::metadata(&file).expect("the store").len();
    for cut in [len / 2, 4096, 600, 100, 9] {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_len(cut))
            .expect("truncate the store");
        let message = refused(dir.path());
        assert_names_file_and_recovery(&message, &file);
        assert!(message.contains("damaged"), "cut at {cut}: {message}");
    }
}

#[tokio::test]
async fn an_empty_store_file_is_not_a_new_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = store_file(dir.path());
    std::fs::create_dir_all(file.parent().expect("state dir")).expect("state dir");
    std::fs::File::create(&file).expect("an empty hns.redb");
    let message = refused(dir.path());
    assert_names_file_and_recovery(&message, &file);
    assert!(message.contains("empty"), "{message}");
    assert_eq!(
        std::fs::metadata(&file).expect("still there").len(),
        0,
        "the empty file is left as it was"
    );
}

#[tokio::test]
async fn an_object_edited_on_disk_is_refused() {
    let dir = store_with_objects().await;
    let file = store_file(dir.path());
    let mut bytes = std::fs::read(&file).expect("read the store");
    let (from, to) = (EP_NAME.as_bytes(), b"store-ep-omega");
    let mut edits = 0;
    for at in 0..bytes.len() - from.len() {
        if &bytes[at..at + from.len()] == from {
            bytes[at..at + from.len()].copy_from_slice(to);
            edits += 1;
        }
    }
    assert!(edits > 0, "the endpoint's name is in the file");
    std::fs::write(&file, &bytes).expect("write the edited store");
    let message = refused(dir.path());
    assert_names_file_and_recovery(&message, &file);
}

/// Writes `doc` into table `table` under `key` with redb directly, as a bug or a hand edit
/// would, bypassing hnsd's rules.
fn put_raw(file: &Path, table: &str, key: &str, doc: &serde_json::Value) {
    let db = redb::Database::open(file).expect("open the store with redb");
    let tx = db.begin_write().expect("write transaction");
    {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(table);
        let mut t = tx.open_table(def).expect("table");
        t.insert(key, doc.to_string().as_bytes()).expect("insert");
    }
    tx.commit().expect("commit");
}

#[tokio::test]
async fn an_endpoint_whose_network_does_not_exist_is_refused() {
    let dir = store_with_objects().await;
    let file = store_file(dir.path());
    let id = Guid::new_v4();
    let missing = Guid::new_v4();
    put_raw(
        &file,
        "endpoints",
        &id.to_string(),
        &json!({"ID": id, "Name": "orphan", "HostComputeNetwork": missing,
                "SchemaVersion": {"Major": 2, "Minor": 0}}),
    );
    let message = refused(dir.path());
    assert_names_file_and_recovery(&message, &file);
    assert!(
        message.contains(&id.to_string()) && message.contains(&missing.to_string()),
        "the message names the endpoint and the missing network: {message}"
    );
}

#[tokio::test]
async fn an_object_stored_under_another_id_or_unreadable_is_refused() {
    for (key, doc) in [
        (
            Guid::new_v4().to_string(),
            json!({"ID": Guid::new_v4(), "Name": "moved", "Type": "NAT",
                   "SchemaVersion": {"Major": 2, "Minor": 0}}),
        ),
        (
            "not-a-guid".to_string(),
            json!({"Name": "x", "Type": "NAT"}),
        ),
        (Guid::new_v4().to_string(), json!([])),
    ] {
        let dir = store_with_objects().await;
        let file = store_file(dir.path());
        put_raw(&file, "networks", &key, &doc);
        let message = refused(dir.path());
        assert_names_file_and_recovery(&message, &file);
        assert!(message.contains(&key), "names the object {key}: {message}");
    }
}

/// The endpoint and the network of [`store_with_objects`], plus an orphan endpoint (its network
/// gone), a load balancer over the whole endpoint and the orphan, a load balancer over the
/// orphan alone, and a network row under a key that is no ID, written past hnsd's rules.
/// Returns (whole endpoint, orphan, lb1, lb2).
async fn store_with_damage(dir: &Path) -> (Guid, Guid, Guid, Guid) {
    let file = store_file(dir);
    let db = redb::Database::open(&file).expect("open");
    let whole = {
        let tx = db.begin_read().expect("read");
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("endpoints");
        let t = tx.open_table(def).expect("endpoints");
        let first = redb::ReadableTable::iter(&t)
            .expect("rows")
            .next()
            .expect("one")
            .expect("row");
        first.0.value().parse::<Guid>().expect("an ID")
    };
    drop(db);
    let (orphan, lb1, lb2) = (Guid::new_v4(), Guid::new_v4(), Guid::new_v4());
    put_raw(
        &file,
        "endpoints",
        &orphan.to_string(),
        &json!({"ID": orphan, "HostComputeNetwork": Guid::new_v4(), "SchemaVersion": {"Major": 2, "Minor": 0}}),
    );
    for (id, eps, port) in [(lb1, vec![whole, orphan], 80), (lb2, vec![orphan], 81)] {
        put_raw(
            &file,
            "loadbalancers",
            &id.to_string(),
            &json!({
            "ID": id, "HostComputeEndpoints": eps, "FrontendVIPs": ["10.96.0.10"],
            "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": port}],
            "SchemaVersion": {"Major": 2, "Minor": 0}}),
        );
    }
    put_raw(&file, "networks", "not-a-guid", &json!({"Name": "x"}));
    (whole, orphan, lb1, lb2)
}

#[tokio::test]
async fn repair_keeps_what_is_whole_and_says_what_it_dropped() {
    let dir = store_with_objects().await;
    let file = store_file(dir.path());
    let (whole, orphan, lb1, lb2) = store_with_damage(dir.path()).await;
    let damaged = std::fs::read(&file).expect("the damaged store");

    let report = hns::store::repair(&file).expect("the repair runs");
    let text = report.to_string();
    for id in [orphan.to_string(), lb2.to_string(), "not-a-guid".into()] {
        assert!(text.contains(&id), "the report names {id}:\n{text}");
    }
    let copy = report
        .damaged_copy
        .clone()
        .expect("the damaged file is kept");
    assert_eq!(
        std::fs::read(&copy).expect("the copy"),
        damaged,
        "kept as it was"
    );

    // The repaired store opens, with every whole object and the load balancer minus the orphan.
    let running =
        hns::server::spawn(&config(dir.path())).expect("hnsd starts on the repaired store");
    let client = running.client();
    let eps: Vec<Guid> = client
        .list_endpoints()
        .await
        .expect("endpoints")
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(eps, vec![whole]);
    assert_eq!(client.list_networks().await.expect("networks").len(), 1);
    let mut lbs: Vec<(Guid, Vec<Guid>)> = client
        .list_load_balancers()
        .await
        .expect("load balancers")
        .into_iter()
        .map(|lb| (lb.id, lb.host_compute_endpoints))
        .collect();
    lbs.sort();
    let mut want = vec![(lb1, vec![whole]), (lb2, vec![])];
    want.sort();
    assert_eq!(
        lbs, want,
        "each load balancer kept without the orphan, as deleting it would"
    );
    running.stop().await.expect("stops");

    let again = hns::store::repair(&file).expect("a second repair");
    assert!(again.was_whole(), "{again}");
}

#[tokio::test]
async fn repair_of_a_store_redb_cannot_read_keeps_the_file_and_starts_empty() {
    for cut in [0u64, 100] {
        let dir = store_with_objects().await;
        let file = store_file(dir.path());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .and_then(|f| f.set_len(cut))
            .expect("truncate");
        let report = hns::store::repair(&file).expect("the repair runs");
        assert!(report.unreadable.is_some(), "{report}");
        assert_eq!(
            std::fs::metadata(report.damaged_copy.as_ref().expect("kept"))
                .expect("copy")
                .len(),
            cut
        );
        let running = hns::server::spawn(&config(dir.path())).expect("hnsd starts");
        assert!(
            running
                .client()
                .list_networks()
                .await
                .expect("list")
                .is_empty()
        );
        running.stop().await.expect("stops");
    }
}

#[tokio::test]
async fn repair_refuses_a_store_in_use() {
    let dir = tempfile::tempdir().expect("temp dir");
    let running = hns::server::spawn(&config(dir.path())).expect("hnsd starts");
    let err = hns::store::repair(&store_file(dir.path())).expect_err("in use");
    assert!(err.to_string().contains("in use"), "{err}");
    running.stop().await.expect("stops");
}

/// A store as hnsd wrote it before schema versions: the five tables, no `meta`.
fn store_without_schema(file: &Path, net: &serde_json::Value) {
    std::fs::create_dir_all(file.parent().expect("dir")).expect("state dir");
    let db = redb::Database::create(file).expect("create");
    let tx = db.begin_write().expect("write");
    for name in [
        "networks",
        "endpoints",
        "namespaces",
        "loadbalancers",
        "routes",
    ] {
        let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(name);
        let mut t = tx.open_table(def).expect("table");
        if name == "networks" {
            t.insert(net["ID"].as_str().expect("ID"), net.to_string().as_bytes())
                .expect("insert");
        }
    }
    tx.commit().expect("commit");
}

#[tokio::test]
async fn a_migration_is_preceded_by_a_backup_of_the_store_as_it_was() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = store_file(dir.path());
    let id = Guid::new_v4();
    let net =
        json!({"ID": id, "Name": "old", "Type": "NAT", "SchemaVersion": {"Major": 2, "Minor": 0}});
    store_without_schema(&file, &net);
    let before = std::fs::read(&file).expect("the old store");

    let running = hns::server::spawn(&config(dir.path())).expect("hnsd starts on the old store");
    let n = running
        .client()
        .get_network_by_id(id)
        .await
        .expect("its network is served");
    assert_eq!(n.name, "old");
    running.stop().await.expect("stops");

    let backups = hns::store::backups(&file);
    assert_eq!(backups.len(), 1, "one backup: {backups:?}");
    assert_eq!(
        std::fs::read(&backups[0]).expect("the backup"),
        before,
        "the store as it was"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&backups[0])
        .expect("backup")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the backup is private");

    // Migrated once: the next start takes no second backup.
    hns::server::spawn(&config(dir.path()))
        .expect("starts")
        .stop()
        .await
        .expect("stops");
    assert_eq!(hns::store::backups(&file).len(), 1);
}

#[tokio::test]
async fn a_store_of_a_newer_schema_is_refused_and_kept() {
    let dir = store_with_objects().await;
    let file = store_file(dir.path());
    {
        let db = redb::Database::open(&file).expect("open");
        let tx = db.begin_write().expect("write");
        let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
        tx.open_table(def)
            .expect("meta")
            .insert("schema", hns::store::SCHEMA + 1)
            .expect("insert");
        tx.commit().expect("commit");
    }
    let before = std::fs::read(&file).expect("store");
    let message = match hns::server::open(&config(dir.path())) {
        Ok(_) => panic!("hnsd started on a store of a newer schema"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains("newer"), "{message}");
    assert_eq!(
        std::fs::read(&file).expect("store"),
        before,
        "left as it was"
    );
}
