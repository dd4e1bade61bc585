//! Serving the API on a Unix socket: one hnsd per socket; everything hnsd makes is its own
//! (the socket and its lock file 0600, the directories it makes 0700); it removes a stale socket
//! of its own and nothing else; and a stop gives open connections a short grace, then closes
//! them, so no client can hold the store.

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use tokio::net::{UnixListener, UnixStream};

use crate::profile::Profile;
use crate::service::Service;
use crate::store::{FILE_NAME, Store, StoreError};

/// How long a stop waits for open connections to finish their calls before closing them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Why hnsd could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("another hnsd is already serving on {0}; stop it or choose another --socket")]
    AlreadyServing(PathBuf),
    #[error(
        "{path} is {what}, not a socket hnsd left behind; hnsd replaces only a stale socket of its own and removes nothing else: choose another --socket, or move it away if it is not needed"
    )]
    NotOurs { path: PathBuf, what: String },
    #[error("cannot bind {path}: {source}")]
    Bind { path: PathBuf, source: io::Error },
    #[error("cannot create the state dir {path}: {source}")]
    StateDir { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("serving failed: {0}")]
    Serve(io::Error),
}

/// Where hnsd keeps its objects and serves them, and which Windows build it reproduces.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the store (`hns.redb`) lives.
    pub state_dir: PathBuf,
    /// The Unix socket the API is served on.
    pub socket: PathBuf,
    /// The Windows build to reproduce.
    pub profile: Profile,
}

/// Opens the store, binds the socket and serves the objects (no data plane) until `shutdown`
/// completes; removes the socket and its lock file on the way out.
pub async fn run(
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (listener, service) = open(config)?;
    serve(listener, service, shutdown).await
}

/// Claims the socket, loads the store and binds the socket: everything that can fail before
/// serving. The socket is bound last, so a client that can connect finds the store open and
/// locked. A data plane subscribes to the service between this and [`serve`]; if it cannot
/// start, give the socket up with [`abandon`].
pub fn open(config: &Config) -> Result<(Listener, Arc<Service>), ServerError> {
    // Refuse a live socket before touching the state dir, so the message names the real cause.
    let claim = claim(&config.socket)?;
    let opened = private_dir(&config.state_dir)
        .map_err(|source| ServerError::StateDir {
            path: config.state_dir.clone(),
            source,
        })
        .and_then(|()| Ok(Store::open(&config.state_dir.join(FILE_NAME))?))
        .and_then(|store| Ok(Service::start(store, config.profile)?));
    let service = match opened {
        Ok(service) => service,
        Err(e) => {
            claim.lock.release();
            return Err(e);
        }
    };
    match claim.bind() {
        Ok(listener) => Ok((listener, Arc::new(service))),
        Err(e) => {
            service.shutdown();
            Err(e)
        }
    }
}

/// Gives up a socket [`open`] bound and stops its service, when hnsd stops before serving.
pub fn abandon(listener: Listener, service: &Service) {
    service.shutdown();
    listener.close();
}

/// Serves the API of `service` on `listener` until `shutdown` completes. Then it stops
/// accepting and removes the socket, gives open connections [`SHUTDOWN_GRACE`] to finish
/// their calls and closes the rest, closes the store, and removes the lock file.
pub async fn serve(
    listener: Listener,
    service: Arc<Service>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let Listener {
        listener,
        socket,
        lock,
    } = listener;
    tracing::info!(socket = %socket.display(), profile = %service.profile(), "hnsd serving");
    let app = crate::api::router(Arc::clone(&service));
    let (closing, closed) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let served = loop {
        tokio::select! {
            () = &mut shutdown => break Ok(()),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, app.clone(), closed.clone()));
                }
                Err(e) => {
                    if let Err(e) = accept_failed(e).await {
                        break Err(ServerError::Serve(e));
                    }
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    };
    drop(listener);
    let _ = std::fs::remove_file(&socket);
    let _ = closing.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "closing the connections still open {SHUTDOWN_GRACE:?} after the stop"
        );
        connections.shutdown().await;
    }
    service.shutdown();
    lock.release();
    served
}

/// Serves one client connection until it ends, or finishes its call in progress and ends once
/// `closing` turns true.
async fn connection(
    stream: UnixStream,
    app: axum::Router,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let io = hyper_util::rt::TokioIo::new(stream);
    let service = hyper_util::service::TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        ended = conn.as_mut() => {
            if let Err(e) = ended {
                tracing::debug!(error = %e, "a client connection failed");
            }
            return;
        }
        _ = closing.wait_for(|c| *c) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// A failed accept: a client that went away is nothing; running out of descriptors passes (the
/// listener is tried again shortly, as axum does); anything else ends serving.
async fn accept_failed(e: io::Error) -> io::Result<()> {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted
    ) {
        return Ok(());
    }
    if matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    ) {
        tracing::warn!(error = %e, "cannot accept a connection; trying again in 100 ms");
        tokio::time::sleep(Duration::from_millis(100)).await;
        return Ok(());
    }
    Err(e)
}

/// An hnsd serving inside this process (for tests, and for the in-memory demo).
pub struct Running {
    pub socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), ServerError>>>,
}

/// Starts hnsd in this process; returns once it accepts calls.
pub fn spawn(config: &Config) -> Result<Running, ServerError> {
    let (listener, service) = open(config)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, service, async {
        let _ = stopped.await;
    }));
    Ok(Running {
        socket: config.socket.clone(),
        stop: Some(stop),
        task: Some(task),
    })
}

impl Running {
    /// A client of this hnsd.
    pub fn client(&self) -> hns_client::Client {
        hns_client::Client::new(&self.socket)
    }

