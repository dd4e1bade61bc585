//! Installing a ruleset with Debian's `nft`: both families' tables replaced in one transaction
//! (a table that is not there yet is made first so that deleting it cannot fail).

use super::ruleset::TABLE;

/// Replaces kube-proxy's tables with `ruleset` atomically; the error says what nft said.
pub fn replace(ruleset: &str) -> Result<(), String> {
    let mut script = String::new();
    for family in ["ip", "ip6"] {
        script += &format!("table {family} {TABLE}\ndelete table {family} {TABLE}\n");
    }
    script += ruleset;
    host::nft::apply(&script).map_err(|e| format!("nft refused the Services' rules: {e}"))
}
