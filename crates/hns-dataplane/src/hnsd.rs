//! hnsd as `winnet hnsd` runs it: the objects' store and API (`hns`), and, when asked for, the
//! data plane that carries their packets on this namespace's devices.

use std::future::Future;

use hns::server::{self, ServerError};

use crate::{Dataplane, DataplaneError};

/// What `winnet hnsd` is started with.
#[derive(Clone, Debug)]
pub struct HnsdConfig {
    /// The store, the socket and the profile.
    pub server: server::Config,
    /// Carry packets on real devices in the calling thread's namespace; `None` serves the
    /// objects only.
    pub dataplane: Option<crate::Config>,
}

/// Why hnsd could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum HnsdError {
    /// The store or the socket.
    #[error(transparent)]
    Server(#[from] ServerError),
    /// The data plane could not start.
    #[error(transparent)]
    Dataplane(#[from] DataplaneError),
}

/// Opens the store, binds the socket, starts the data plane (if configured) and serves until
/// `shutdown` completes; removes the socket on the way out.
pub async fn run_hnsd(
    config: &HnsdConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HnsdError> {
    let (listener, service) = server::open(&config.server)?;
    let dataplane = match &config.dataplane {
        Some(dp) => match Dataplane::start(&service, dp.clone()) {
            Ok(d) => Some(d),
            Err(e) => {
                server::abandon(listener, &service);
                return Err(e.into());
            }
        },
        None => None,
    };
    let served = server::serve(listener, service, shutdown).await;
    if let Some(d) = dataplane {
        d.stop();
    }
    Ok(served?)
}
