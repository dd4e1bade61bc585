//! `hnsd --repair`: a damaged store made whole again by keeping every object that is whole and
//! dropping the rest (or the references that do not resolve), saying what went. The damaged
//! file is kept beside the new one.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::{
    SCHEMA, StoreError, backups_note, create, damaged, lock, open_existing, read_all, snapshot,
    unused,
};
use crate::profile::Profile;
use crate::state::{Fix, Kind, Object, Problem, State};

/// What a repair did.
#[derive(Debug)]
pub struct Repair {
    /// The store.
    pub path: PathBuf,
    /// How many objects of each kind it holds now.
    pub kept: Vec<(Kind, usize)>,
    /// What was dropped (objects, or references of objects that were kept).
    pub dropped: Vec<Problem>,
    /// What redb could not read, if anything: then nothing of the file could be kept.
    pub unreadable: Option<String>,
    /// redb's integrity check failed and took the file back to its last whole commit.
    pub rolled_back: bool,
    /// Where the damaged file now is; `None` when the store was whole and left as it was.
    pub damaged_copy: Option<PathBuf>,
}

impl Repair {
    /// The store was whole: nothing was changed.
    pub fn was_whole(&self) -> bool {
        self.damaged_copy.is_none()
    }
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        let Some(copy) = &self.damaged_copy else {
            return write!(f, "the store {path} is whole; nothing was changed");
        };
        writeln!(f, "repaired the store {path}")?;
        if let Some(why) = &self.unreadable {
            writeln!(f, "  nothing could be read from it: {why}")?;
        }
        if self.rolled_back {
            writeln!(
                f,
                "  redb's integrity check failed; it went back to the last commit that was whole (later writes are lost)"
            )?;
        }
        for p in &self.dropped {
            let what = match p.fix {
                Fix::Drop => "dropped",
                Fix::Keep(_) => "kept without a reference",
            };
            writeln!(f, "  {what}: {} {}: {}", p.kind.singular(), p.id, p.what)?;
        }
        let kept: Vec<String> = self
            .kept
            .iter()
            .map(|(k, n)| format!("{n} {}", if *n == 1 { k.singular() } else { k.plural() }))
            .collect();
        writeln!(f, "  kept: {}", kept.join(", "))?;
        write!(f, "  the damaged file is kept as {}", copy.display())
    }
}

/// Repairs the store at `path`: keeps every object that reads whole and whose references
/// resolve (an object whose only fault is a reference to something gone keeps the rest), drops
/// the others, and writes them as a new store; the damaged file is kept beside it. A whole store
/// is left as it is. Refuses while an hnsd uses the store.
pub fn repair(path: &Path) -> Result<Repair, StoreError> {
    let Some(file) = open_existing(path)? else {
        return Err(StoreError::Db(format!(
            "there is no store at {}; nothing to repair (hnsd makes a new one)",
            path.display()
        )));
    };
    let _lock = lock(&file, path)?;
    let bytes = read_all(&file, path)?;
    let examined = if bytes.is_empty() {
        Err("the file is empty (0 bytes)".to_string())
    } else {
        snapshot::examine(bytes)
    };
    let (objects, mut dropped, unreadable, rolled_back, schema) = match examined {
        Ok(e) => (
            e.contents.objects,
            e.contents.problems,
            None,
            e.integrity_failed,
            e.schema,
        ),
        Err(why) => (Vec::new(), Vec::new(), Some(why), false, SCHEMA),
    };
    if schema > SCHEMA {
        return Err(StoreError::Newer {
            path: path.display().to_string(),
            found: schema,
            backups: backups_note(path),
        });
    }
    let objects = keep_whole(objects, &mut dropped);
    let mut report = Repair {
        path: path.into(),
        kept: Kind::ALL
            .into_iter()
            .map(|k| (k, objects.iter().filter(|o| o.kind() == k).count()))
            .collect(),
        dropped,
        unreadable,
        rolled_back,
        damaged_copy: None,
    };
    if report.dropped.is_empty() && report.unreadable.is_none() && !rolled_back {
        return Ok(report);
    }
    let copy = unused(path, "damaged", "");
    std::fs::rename(path, &copy).map_err(|e| {
        super::io_err(
            &format!("move the damaged store to {} from", copy.display()),
            path,
            e,
        )
    })?;
    report.damaged_copy = Some(copy);
    create(path, &objects).map_err(|e| {
        damaged(
            path,
            &format!("the repair could not write the new store: {e}"),
        )
    })?;
    Ok(report)
}

/// Applies each problem's fix until none is left (dropping an endpoint can leave a load
/// balancer pointing at nothing, which the next round fixes). Adds the problems to `dropped`.
fn keep_whole(objects: Vec<Object>, dropped: &mut Vec<Problem>) -> Vec<Object> {
    let mut by_id: BTreeMap<(usize, String), Object> = objects
        .into_iter()
        .map(|o| ((kind_rank(o.kind()), o.id().to_string()), o))
        .collect();
    // Every round drops an object or a reference, so this ends; the bound is a second guard.
    for _ in 0..=by_id.len() + 1 {
        let problems = State::holding(Profile::default(), by_id.values().cloned()).problems();
        if problems.is_empty() {
            break;
        }
        for p in problems {
            let key = (kind_rank(p.kind), p.id.clone());
            match &p.fix {
                Fix::Drop => drop(by_id.remove(&key)),
                Fix::Keep(o) => drop(by_id.insert(key, o.clone())),
            }
            dropped.push(p);
        }
    }
    by_id.into_values().collect()
}

fn kind_rank(kind: Kind) -> usize {
    Kind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}
