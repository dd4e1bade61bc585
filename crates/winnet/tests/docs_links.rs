//! The user docs (README.md, BENCHMARKS.md, docs/) hold together: every relative link leads to
//! a file or folder of the repository (and a `#fragment` to a heading of that page), and no page
//! names an issue number of this project (upstream references such as kubernetes#109124 are
//! fine).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md, BENCHMARKS.md and every Markdown file under docs/.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut out = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("read docs/").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The page's text outside fenced code blocks and inline code spans (a link's text may be code:
/// its backticks go, the link stays).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of the inline links `[text](target)` in `text` (the text may span lines).
fn link_targets(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = &after[..end];
        if !target.contains(char::is_whitespace) {
            out.push(target.to_string());
        }
        rest = &after[end..];
    }
    out
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(page: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read a page");
        let dir = page.parent().expect("a page has a folder");
        for target in link_targets(&prose(&text)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if !fragment.is_empty() && path.is_file() {
                let linked = std::fs::read_to_string(&path).expect("read a linked page");
                if !anchors(&linked).iter().any(|a| a == fragment) {
                    broken.push(format!("{}: {target}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_docs_name_no_issue_numbers() {
    let mut found = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read a page");
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let issue = lower.match_indices("issue").any(|(i, _)| {
                let after = lower[i + "issue".len()..].trim_start_matches([' ', '-']);
                after.starts_with(|c: char| c.is_ascii_digit())
            });
            let bare = line
                .match_indices("(#")
                .any(|(i, _)| line[i + 2..].starts_with(|c: char| c.is_ascii_digit()));
            if issue || bare {
                found.push(format!("{}:{}: {line}", page.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "user docs name issue numbers; say what the work was instead:\n{}",
        found.join("\n")
    );
}
