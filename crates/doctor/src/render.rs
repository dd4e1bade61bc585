//! The doctor's report as text, one printer for live runs and bundles alike.

use std::fmt::Write as _;

use crate::finding::Finding;

/// The report of `nodes` (each node's name with its findings) as a table: one row per finding,
/// then its objects, the flows it breaks and the fix.
pub fn table(nodes: &[(String, Vec<Finding>)]) -> String {
    let mut out = String::new();
    for (node, findings) in nodes {
        if findings.is_empty() {
            let _ = writeln!(out, "{node}: no problem found");
            continue;
        }
        let _ = writeln!(out, "{node}: {} problem(s)", findings.len());
        let width = findings
            .iter()
            .map(|f| f.kind.as_str().len())
            .max()
            .unwrap_or(0);
        for f in findings {
            let _ = writeln!(out, "  {:width$}  {}", f.kind.as_str(), f.summary);
            for o in &f.objects {
                let _ = writeln!(out, "  {:width$}    object: {o}", "");
            }
            let _ = writeln!(out, "  {:width$}    breaks: {}", "", f.breaks);
            let _ = writeln!(out, "  {:width$}    fix:    {}", "", f.fix);
            if let Some(s) = &f.source {
                let _ = writeln!(out, "  {:width$}    source: {s}", "");
            }
            if let Some(r) = &f.repair {
                let _ = writeln!(out, "  {:width$}    --fix:  {r}", "");
            }
        }
    }
    out
}

/// The report as JSON: `[{"node": ..., "findings": [...]}]`.
pub fn json(nodes: &[(String, Vec<Finding>)]) -> String {
    let v: Vec<serde_json::Value> = nodes
        .iter()
        .map(|(node, findings)| serde_json::json!({"node": node, "findings": findings}))
        .collect();
    serde_json::to_string_pretty(&v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}
