//! Examining a store file before anything is served from it: redb reads (and, after an unclean
//! stop, recovers) a copy in memory, so nothing on disk changes until the store is known whole.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use redb::{Database, StorageBackend, TableError};

use super::{Contents, META, SCHEMA_KEY, prepare, read_objects};

/// A store file's bytes, as a redb backend. Reads past the end are errors (redb's file backend
/// behaves the same); growth is bounded, so a damaged header cannot make it allocate without end.
#[derive(Debug)]
struct Snapshot {
    bytes: RwLock<Vec<u8>>,
    most: u64,
}

impl Snapshot {
    fn new(bytes: Vec<u8>) -> Snapshot {
        let most = (bytes.len() as u64).saturating_mul(2).max(16 << 20);
        Snapshot {
            bytes: RwLock::new(bytes),
            most,
        }
    }
}

fn past_end() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "past the end of the file")
}

impl StorageBackend for Snapshot {
    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes.read().unwrap_or_else(|p| p.into_inner()).len() as u64)
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let bytes = self.bytes.read().unwrap_or_else(|p| p.into_inner());
        let start = usize::try_from(offset).map_err(|_| past_end())?;
        let end = start.checked_add(len).ok_or_else(past_end)?;
        bytes
            .get(start..end)
            .map(<[u8]>::to_vec)
            .ok_or_else(past_end)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if len > self.most {
            return Err(io::Error::other(format!(
                "redb would grow it to {len} bytes, beyond any store of its size"
            )));
        }
        let len = usize::try_from(len).map_err(io::Error::other)?;
        self.bytes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .resize(len, 0);
        Ok(())
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut bytes = self.bytes.write().unwrap_or_else(|p| p.into_inner());
        let start = usize::try_from(offset).map_err(|_| past_end())?;
        let end = start.checked_add(data.len()).ok_or_else(past_end)?;
        bytes
            .get_mut(start..end)
            .ok_or_else(past_end)?
            .copy_from_slice(data);
        Ok(())
    }
}

/// What a store file holds.
pub(super) struct Examined {
    /// Its schema version (0: from before versions).
    pub schema: u64,
    pub contents: Contents,
    /// redb found it not closed cleanly and recovered its last complete commit.
    pub recovered: bool,
    /// redb's integrity check failed; what is read is what redb could take back to whole.
    pub integrity_failed: bool,
}

/// Reads the store file `bytes` with redb, in memory, on a thread of its own: redb asserts
/// what it expects of a file (a truncated one fails an assertion), and a panic there must end
/// as a refusal naming the damage, not as hnsd's crash. The error is what redb found wrong.
pub(super) fn examine(bytes: Vec<u8>) -> Result<Examined, String> {
    quiet_checks();
    let reader = std::thread::Builder::new()
        .name(CHECK_THREAD.into())
        .spawn(move || examine_here(bytes))
        .map_err(|e| format!("cannot start the store check: {e}"))?;
    match reader.join() {
        Ok(examined) => examined,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no reason given".into());
            Err(format!("redb cannot read it as a database ({why})"))
        }
    }
}

/// The thread a store file is read on.
const CHECK_THREAD: &str = "hns-store-check";

/// Keeps the panic hook from printing a panic of the check thread: [`examine`] reports it, as
/// the store's damage, in hnsd's error. Other threads' panics print as before.
fn quiet_checks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() != Some(CHECK_THREAD) {
                previous(info);
            }
        }));
    });
}

fn examine_here(bytes: Vec<u8>) -> Result<Examined, String> {
    let recovered = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&recovered);
    let mut db = Database::builder()
        .set_repair_callback(move |_| flag.store(true, Ordering::SeqCst))
        .create_with_backend(Snapshot::new(bytes))
        .map_err(|e| format!("redb cannot open it: {e}"))?;
    let integrity_failed = !db
        .check_integrity()
        .map_err(|e| format!("redb's integrity check failed: {e}"))?;
    let schema = schema(&db)?;
    let contents = read_objects(&db).map_err(|e| format!("redb cannot read it: {e}"))?;
    // What hnsd writes first when it opens the store, tried here: redb asserts on a damaged
    // tree only when it changes it.
    prepare(&db).map_err(|e| format!("redb cannot write to it: {e}"))?;
    Ok(Examined {
        schema,
        contents,
        recovered: recovered.load(Ordering::SeqCst),
        integrity_failed,
    })
}

/// The schema version the store's `meta` table records; 0 for a store from before it had one.
fn schema(db: &Database) -> Result<u64, String> {
    let tx = db
        .begin_read()
        .map_err(|e| format!("redb cannot read it: {e}"))?;
    let meta = match tx.open_table(META) {
        Ok(t) => t,
        Err(TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(format!("its meta table is unreadable: {e}")),
    };
    let version = meta
        .get(SCHEMA_KEY)
        .map_err(|e| format!("its meta table is unreadable: {e}"))?
        .ok_or("its meta table has no schema version")?;
    Ok(version.value())
}
