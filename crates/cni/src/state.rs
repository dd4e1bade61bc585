//! Per-pod records and locks: `<stateDir>/<network>/<sandbox>`, a small JSON file that is also the
//! pod's lock. It says which interface name IPAM allocated for (GC needs it to release an
//! address) and whether this plugin created the pod's HCN namespace (DEL removes only those).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use hcn::Guid;
use serde::{Deserialize, Serialize};

use crate::config::is_valid_name;
use crate::error::CniError;

/// What is remembered about a pod's attachment between ADD and DEL.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    /// The HCN namespace this plugin created for a netns path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_created: Option<Guid>,
}

/// The records of one network.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (creating) `<state_dir>/<network>`.
    pub fn open(state_dir: &Path, network: &str) -> Result<Store, CniError> {
        let dir = state_dir.join(network);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| CniError::io("create the state directory", &dir, e))?;
        Ok(Store { dir })
    }

    /// Takes the pod's lock (blocking), holding it until the [`Lock`] is dropped.
    pub fn lock(&self, sandbox: &str) -> Result<Lock, CniError> {
        if !is_valid_name(sandbox) {
            return Err(CniError::internal(format!(
                "\"{sandbox}\" is not a container ID"
            )));
        }
        self.lock_path(self.dir.join(sandbox))
    }

    fn lock_path(&self, path: PathBuf) -> Result<Lock, CniError> {
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&path)
                .map_err(|e| CniError::io("open", &path, e))?;
            flock(&file).map_err(|e| CniError::io("lock", &path, e))?;
            // A DEL may have removed the file between our open and our lock; then the lock is
            // on a dead inode and another process may lock a new file. Start again.
            let held = file
                .metadata()
                .map_err(|e| CniError::io("stat", &path, e))?;
            match std::fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Lock {
                        file,
                        path,
                        wrote: false,
                    });
                }
                _ => continue,
            }
        }
    }

    /// The lock of the network itself (sdn* creating it). `_network` is no container ID, so it
    /// never meets a pod's record.
    pub fn lock_network(&self) -> Result<Lock, CniError> {
        self.lock_path(self.dir.join("_network"))
    }

    /// The sandboxes that have a record.
    pub fn sandboxes(&self) -> Result<Vec<String>, CniError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| CniError::io("list", &self.dir, e))?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| is_valid_name(n))
            .collect();
        names.sort();
        Ok(names)
    }
}

fn flock(file: &File) -> std::io::Result<()> {
    loop {
        // SAFETY: the descriptor belongs to `file`, which outlives the call; flock does not
        // touch memory.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// A held pod lock and its record. Released when dropped.
#[derive(Debug)]
pub struct Lock {
    file: File,
    path: PathBuf,
    /// True once this holder wrote the record.
    wrote: bool,
}

impl Lock {
    /// The record, if ADD wrote one (an empty file is a lock only).
    pub fn read(&mut self) -> Result<Option<Record>, CniError> {
        let mut text = String::new();
        self.file
            .seek(SeekFrom::Start(0))
            .and_then(|_| self.file.read_to_string(&mut text))
            .map_err(|e| CniError::io("read", &self.path, e))?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        // A record that does not parse was torn by a crash; it is treated as absent.
        Ok(serde_json::from_str(&text).ok())
    }

    /// Replaces the record, durably.
    pub fn write(&mut self, record: &Record) -> Result<(), CniError> {
        let text = serde_json::to_vec(record).map_err(|e| CniError::internal(e.to_string()))?;
        self.file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)))
            .and_then(|_| self.file.write_all(&text))
            .and_then(|()| self.file.sync_data())
            .map_err(|e| CniError::io("write", &self.path, e))?;
        self.wrote = true;
        Ok(())
    }

    /// Lets go after a failed ADD, leaving nothing of its own: the file goes when this holder
    /// wrote it or it holds no record (the empty lock file this ADD made); a record an earlier
    /// ADD wrote stays, for the pod's DEL.
    pub fn abandon(mut self) -> Result<(), CniError> {
        if self.wrote || self.read()?.is_none() {
            return self.remove();
        }
        Ok(())
    }

    /// Removes the record (while still holding the lock).
    pub fn remove(self) -> Result<(), CniError> {
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CniError::io("remove", &self.path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_go_away() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), "cbr0").unwrap();
        let mut lock = store.lock("pod1").unwrap();
        assert_eq!(lock.read().unwrap(), None);
        let r = Record {
            container_id: "pod1".into(),
            ifname: "eth0".into(),
            namespace_created: Some(Guid::new_v4()),
        };
        lock.write(&r).unwrap();
        assert_eq!(lock.read().unwrap(), Some(r));
        assert_eq!(store.sandboxes().unwrap(), vec!["pod1".to_string()]);
        lock.remove().unwrap();
        assert!(store.sandboxes().unwrap().is_empty());
    }

    #[test]
    fn an_abandoned_lock_leaves_only_an_earlier_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), "cbr0").unwrap();
        // A failed first ADD: neither the lock file nor its record stays.
        store.lock("pod1").unwrap().abandon().unwrap();
        let mut lock = store.lock("pod1").unwrap();
        lock.write(&Record::default()).unwrap();
        lock.abandon().unwrap();
        assert!(store.sandboxes().unwrap().is_empty());
        // A failed later ADD of a pod with a record: the record stays for DEL.
        let mut lock = store.lock("pod1").unwrap();
        let r = Record {
            container_id: "pod1".into(),
            ifname: "eth0".into(),
            namespace_created: None,
        };
        lock.write(&r).unwrap();
        drop(lock);
        store.lock("pod1").unwrap().abandon().unwrap();
        assert_eq!(store.lock("pod1").unwrap().read().unwrap(), Some(r));
    }

    #[test]
    fn the_lock_excludes_another_holder() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), "cbr0").unwrap();
        let lock = store.lock("pod1").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = store.clone();
        let t = std::thread::spawn(move || {
            let l = s2.lock("pod1").unwrap();
            tx.send(()).unwrap();
            drop(l);
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(100))
                .is_err()
        );
        lock.remove().unwrap();
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        t.join().unwrap();
    }
}
