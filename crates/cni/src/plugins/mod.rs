//! The plugins, one file each, and which one a program name selects.

pub mod flannel;
pub mod sdn;
pub mod win_bridge;
pub mod win_overlay;
pub mod windows;

use crate::attachment::{self, Driver, block_on};
use crate::config::NetConf;
use crate::error::CniError;
use crate::protocol::{Plugin, Request};
use crate::result::CniResult;

/// Every plugin name `winnet install-cni` links to the winnet binary.
pub const NAMES: [&str; 6] = [
    "win-bridge",
    "win-overlay",
    "flannel",
    "sdnbridge",
    "sdnoverlay",
    "nat",
];

/// The plugin a program is installed as (`win-bridge`, `win-bridge.exe`, ...).
pub fn by_name(program: &str) -> Option<Box<dyn Plugin>> {
    let base = program.strip_suffix(".exe").unwrap_or(program);
    Some(match base {
        "win-bridge" => Box::new(OnHns::<win_bridge::WinBridge>::new(
            "win-bridge",
            win_bridge::WinBridge::parse,
        )),
        "win-overlay" => Box::new(OnHns::<win_overlay::WinOverlay>::new(
            "win-overlay",
            win_overlay::WinOverlay::parse,
        )),
        "flannel" => Box::new(flannel::Flannel),
        // The three are one program in windows-container-networking; the config's `type` picks.
        "sdnbridge" => Box::new(OnHns::<sdn::Sdn>::new("sdnbridge", sdn::Sdn::parse)),
        "sdnoverlay" => Box::new(OnHns::<sdn::Sdn>::new("sdnoverlay", sdn::Sdn::parse)),
        "nat" => Box::new(OnHns::<sdn::Sdn>::new("nat", sdn::Sdn::parse)),
        _ => return None,
    })
}

/// A plugin whose verbs are the shared HNS attachment with a [`Driver`] read from the config.
pub struct OnHns<D> {
    name: &'static str,
    parse: fn(&NetConf) -> Result<D, CniError>,
}

impl<D> OnHns<D> {
    fn new(name: &'static str, parse: fn(&NetConf) -> Result<D, CniError>) -> OnHns<D> {
        OnHns { name, parse }
    }
}

impl<D: Driver> Plugin for OnHns<D> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn add(&self, req: &Request<'_>) -> Result<CniResult, CniError> {
        let d = (self.parse)(&req.conf)?;
        block_on(attachment::add(&d, req))
    }

    fn del(&self, req: &Request<'_>) -> Result<(), CniError> {
        let d = (self.parse)(&req.conf)?;
        block_on(attachment::del(&d, req))
    }

    fn check(&self, req: &Request<'_>) -> Result<(), CniError> {
        let d = (self.parse)(&req.conf)?;
        block_on(attachment::check(&d, req))
    }

    fn status(&self, req: &Request<'_>) -> Result<(), CniError> {
        let d = (self.parse)(&req.conf)?;
        block_on(attachment::status(&d, req))
    }

    fn gc(&self, req: &Request<'_>) -> Result<(), CniError> {
        let d = (self.parse)(&req.conf)?;
        block_on(attachment::gc(&d, req))
    }
}
