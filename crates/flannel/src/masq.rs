//! `--ip-masq` on a Linux node: flannel's four masquerade rules (pod to pod is not NATed; pod
//! to outside is; outside to this node's pods is not; outside to other pods is), in an
//! nftables table of its own, replaced in one transaction and left alone when already right.

use std::io::Write;
use std::process::{Command, Stdio};

use ipnet::Ipv4Net;

use crate::Error;

/// The nftables table flanneld owns.
pub const TABLE: &str = "winnet-flannel";

/// The table's text for cluster `network` and this node's `subnet`; its comment marks which
/// network and subnet it was made for.
pub fn ruleset(network: Ipv4Net, subnet: Ipv4Net) -> String {
    format!(
        "table ip {TABLE} {{\n  comment \"{}\"\n  chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n    ip saddr {network} ip daddr {network} return\n    ip saddr {network} ip daddr != 224.0.0.0/4 masquerade fully-random\n    ip saddr != {network} ip daddr {subnet} return\n    ip saddr != {network} ip daddr {network} masquerade fully-random\n  }}\n}}\n",
        marker(network, subnet)
    )
}

fn marker(network: Ipv4Net, subnet: Ipv4Net) -> String {
    format!("flannel ip-masq {network} {subnet}")
}

/// Installs the rules unless the table is there for the same network and subnet.
pub fn ensure(network: Ipv4Net, subnet: Ipv4Net) -> Result<(), Error> {
    let listed = Command::new("nft")
        .args(["list", "table", "ip", TABLE])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| Error::Node(format!("--ip-masq needs nft (Debian's nftables): {e}")))?;
    if listed.status.success()
        && String::from_utf8_lossy(&listed.stdout).contains(&marker(network, subnet))
    {
        return Ok(());
    }
    let mut script = format!("table ip {TABLE}\ndelete table ip {TABLE}\n");
    script += &ruleset(network, subnet);
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Node(format!("--ip-masq needs nft (Debian's nftables): {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| Error::Node(format!("nft: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::Node(format!("nft: {e}")))?;
    if !out.status.success() {
        return Err(Error::Node(format!(
            "nft refused flannel's masquerade rules: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
