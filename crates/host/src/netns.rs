//! Network namespaces: the Linux form of a network compartment. A namespace is named by a
//! file that keeps it alive (a bind mount of the namespace's nsfs inode), as `ip netns` keeps
//! them under [`Netns::RUN_DIR`], or by any other such path (`/proc/PID/ns/net`, a CRI's pin).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};

use crate::HostError;
use crate::netlink::Netlink;

/// The calling thread's own network namespace.
const THREAD_NETNS: &str = "/proc/thread-self/ns/net";

/// Serialises the one-time preparation of [`Netns::RUN_DIR`] within this process.
static RUN_DIR_SETUP: Mutex<()> = Mutex::new(());

/// A network namespace, by the path of a file that pins it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Netns {
    path: PathBuf,
}

impl Netns {
    /// Where named namespaces live, as `ip netns` keeps them.
    pub const RUN_DIR: &'static str = "/run/netns";

    /// The namespace `ip netns` calls `name` (`/run/netns/NAME`); it may not exist yet.
    pub fn named(name: &str) -> Netns {
        Netns {
            path: Path::new(Self::RUN_DIR).join(name),
        }
    }

    /// The namespace pinned at `path`.
    pub fn from_path(path: impl Into<PathBuf>) -> Netns {
        Netns { path: path.into() }
    }

    /// The file that pins the namespace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `ip netns` name: the file name, when the file is directly under [`Netns::RUN_DIR`].
    pub fn name(&self) -> Option<&str> {
        if self.path.parent()? != Path::new(Self::RUN_DIR) {
            return None;
        }
        self.path.file_name()?.to_str()
    }

