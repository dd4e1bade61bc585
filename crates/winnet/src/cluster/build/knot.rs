//! The external host's own DNS zone, served by Debian's Knot DNS (`knotd`) on the external
//! host's fabric address: `example.test`, whose `www` is the outside address where the HTTP
//! server answers. The cluster DNS forwards names outside the cluster zone to it, as CoreDNS
//! forwards to the node's upstream resolver. Config, zone and database live in the cluster
//! directory, so `down` removes them.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::super::sh;
use super::super::topology::{EXTERNAL_IP, EXTERNAL_ZONE, OUTSIDE_IP};
use super::Builder;

/// How long knotd may take to load its zone.
const READY_WAIT: Duration = Duration::from_secs(20);

/// The zone file of [`EXTERNAL_ZONE`].
pub fn zone_file() -> String {
    format!(
        "$ORIGIN {EXTERNAL_ZONE}.\n\
         $TTL 300\n\
         @    SOA ns.{EXTERNAL_ZONE}. hostmaster.{EXTERNAL_ZONE}. 1 3600 600 86400 300\n\
         @    NS  ns\n\
         ns   A   {EXTERNAL_IP}\n\
         www  A   {OUTSIDE_IP}\n"
    )
}

/// knotd's configuration with everything under `dir`.
pub fn config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "server:\n    listen: {EXTERNAL_IP}@53\n    rundir: {d}\n    user: root:root\n\
         database:\n    storage: {d}/db\n\
         log:\n  - target: stderr\n    any: info\n\
         zone:\n  - domain: {EXTERNAL_ZONE}\n    storage: {d}\n    file: {EXTERNAL_ZONE}.zone\n"
    )
}

impl Builder {
    fn knot_dir(&self) -> PathBuf {
        self.dir.join("knot")
    }

    /// Writes the zone and starts knotd on the external host; waits until it serves the zone.
    pub(super) fn external_zone(&mut self, netns: &str) -> anyhow::Result<()> {
        let dir = self.knot_dir();
        std::fs::create_dir_all(dir.join("db"))
            .with_context(|| format!("create {}", dir.display()))?;
        std::fs::write(dir.join(format!("{EXTERNAL_ZONE}.zone")), zone_file())?;
        let conf = dir.join("knot.conf");
        std::fs::write(&conf, config(&dir))?;
        let c = conf.to_string_lossy().into_owned();
        self.spawn(
            "external knotd",
            netns,
            &["knotd", "-c", &c],
            "external-knotd",
        )?;
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let status = sh(&["knotc", "-c", &c, "zone-status", EXTERNAL_ZONE]);
            if status.as_deref().is_ok_and(|s| s.contains("serial: 1")) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "knotd did not serve {EXTERNAL_ZONE} in {} s ({}); see {}",
                    READY_WAIT.as_secs(),
                    status.map_or_else(|e| e.to_string(), |s| s.trim().to_string()),
                    self.dir.join("external-knotd.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_zone_names_www_at_the_outside_address() {
        let z = zone_file();
        assert!(z.contains("$ORIGIN example.test."), "{z}");
        assert!(z.contains(&format!("www  A   {OUTSIDE_IP}")), "{z}");
        let c = config(Path::new("/run/x/knot"));
        assert!(c.contains(&format!("listen: {EXTERNAL_IP}@53")), "{c}");
        assert!(c.contains("storage: /run/x/knot/db"), "{c}");
    }
}
