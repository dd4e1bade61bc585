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
        ("not-a-guid".to_string(), json!({"Name": "x", "Type": "NAT"})),
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
