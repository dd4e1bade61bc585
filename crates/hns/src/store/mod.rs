//! The durable store: one redb table per kind, GUID -> the object's canonical JSON, and a `meta`
//! table with the schema version. A batch of changes is one write transaction, committed with
//! fsync before any client hears "done".
//!
//! A store is verified before anything is served from it ([`Store::open`]): redb's integrity
//! check on a copy in memory, every object parsed and validated as the API validates it, every
//! reference resolved ([`State::problems`]). A damaged store is refused, naming the damage and
//! the ways back: [`repair`] (which keeps what is whole) or a backup, which hnsd takes itself
//! before each schema migration. Only a missing file is a new store; an empty one is damage.

mod repair;
mod snapshot;

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use redb::{Database, ReadableTable, TableDefinition, TableError};

use crate::profile::Profile;
use crate::state::{Change, Kind, Object, Problem, State};

pub use repair::{Repair, repair};

/// The store's file in hnsd's state dir.
pub const FILE_NAME: &str = "hns.redb";

/// The schema this hnsd reads and writes. 0 is a store from before versions were recorded (the
/// same tables, no `meta`).
pub const SCHEMA: u64 = 1;

const NETWORKS: TableDefinition<&str, &[u8]> = TableDefinition::new("networks");
const ENDPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("endpoints");
const NAMESPACES: TableDefinition<&str, &[u8]> = TableDefinition::new("namespaces");
const LOAD_BALANCERS: TableDefinition<&str, &[u8]> = TableDefinition::new("loadbalancers");
const ROUTES: TableDefinition<&str, &[u8]> = TableDefinition::new("routes");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SCHEMA_KEY: &str = "schema";

/// How many of a damaged store's problems a message lists.
const LISTED: usize = 10;

fn table(kind: Kind) -> TableDefinition<'static, &'static str, &'static [u8]> {
    match kind {
        Kind::Network => NETWORKS,
        Kind::Endpoint => ENDPOINTS,
        Kind::Namespace => NAMESPACES,
        Kind::LoadBalancer => LOAD_BALANCERS,
        Kind::Route => ROUTES,
    }
}

/// A store failure, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the store {path} is in use by another process (is another hnsd running with this --state-dir?)"
    )]
    InUse { path: String },
    #[error("store: {0}")]
    Db(String),
    #[error(
        "the store {path} is damaged: {damage}. hnsd does not start on a damaged store: run `winnet hnsd --state-dir {dir} --repair` to keep every whole object (it says what it drops and keeps the damaged file){backups}"
    )]
    Damaged {
        path: String,
        damage: String,
        dir: String,
        backups: String,
    },
    #[error(
        "the store {path} was written by a newer hnsd (schema {found}; this hnsd knows {SCHEMA}): run that hnsd, or restore the backup it took before migrating{backups}"
    )]
    Newer {
        path: String,
        found: u64,
        backups: String,
    },
}

fn db_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Db(e.to_string())
}

fn io_err(what: &str, path: &Path, e: io::Error) -> StoreError {
    StoreError::Db(format!("cannot {what} {}: {e}", path.display()))
}

/// What a store holds: the objects that read whole, and the problems of the rest.
#[derive(Default)]
struct Contents {
    objects: Vec<Object>,
    problems: Vec<Problem>,
}

/// hnsd's durable state.
pub struct Store {
    db: Database,
    /// Where it is, for messages.
    path: PathBuf,
    /// The lock redb holds too (on the same open file), taken before the file was read so that
    /// what was verified is what is served.
    _lock: Option<Flock<File>>,
}

