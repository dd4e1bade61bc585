//! A real hnsd on a temporary socket and store, for tests (testkit's), and the state dump.

#![allow(dead_code, unused_imports)] // each test uses a part of it

use hns_client::Client;

pub use testkit::hnsd::{Hnsd, l2bridge};

/// The whole state, as `winnet hns dump` sees it, for before/after comparisons.
pub async fn dump(client: &Client) -> Vec<Vec<serde_json::Value>> {
    let mut all = Vec::new();
    for kind in hns::Kind::ALL {
        all.push(client.list_raw(kind, None).await.expect("list"));
    }
    all
}
