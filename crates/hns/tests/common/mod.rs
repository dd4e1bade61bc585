//! A real hnsd on a temporary socket and store, for tests.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use hns::Profile;
use hns::server::Config;
use hns_client::Client;
use tokio::sync::oneshot;

/// A running hnsd; stopped and its files removed when dropped.
pub struct Hnsd {
    pub dir: tempfile::TempDir,
    pub profile: Profile,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Hnsd {
    pub async fn start(profile: Profile) -> Hnsd {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::start_in(dir, profile).await
    }

    pub async fn start_in(dir: tempfile::TempDir, profile: Profile) -> Hnsd {
        let config = Config {
            state_dir: dir.path().join("state"),
            socket: dir.path().join("hns.sock"),
            profile,
            dataplane: None,
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            hns::server::run(&config, async {
                let _ = stopped.await;
            })
            .await
            .expect("hnsd runs");
        });
        let hnsd = Hnsd {
            dir,
            profile,
            stop: Some(stop),
            task: Some(task),
        };
        for _ in 0..200 {
            if hnsd.client().get_version().await.is_ok() {
                return hnsd;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("hnsd did not come up");
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("hns.sock")
    }

    pub fn client(&self) -> Client {
        Client::new(self.socket())
    }

    /// Stops hnsd gracefully and gives back its directory, to start another on the same store.
    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.expect("hnsd stops cleanly");
        }
        let dir = tempfile::tempdir().expect("temp dir");
        std::mem::replace(&mut self.dir, dir)
    }
}

impl Drop for Hnsd {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// An L2Bridge network document with one subnet.
pub fn l2bridge(name: &str, prefix: &str, gateway: &str) -> serde_json::Value {
    serde_json::json!({
        "Name": name, "Type": "L2Bridge",
        "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": prefix,
            "Routes": [{"NextHop": gateway, "DestinationPrefix": "0.0.0.0/0"}]}]}],
        "SchemaVersion": {"Major": 2, "Minor": 0}
    })
}

/// The whole state, as `winnet hns dump` sees it, for before/after comparisons.
pub async fn dump(client: &Client) -> Vec<Vec<serde_json::Value>> {
    let mut all = Vec::new();
    for kind in hns::Kind::ALL {
        all.push(client.list_raw(kind, None).await.expect("list"));
    }
    all
}
