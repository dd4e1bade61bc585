//! Installing a ruleset with Debian's `nft`: both families' tables replaced in one transaction
//! (a table that is not there yet is made first so that deleting it cannot fail).

use std::io::Write;
use std::process::{Command, Stdio};

use super::ruleset::TABLE;

/// Replaces kube-proxy's tables with `ruleset` atomically; the error says what nft said.
pub fn replace(ruleset: &str) -> Result<(), String> {
    let mut script = String::new();
    for family in ["ip", "ip6"] {
        script += &format!("table {family} {TABLE}\ndelete table {family} {TABLE}\n");
    }
    script += ruleset;
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("the nftables proxier needs nft (Debian's nftables): {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| format!("nft: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nft refused the Services' rules: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}
