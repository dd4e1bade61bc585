//! A real authoritative DNS server for tests: Debian's Knot DNS (`knotd`), run inside a
//! network namespace with zone files written by the test, stopped (and its files removed)
//! when dropped.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster zone of a pod in namespace `default` (reference §Contrast): the headless
/// Service `web` with StatefulSet pod `web-0` at `web_ip`, and `kubernetes`.
pub fn cluster_zone(web_ip: &str) -> String {
    format!(
        "$ORIGIN cluster.local.\n$TTL 30\n\
         @ SOA ns.dns hostmaster 1 7200 1800 86400 30\n@ NS ns.dns\nns.dns A 10.96.0.10\n\
         kubernetes.default.svc A 10.96.0.1\n\
         web.default.svc A {web_ip}\nweb-0.web.default.svc A {web_ip}\n"
    )
}

/// A root zone with nothing in it, so names outside the cluster zone get NXDOMAIN (as the
/// cluster DNS's upstream gives them) instead of REFUSED.
pub const ROOT_ZONE: &str =
    "$ORIGIN .\n$TTL 30\n@ SOA a.root hostmaster 1 7200 1800 86400 30\n@ NS a.root\n";

/// A running knotd.
pub struct Knot {
    child: Option<Child>,
    dir: tempfile::TempDir,
    pub listen: SocketAddr,
}

impl Knot {
    /// Starts knotd in namespace `netns` listening on `listen` (UDP and TCP) with `zones`
    /// (`(origin, zone file text)`), and waits until it answers.
    pub fn start(netns: &str, listen: SocketAddr, zones: &[(&str, &str)]) -> Knot {
        let dir = tempfile::tempdir().expect("knot dir");
        let mut conf = format!(
            "server:\n  listen: {}@{}\n  rundir: \"{d}\"\n\
             database:\n  storage: \"{d}\"\n\
             control:\n  listen: \"{d}/knot.sock\"\n\
             template:\n  - id: default\n    storage: \"{d}\"\n    file: \"%s.zone\"\n    \
             semantic-checks: off\n\
             zone:\n",
            listen.ip(),
            listen.port(),
            d = dir.path().display()
        );
        for (origin, text) in zones {
            let file = if *origin == "." { "root" } else { origin };
            conf.push_str(&format!(
                "  - domain: \"{origin}\"\n    file: \"{file}.zone\"\n"
            ));
            std::fs::write(dir.path().join(format!("{file}.zone")), text).expect("zone file");
        }
        let conf_path: PathBuf = dir.path().join("knot.conf");
        std::fs::write(&conf_path, conf).expect("knot.conf");
        let log = std::fs::File::create(dir.path().join("knotd.log")).expect("knot log");
        let child = Command::new("ip")
            .args(["netns", "exec", netns, "knotd", "-c"])
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start knotd (Debian package knot)");
        let mut knot = Knot {
            child: Some(child),
            dir,
            listen,
        };
        knot.wait_ready(netns);
        knot
    }

    fn wait_ready(&mut self, netns: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let at = format!("@{}", self.listen.ip());
        let port = self.listen.port().to_string();
        loop {
            let out = Command::new("ip")
                .args([
                    "netns", "exec", netns, "dig", "+time=1", "+tries=1", "+short",
                ])
                .args([at.as_str(), "-p", port.as_str(), "cluster.local", "SOA"])
                .output()
                .expect("run dig (Debian package bind9-dnsutils)");
            if out.status.success() && !out.stdout.is_empty() {
                return;
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                panic!("knotd exited ({status}):\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "knotd did not answer within 20 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("knotd.log")).unwrap_or_default()
    }
}

impl Drop for Knot {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