impl Store {
    /// Opens the store at `path`, verified, migrated to [`SCHEMA`] (after a backup); makes a
    /// new one if there is no file there. Files it makes are 0600; a store an earlier hnsd left
    /// readable by others is made 0600.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let Some(file) = open_existing(path)? else {
            create(path, &[])?;
            return Store::open(path);
        };
        let lock = lock(&file, path)?;
        let bytes = read_all(&file, path)?;
        if bytes.is_empty() {
            return Err(damaged(
                path,
                "the file is empty (0 bytes): a store is never empty, so it was truncated or its first write never finished; if this node never had HNS objects, remove the file",
            ));
        }
        let examined = snapshot::examine(bytes.clone()).map_err(|d| damaged(path, &d))?;
        if examined.integrity_failed {
            return Err(damaged(
                path,
                "redb's integrity check found pages that do not match their checksums (the file was changed outside hnsd, or the disk lost writes)",
            ));
        }
        let problems = examined
            .contents
            .problems
            .into_iter()
            .chain(State::holding(Profile::default(), examined.contents.objects).problems());
        let problems: Vec<Problem> = problems.collect();
        if !problems.is_empty() {
            return Err(damaged(path, &listed(&problems)));
        }
        if examined.schema > SCHEMA {
            return Err(StoreError::Newer {
                path: path.display().to_string(),
                found: examined.schema,
                backups: backups_note(path),
            });
        }
        if examined.recovered {
            tracing::warn!(store = %path.display(), "the store was not closed cleanly; redb recovered its last complete commit");
        }
        if examined.schema < SCHEMA {
            let backup = backup(path, &bytes, examined.schema)?;
            tracing::info!(store = %path.display(), backup = %backup.display(), from = examined.schema, to = SCHEMA, "backed up the store before migrating it");
        }
        let db = Database::builder().create_file(file).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => in_use(path),
            other => db_err(other),
        })?;
        let store = Store {
            db,
            path: path.into(),
            _lock: Some(lock),
        };
        prepare(&store.db)?;
        Ok(store)
    }

    /// A store in memory, for an hnsd that lives as long as its process (the in-memory
    /// cluster): the same tables and transactions, nothing on disk.
    pub fn in_memory() -> Result<Store, StoreError> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(db_err)?;
        let store = Store {
            db,
            path: "(memory)".into(),
            _lock: None,
        };
        prepare(&store.db)?;
        Ok(store)
    }

    /// Reads every object into a fresh [`State`]; refuses objects that do not read whole or
    /// whose references do not resolve.
    pub fn load(&self, profile: Profile) -> Result<State, StoreError> {
        let contents = read_objects(&self.db).map_err(db_err)?;
        let state = State::holding(profile, contents.objects);
        let problems: Vec<Problem> = contents
            .problems
            .into_iter()
            .chain(state.problems())
            .collect();
        if problems.is_empty() {
            Ok(state)
        } else {
            Err(damaged(&self.path, &listed(&problems)))
        }
    }

    /// Writes a batch of changes in one durable transaction.
    pub fn commit(&self, changes: &[Change]) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
        write_changes(&tx, changes)?;
        tx.commit().map_err(db_err)
    }
}

/// Makes every table and records the schema (the migration from 0, the only one so far).
fn prepare(db: &Database) -> Result<(), StoreError> {
    let tx = db.begin_write().map_err(db_err)?;
    for kind in Kind::ALL {
        tx.open_table(table(kind)).map_err(db_err)?;
    }
    tx.open_table(META)
        .map_err(db_err)?
        .insert(SCHEMA_KEY, SCHEMA)
        .map_err(db_err)?;
    tx.commit().map_err(db_err)
}

fn write_changes(tx: &redb::WriteTransaction, changes: &[Change]) -> Result<(), StoreError> {
    for change in changes {
        match change {
            Change::Put(obj) => {
                let mut t = tx.open_table(table(obj.kind())).map_err(db_err)?;
                let bytes = obj.to_bytes().map_err(db_err)?;
                t.insert(obj.id().to_string().as_str(), bytes.as_slice())
                    .map_err(db_err)?;
            }
            Change::Delete(kind, id) => {
                let mut t = tx.open_table(table(*kind)).map_err(db_err)?;
                t.remove(id.to_string().as_str()).map_err(db_err)?;
            }
        }
    }
    Ok(())
}

/// Every row of every table, each parsed, validated and checked against its key. The error is
/// redb's, when it cannot read the store at all.
fn read_objects(db: &Database) -> Result<Contents, String> {
    let tx = db.begin_read().map_err(|e| e.to_string())?;
    let mut contents = Contents::default();
    for kind in Kind::ALL {
        let t = match tx.open_table(table(kind)) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => continue,
            Err(e) => {
                contents.problems.push(unreadable_table(kind, e));
                continue;
            }
        };
        for row in t.iter().map_err(|e| e.to_string())? {
            match row {
                Ok((k, v)) => match read_row(kind, k.value(), v.value()) {
                    Ok(obj) => contents.objects.push(obj),
                    Err(what) => contents.problems.push(Problem::new(
                        kind,
                        k.value(),
                        what,
                        crate::state::Fix::Drop,
                    )),
                },
                Err(e) => {
                    contents.problems.push(unreadable_table(kind, e));
                    break;
                }
            }
        }
    }
    Ok(contents)
}

fn unreadable_table(kind: Kind, e: impl std::fmt::Display) -> Problem {
    Problem::new(
        kind,
        "(table)",
        format!("its rows cannot be read: {e}"),
        crate::state::Fix::Drop,
    )
}

/// One stored object: its key is its ID, it parses, and it is one the API would take. The
/// error says which of these it is not.
fn read_row(kind: Kind, key: &str, bytes: &[u8]) -> Result<Object, String> {
    let id: hcn::Guid = key
        .parse()
        .map_err(|e| format!("its key is not an ID ({e})"))?;
    let obj = Object::from_stored(kind, bytes)
        .map_err(|e| format!("it does not read as a {} ({e})", kind.singular()))?;
    if obj.id() != id {
        return Err(format!(
            "it is stored under {id} but says it is {}",
            obj.id()
        ));
    }
    obj.validate()
        .map_err(|e| format!("it is not valid: {e}"))?;
    Ok(obj)
}

