//! Serving the API on a Unix socket: one hnsd per socket, mode 0600, a stale socket replaced.

use std::future::Future;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;

use crate::profile::Profile;
use crate::service::Service;
use crate::store::{Store, StoreError};

/// Why hnsd could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("another hnsd is already serving on {0}; stop it or choose another --socket")]
    AlreadyServing(PathBuf),
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
/// completes; removes the socket on the way out.
pub async fn run(
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (listener, service) = open(config)?;
    serve(listener, service, &config.socket, shutdown).await
}

/// Binds the socket and loads the store: everything that can fail before serving. A data
/// plane subscribes to the service between this and [`serve`]; if it cannot start, give the
/// socket up with [`abandon`].
pub fn open(config: &Config) -> Result<(Listener, Arc<Service>), ServerError> {
    // Refuse a live socket before touching the state dir, so the message names the real cause.
    let listener = bind(&config.socket)?;
    let opened = std::fs::create_dir_all(&config.state_dir)
        .map_err(|source| ServerError::StateDir {
            path: config.state_dir.clone(),
            source,
        })
        .and_then(|()| Ok(Store::open(&config.state_dir.join("hns.redb"))?))
        .and_then(|store| Ok(Service::start(store, config.profile)?));
    match opened {
        Ok(service) => Ok((listener, Arc::new(service))),
        Err(e) => {
            let _ = std::fs::remove_file(&config.socket);
            Err(e)
        }
    }
}

/// Gives up a socket [`open`] bound and stops its service, when hnsd stops before serving.
pub fn abandon(listener: Listener, service: &Service, socket: &Path) {
    let _ = std::fs::remove_file(socket);
    service.shutdown();
    drop(listener);
}

/// Serves the API of `service` on `listener` (bound at `socket`) until `shutdown` completes;
/// then removes the socket and closes the store.
pub async fn serve(
    listener: Listener,
    service: Arc<Service>,
    socket: &Path,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    tracing::info!(socket = %socket.display(), profile = %service.profile(), "hnsd serving");
    let Listener {
        listener,
        _lock: lock,
    } = listener;
    let served = axum::serve(listener, crate::api::router(Arc::clone(&service)))
        .with_graceful_shutdown(shutdown)
        .await;
    let _ = std::fs::remove_file(socket);
    service.shutdown();
    drop(lock);
    served.map_err(ServerError::Serve)
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
    let socket = config.socket.clone();
    let task = tokio::spawn(async move {
        serve(listener, service, &socket, async {
            let _ = stopped.await;
        })
        .await
    });
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

/// Binds `path` with mode 0600. One hnsd per socket: an exclusive lock on `<path>.lock`, held
/// for the listener's life, makes the check and the bind one step, so two hnsd started at the
/// same moment cannot both win. A socket file left by a killed hnsd is replaced.
pub fn bind(path: &Path) -> Result<Listener, ServerError> {
    let bind_err = |source| ServerError::Bind {
        path: path.into(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(bind_err)?;
    }
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(bind_err)?;
    let lock = match nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock)
    {
        Ok(lock) => lock,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            return Err(ServerError::AlreadyServing(path.to_path_buf()));
        }
        Err((_, e)) => return Err(bind_err(io::Error::from(e))),
    };
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            // A live server that predates the lock file (or holds it elsewhere).
            return Err(ServerError::AlreadyServing(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(bind_err)?;
    }
    let listener = UnixListener::bind(path).map_err(bind_err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_err)?;
    Ok(Listener {
        listener,
        _lock: lock,
    })
}

/// A bound socket and the lock that makes it hnsd's alone.
#[derive(Debug)]
pub struct Listener {
    listener: UnixListener,
    _lock: nix::fcntl::Flock<std::fs::File>,
}