    /// Stops serving and closes the store.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.task.take() {
            Some(t) => t.await.unwrap_or(Ok(())),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Makes `dir` and its missing parents, each 0700; a directory that exists is left as it is.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// This process's effective user.
fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Binds `path` with mode 0600 (see [`claim`]).
pub fn bind(path: &Path) -> Result<Listener, ServerError> {
    claim(path)?.bind()
}

/// Makes `path` this hnsd's to bind. One hnsd per socket: an exclusive lock on `<path>.lock`,
/// held for the listener's life, makes the check and the bind one step, so two hnsd started at
/// the same moment cannot both win. What is at `path` is replaced only if it is a socket of this
/// user that nobody listens on (a killed hnsd's); anything else is refused and left alone.
pub fn claim(path: &Path) -> Result<Claim, ServerError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        private_dir(dir).map_err(|source| ServerError::Bind {
            path: path.into(),
            source,
        })?;
    }
    let lock = SocketLock::take(path)?;
    let stale = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ServerError::Bind {
            path: path.into(),
            source,
        }),
        Ok(meta) => replace_stale(path, &meta),
    };
    match stale {
        Ok(()) => Ok(Claim {
            socket: path.into(),
            lock,
        }),
        Err(e) => {
            lock.release();
            Err(e)
        }
    }
}

/// A socket path no other hnsd can take (its lock held) and nothing occupies.
#[derive(Debug)]
pub struct Claim {
    socket: PathBuf,
    lock: SocketLock,
}

impl Claim {
    /// Binds the socket, mode 0600.
    pub fn bind(self) -> Result<Listener, ServerError> {
        let Claim { socket, lock } = self;
        let bound = UnixListener::bind(&socket).and_then(|l| {
            let private = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
            if private.is_err() {
                // Ours, just made: not left behind.
                let _ = std::fs::remove_file(&socket);
            }
            private.map(|()| l)
        });
        match bound {
            Ok(listener) => Ok(Listener {
                listener,
                socket,
                lock,
            }),
            Err(source) => {
                lock.release();
                Err(ServerError::Bind {
                    path: socket,
                    source,
                })
            }
        }
    }
}

/// Removes the socket at `path` if a killed hnsd left it: a socket of this user that nobody
/// listens on. Anything else is refused.
fn replace_stale(path: &Path, meta: &std::fs::Metadata) -> Result<(), ServerError> {
    let not_ours = |what: String| ServerError::NotOurs {
        path: path.into(),
        what,
    };
    let kind = meta.file_type();
    if !kind.is_socket() {
        let what = if kind.is_file() {
            "a regular file"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else {
            "a special file"
        };
        return Err(not_ours(what.into()));
    }
    if meta.uid() != euid() {
        return Err(not_ours(format!("a socket of user {}", meta.uid())));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        // A live server that predates the lock file (or holds it elsewhere).
        Ok(_) => Err(ServerError::AlreadyServing(path.into())),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .map_err(|source| ServerError::Bind {
                path: path.into(),
                source,
            }),
        Err(source) => Err(ServerError::Bind {
            path: path.into(),
            source,
        }),
    }
}

/// A bound socket and the lock that makes it hnsd's alone.
#[derive(Debug)]
pub struct Listener {
    listener: UnixListener,
    socket: PathBuf,
    lock: SocketLock,
}

impl Listener {
    /// Stops listening and removes what hnsd made: the socket, then the lock file.
    fn close(self) {
        drop(self.listener);
        let _ = std::fs::remove_file(&self.socket);
        self.lock.release();
    }
}

/// `<socket>.lock`, flocked while an hnsd serves on the socket. hnsd makes it 0600, so no other
/// user can open it to hold the lock, and removes it on a clean stop.
#[derive(Debug)]
struct SocketLock {
    path: PathBuf,
    file: Flock<File>,
}

/// How often [`SocketLock::take`] tries again when the lock file changes under it.
const LOCK_ATTEMPTS: usize = 8;

impl SocketLock {
    fn take(socket: &Path) -> Result<SocketLock, ServerError> {
        let mut name = socket.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        let err = |source| ServerError::Bind {
            path: path.clone(),
            source,
        };
        for _ in 0..LOCK_ATTEMPTS {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(err)?;
            let meta = file.metadata().map_err(err)?;
            if meta.uid() != euid() {
                return Err(ServerError::NotOurs {
                    path: path.clone(),
                    what: format!("a lock file of user {}", meta.uid()),
                });
            }
            if meta.mode() & 0o077 != 0 {
                // An earlier hnsd made it readable by all, so anyone may hold it open and
                // locked: put a private one in its place.
                Self::replace(&path).map_err(err)?;
                continue;
            }
            let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(f) => f,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    return Err(ServerError::AlreadyServing(socket.into()));
                }
                Err((_, e)) => return Err(err(io::Error::from(e))),
            };
            // The hnsd that held it may have removed it while stopping: then this lock is on
            // a file nobody else finds; take the one at the path instead.
            let current = std::fs::symlink_metadata(&path);
            if current.is_ok_and(|m| m.ino() == meta.ino() && m.dev() == meta.dev()) {
                return Ok(SocketLock { path, file });
            }
        }
        Err(err(io::Error::other(
            "the lock file keeps being replaced; is another hnsd starting and stopping on this socket?",
        )))
    }

    /// Puts a new empty 0600 file at `path`.
    fn replace(path: &Path) -> io::Result<()> {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{}", std::process::id()));
        let tmp = PathBuf::from(name);
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Removes the lock file, then releases the lock: whoever locks the old file after this
    /// finds it gone from the path and takes a new one.
    fn release(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
    }
}