    /// True when the pinning file exists.
    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Makes a new namespace named `name`, as `ip netns add NAME` does, with `lo` up in it.
    pub fn create(name: &str) -> Result<Netns, HostError> {
        check_name(name)?;
        prepare_run_dir()?;
        let ns = Netns::named(name);
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&ns.path)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => HostError::AlreadyExists(format!(
                    "network namespace {name} exists already ({}); delete it first \
                     (ip netns del {name}) or choose another name",
                    ns.path.display()
                )),
                _ => HostError::io(format!("create {}", ns.path.display()), e),
            })?;
        let made = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name(format!("netns-add-{name}"))
                .spawn_scoped(s, || ns.pin_new_namespace())
                .map_err(|e| HostError::io("start a thread to make a network namespace", e))?
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        });
        if let Err(e) = made {
            let _ = ns.delete();
            return Err(e);
        }
        Ok(ns)
    }

    /// On a thread of its own: moves it to a new namespace, pins that at `self.path`, and
    /// brings `lo` up there.
    fn pin_new_namespace(&self) -> Result<(), HostError> {
        unshare(CloneFlags::CLONE_NEWNET).map_err(|e| {
            HostError::io(
                "unshare(CLONE_NEWNET) (this needs CAP_SYS_ADMIN)",
                io::Error::from(e),
            )
        })?;
        mount(
            Some(THREAD_NETNS),
            &self.path,
            Some("none"),
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| {
            HostError::io(
                format!("bind-mount {THREAD_NETNS} onto {}", self.path.display()),
                io::Error::from(e),
            )
        })?;
        let mut nl = Netlink::open()?;
        let lo = nl.link("lo")?.ok_or_else(|| {
            HostError::NotFound(format!(
                "the new network namespace {} has no lo",
                self.path.display()
            ))
        })?;
        nl.set_up(lo.index, true)
    }

    /// Removes the namespace's pin, as `ip netns del` does; the namespace itself goes when the
    /// last process, socket or device in it goes. Ok if it is gone already.
    pub fn delete(&self) -> Result<(), HostError> {
        match umount2(&self.path, MntFlags::MNT_DETACH) {
            Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => {}
            Err(e) => {
                return Err(HostError::io(
                    format!("unmount network namespace {}", self.path.display()),
                    io::Error::from(e),
                ));
            }
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(HostError::io(format!("remove {}", self.path.display()), e)),
        }
    }

    /// Runs `f` on a new thread inside this namespace and returns what it returns. Sockets
    /// and devices made by `f` stay in this namespace after the thread ends; a panic in `f`
    /// is resumed on the calling thread.
    pub fn run<R: Send>(
        &self,
        f: impl FnOnce() -> Result<R, HostError> + Send,
    ) -> Result<R, HostError> {
        let file = self.open()?;
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("netns-run".into())
                .spawn_scoped(s, move || {
                    self.set_thread(&file)?;
                    f()
                })
                .map_err(|e| {
                    HostError::io(
                        format!(
                            "start a thread for network namespace {}",
                            self.path.display()
                        ),
                        e,
                    )
                })?
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Moves the calling thread into this namespace. Threads it starts afterwards start there
    /// too; threads that exist already stay where they are.
    pub fn enter(&self) -> Result<(), HostError> {
        let file = self.open()?;
        self.set_thread(&file)
    }

    /// True when the calling thread is in this namespace.
    pub fn is_current(&self) -> bool {
        match (
            std::fs::metadata(&self.path),
            std::fs::metadata(THREAD_NETNS),
        ) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }

    /// Checks that the file pins a network namespace: an nsfs inode of type `CLONE_NEWNET`
    /// (the kernel's `NS_GET_NSTYPE`), as `setns` would need. A regular file, a directory, a
    /// device, a procfs file or another kind of namespace is refused, saying which it is.
    /// Only regular files are opened, so a FIFO or a device is never touched.
    pub fn check(&self) -> Result<(), HostError> {
        let not = |what: &str| {
            HostError::Invalid(format!(
                "{} is not a network namespace ({what})",
                self.path.display()
            ))
        };
        let meta = std::fs::metadata(&self.path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => HostError::NotFound(format!(
                "network namespace {} does not exist",
                self.path.display()
            )),
            _ => HostError::io(format!("stat {}", self.path.display()), e),
        })?;
        if !meta.is_file() {
            let kind = meta.file_type();
            return Err(not(if kind.is_dir() {
                "a directory"
            } else {
                "not a regular file: a device, socket or FIFO"
            }));
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&self.path)
            .map_err(|e| HostError::io(format!("open {}", self.path.display()), e))?;
        // SAFETY: `file` is an open descriptor for the whole call; NS_GET_NSTYPE takes no
        // argument and writes no memory of ours.
        let kind = unsafe { libc::ioctl(file.as_raw_fd(), libc::NS_GET_NSTYPE) };
        match kind {
            libc::CLONE_NEWNET => Ok(()),
            k if k < 0 => Err(not("a file, not a namespace")),
            k => Err(not(&format!("a {} namespace", namespace_kind(k)))),
        }
    }

    /// Opens the file that pins the namespace: what `setns` and netlink's `IFLA_NET_NS_FD` take.
    pub(crate) fn open(&self) -> Result<File, HostError> {
        File::open(&self.path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => HostError::NotFound(format!(
                "network namespace {} does not exist; create it first (ip netns add)",
                self.path.display()
            )),
            _ => HostError::io(format!("open network namespace {}", self.path.display()), e),
        })
    }

    fn set_thread(&self, file: &File) -> Result<(), HostError> {
        setns(file, CloneFlags::CLONE_NEWNET).map_err(|e| match e {
            Errno::EINVAL => HostError::Invalid(format!(
                "{} is not a network namespace (a file left behind? remove it with \
                 `ip netns del` or rm)",
                self.path.display()
            )),
            e => HostError::io(
                format!(
                    "enter network namespace {} (setns needs CAP_SYS_ADMIN)",
                    self.path.display()
                ),
                io::Error::from(e),
            ),
        })
    }
}

impl std::fmt::Display for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

