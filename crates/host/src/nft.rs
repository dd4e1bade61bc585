//! nftables through Debian's `nft`: a script applied in one transaction (`nft -f -`), in the
//! network namespace of the calling thread.

use std::io::Write;
use std::process::{Command, Stdio};

/// Applies `script` atomically; the error is what nft said (or why it could not run).
pub fn apply(script: &str) -> Result<(), String> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft (Debian's nftables) cannot run: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| format!("nft: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("nft: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    Ok(())
}
