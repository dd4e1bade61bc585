//! The durable store: one redb table per kind, GUID -> the object's canonical JSON. A batch of
//! changes is one write transaction, committed with fsync before any client hears "done".

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};

use crate::profile::Profile;
use crate::state::{Change, Kind, Object, State};

const NETWORKS: TableDefinition<&str, &[u8]> = TableDefinition::new("networks");
const ENDPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("endpoints");
const NAMESPACES: TableDefinition<&str, &[u8]> = TableDefinition::new("namespaces");
const LOAD_BALANCERS: TableDefinition<&str, &[u8]> = TableDefinition::new("loadbalancers");
const ROUTES: TableDefinition<&str, &[u8]> = TableDefinition::new("routes");

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
        "store: object {id} in table {kind} is unreadable ({reason}); restore the state dir from a backup or remove the object"
    )]
    Corrupt {
        kind: Kind,
        id: String,
        reason: String,
    },
}

fn db_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Db(e.to_string())
}

/// hnsd's durable state.
pub struct Store {
    db: Database,
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse {
                path: path.display().to_string(),
            },
            other => db_err(other),
        })?;
        Store::with_tables(db)
    }

    /// A store in memory, for an hnsd that lives as long as its process (the in-memory
    /// cluster): the same tables and transactions, nothing on disk.
    pub fn in_memory() -> Result<Store, StoreError> {
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(db_err)?;
        Store::with_tables(db)
    }

    fn with_tables(db: Database) -> Result<Store, StoreError> {
        let tx = db.begin_write().map_err(db_err)?;
        for kind in Kind::ALL {
            tx.open_table(table(kind)).map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        Ok(Store { db })
    }

    /// Reads every object into a fresh [`State`].
    pub fn load(&self, profile: Profile) -> Result<State, StoreError> {
        let tx = self.db.begin_read().map_err(db_err)?;
        let mut changes = Vec::new();
        for kind in Kind::ALL {
            let t = tx.open_table(table(kind)).map_err(db_err)?;
            for row in t.iter().map_err(db_err)? {
                let (k, v) = row.map_err(db_err)?;
                let obj =
                    Object::from_stored(kind, v.value()).map_err(|e| StoreError::Corrupt {
                        kind,
                        id: k.value().to_string(),
                        reason: e.to_string(),
                    })?;
                changes.push(Change::Put(obj));
            }
        }
        let mut state = State::new(profile);
        state.apply(&changes);
        Ok(state)
    }

    /// Writes a batch of changes in one durable transaction.
    pub fn commit(&self, changes: &[Change]) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(db_err)?;
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
        tx.commit().map_err(db_err)
    }
}