/// The name of a namespace type `NS_GET_NSTYPE` answered.
fn namespace_kind(clone_flag: libc::c_int) -> &'static str {
    match clone_flag {
        libc::CLONE_NEWNS => "mount",
        libc::CLONE_NEWUTS => "UTS",
        libc::CLONE_NEWIPC => "IPC",
        libc::CLONE_NEWUSER => "user",
        libc::CLONE_NEWPID => "PID",
        libc::CLONE_NEWCGROUP => "cgroup",
        libc::CLONE_NEWTIME => "time",
        _ => "non-network",
    }
}

/// Refuses names that are not a single file name under [`Netns::RUN_DIR`].
fn check_name(name: &str) -> Result<(), HostError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(HostError::Invalid(format!(
            "network namespace name {name:?} is not allowed: it must be a file name \
             (not empty, not . or .., no / or NUL)"
        )));
    }
    Ok(())
}

/// Makes [`Netns::RUN_DIR`] exist and be a shared mount point, as `ip netns add` does, so that
/// namespaces pinned later show in every mount namespace that sees the directory.
fn prepare_run_dir() -> Result<(), HostError> {
    let _guard = RUN_DIR_SETUP.lock().unwrap_or_else(|p| p.into_inner());
    std::fs::create_dir_all(Netns::RUN_DIR)
        .map_err(|e| HostError::io(format!("create {}", Netns::RUN_DIR), e))?;
    let mut made_mount_point = false;
    loop {
        let shared = mount(
            None::<&str>,
            Netns::RUN_DIR,
            Some("none"),
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        );
        match shared {
            Ok(()) => return Ok(()),
            // Not a mount point yet: bind it onto itself, then make that shared.
            Err(Errno::EINVAL) if !made_mount_point => {
                mount(
                    Some(Netns::RUN_DIR),
                    Netns::RUN_DIR,
                    Some("none"),
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )
                .map_err(|e| {
                    HostError::io(
                        format!("bind-mount {} onto itself", Netns::RUN_DIR),
                        io::Error::from(e),
                    )
                })?;
                made_mount_point = true;
            }
            Err(e) => {
                return Err(HostError::io(
                    format!(
                        "make {} a shared mount (this needs CAP_SYS_ADMIN)",
                        Netns::RUN_DIR
                    ),
                    io::Error::from(e),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_under_the_run_dir() {
        assert_eq!(Netns::named("a").path(), Path::new("/run/netns/a"));
        assert_eq!(Netns::named("a").name(), Some("a"));
        assert_eq!(Netns::from_path("/run/netns/b").name(), Some("b"));
        assert_eq!(Netns::from_path("/proc/1/ns/net").name(), None);
        assert_eq!(Netns::from_path("/run/netns/x/y").name(), None);
        assert_eq!(Netns::named("a").to_string(), "a");
        assert_eq!(
            Netns::from_path("/proc/1/ns/net").to_string(),
            "/proc/1/ns/net"
        );
    }

    #[test]
    fn only_a_network_namespace_passes_the_check() {
        // The calling thread's own namespace is one (no root needed to read it).
        assert!(Netns::from_path(THREAD_NETNS).check().is_ok());
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("f");
        std::fs::write(&file, "not a namespace").expect("file");
        let cases = [
            (file.clone(), "a file, not a namespace"),
            (dir.path().to_path_buf(), "a directory"),
            (PathBuf::from("/dev/null"), "not a regular file"),
            (
                PathBuf::from("/proc/self/status"),
                "a file, not a namespace",
            ),
            (PathBuf::from("/proc/self/ns/uts"), "a UTS namespace"),
        ];
        for (path, why) in cases {
            let e = Netns::from_path(&path).check().expect_err("not a netns");
            assert!(
                matches!(&e, HostError::Invalid(m) if m.contains("is not a network namespace") && m.contains(why)),
                "{}: {e}",
                path.display()
            );
        }
        assert!(matches!(
            Netns::from_path(dir.path().join("gone")).check(),
            Err(HostError::NotFound(_))
        ));
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert!(
                matches!(check_name(bad), Err(HostError::Invalid(_))),
                "{bad:?}"
            );
        }
        assert!(check_name("pod-1.ns").is_ok());
    }
}