fn listed(problems: &[Problem]) -> String {
    let mut text: Vec<String> = problems
        .iter()
        .take(LISTED)
        .map(Problem::to_string)
        .collect();
    if problems.len() > LISTED {
        text.push(format!("and {} more", problems.len() - LISTED));
    }
    format!("{} damaged: {}", problems.len(), text.join("; "))
}

fn damaged(path: &Path, damage: &str) -> StoreError {
    StoreError::Damaged {
        path: path.display().to_string(),
        damage: damage.to_string(),
        dir: dir_of(path).display().to_string(),
        backups: backups_note(path),
    }
}

fn in_use(path: &Path) -> StoreError {
    StoreError::InUse {
        path: path.display().to_string(),
    }
}

fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The backups hnsd took of the store at `path` (before migrations), oldest name first.
pub fn backups(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir_of(path))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{name}.")) && n.ends_with(".bak"))
        })
        .collect();
    found.sort();
    found
}

fn backups_note(path: &Path) -> String {
    let found = backups(path);
    if found.is_empty() {
        return String::new();
    }
    let names: Vec<String> = found.iter().map(|p| p.display().to_string()).collect();
    format!(
        ", or restore a backup hnsd took before a migration ({})",
        names.join(", ")
    )
}

/// The store file at `path`, opened read-write, made 0600; `None` if there is none.
fn open_existing(path: &Path) -> Result<Option<File>, StoreError> {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("open", path, e)),
    };
    let meta = file.metadata().map_err(|e| io_err("read", path, e))?;
    if !meta.is_file() {
        return Err(damaged(path, "it is not a regular file"));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        // An earlier hnsd made it readable by every user.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io_err("make private", path, e))?;
    }
    Ok(Some(file))
}

/// Locks the store file as redb does (flock on the same open file, so redb's own lock is the
/// same one), before it is read.
fn lock(file: &File, path: &Path) -> Result<Flock<File>, StoreError> {
    let dup = file.try_clone().map_err(|e| io_err("open", path, e))?;
    Flock::lock(dup, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| match e {
        nix::errno::Errno::EWOULDBLOCK => in_use(path),
        other => io_err("lock", path, io::Error::from(other)),
    })
}

fn read_all(mut file: &File, path: &Path) -> Result<Vec<u8>, StoreError> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| io_err("read", path, e))?;
    Ok(bytes)
}

/// A new 0600 file beside `path`, made whole (written and synced) before it gets its name.
fn new_file(path: &Path, suffix: &str) -> Result<(File, PathBuf), StoreError> {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{suffix}-{}", std::process::id()));
    let tmp = PathBuf::from(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| io_err("create", &tmp, e))?;
    Ok((file, tmp))
}

/// Makes a store holding `objects` at `path` (which must not exist): written in full under a
/// temporary name, then linked into place, so `path` never names half a store.
fn create(path: &Path, objects: &[Object]) -> Result<(), StoreError> {
    let (file, tmp) = new_file(path, "new")?;
    let made = write_new(file, &tmp, objects).and_then(|()| match std::fs::hard_link(&tmp, path) {
        Ok(()) => sync_dir(path),
        // Another hnsd made it meanwhile: that one is opened, and its lock decides who serves.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io_err("create", path, e)),
    });
    let _ = std::fs::remove_file(&tmp);
    made
}

fn write_new(file: File, tmp: &Path, objects: &[Object]) -> Result<(), StoreError> {
    let sync = file.try_clone().map_err(|e| io_err("open", tmp, e))?;
    let db = Database::builder().create_file(file).map_err(db_err)?;
    let store = Store {
        db,
        path: tmp.into(),
        _lock: None,
    };
    prepare(&store.db)?;
    let puts: Vec<Change> = objects.iter().cloned().map(Change::Put).collect();
    store.commit(&puts)?;
    drop(store);
    sync.sync_all().map_err(|e| io_err("sync", tmp, e))
}

/// Copies the store's `bytes` (as read under its lock) to a backup beside it before a
/// migration from schema `from`; returns where.
fn backup(path: &Path, bytes: &[u8], from: u64) -> Result<PathBuf, StoreError> {
    let at = unused(path, &format!("schema{from}"), ".bak");
    let (mut file, tmp) = new_file(path, "backup")?;
    let written = io::Write::write_all(&mut file, bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&tmp, &at));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_err("back up the store to", &at, e));
    }
    sync_dir(path)?;
    Ok(at)
}

/// `<path>.<stem><ext>`, or `<path>.<stem>-N<ext>` with the first N that names nothing.
fn unused(path: &Path, stem: &str, ext: &str) -> PathBuf {
    let mut n = 1;
    loop {
        let mut name = path.as_os_str().to_owned();
        match n {
            1 => name.push(format!(".{stem}{ext}")),
            _ => name.push(format!(".{stem}-{n}{ext}")),
        }
        let at = PathBuf::from(name);
        if std::fs::symlink_metadata(&at).is_err() {
            return at;
        }
        n += 1;
    }
}

fn sync_dir(path: &Path) -> Result<(), StoreError> {
    let dir = dir_of(path);
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("sync", dir, e))
}
