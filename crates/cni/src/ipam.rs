//! IPAM by delegation: the plugin named by `ipam.type` (Debian's `host-local`, for one), run once
//! per pod with the pod's sandbox ID, and released with the interface name it allocated for.

use serde_json::Value;

use crate::config::{IpamConf, NetConf};
use crate::error::{CniError, Code};
use crate::invoke::{self, Call};
use crate::protocol::{Args, Command, Env};
use crate::result::CniResult;
use crate::version::CniVersion;

/// The IPAM plugin of one config, for one call.
pub struct Ipam<'a> {
    pub env: &'a Env,
    pub args: &'a Args,
    pub conf: &'a NetConf,
    pub ipam: &'a IpamConf,
}

impl<'a> Ipam<'a> {
    /// The IPAM of `conf`, if it names one.
    pub fn of(env: &'a Env, args: &'a Args, conf: &'a NetConf) -> Option<Ipam<'a>> {
        conf.ipam.as_ref().map(|ipam| Ipam {
            env,
            args,
            conf,
            ipam,
        })
    }

    fn call(
        &self,
        command: Command,
        sandbox: &str,
        ifname: &str,
        stdin: &[u8],
    ) -> Result<Vec<u8>, CniError> {
        let call = Call {
            plugin: &self.ipam.plugin,
            command,
            container_id: sandbox,
            ifname,
            netns: &self.args.netns,
            stdin,
        };
        invoke::exec_negotiated(self.env, self.args, &call, self.conf.cni_version)
            .map_err(|e| e.context("ipam"))
    }

    /// Allocates the pod's addresses. A result without any is refused.
    pub fn add(&self, sandbox: &str, ifname: &str) -> Result<CniResult, CniError> {
        let out = self.call(Command::Add, sandbox, ifname, &self.conf.raw)?;
        let v: Value = serde_json::from_slice(&out).map_err(|e| {
            CniError::new(
                Code::DECODING_FAILURE,
                format!(
                    "ipam: {} printed a result that is not JSON: {e}",
                    self.ipam.plugin
                ),
            )
        })?;
        let r = CniResult::parse(&v).map_err(|e| {
            CniError::new(
                Code::DECODING_FAILURE,
                format!("ipam: result of {}: {e}", self.ipam.plugin),
            )
        })?;
        if r.ips.is_empty() {
            return Err(CniError::new(
                Code::INVALID_NETWORK_CONFIG,
                format!(
                    "ipam: {} returned no IP config; check the ipam section's ranges/subnet",
                    self.ipam.plugin
                ),
            ));
        }
        Ok(r)
    }

    /// Releases what `add` took for (`sandbox`, `ifname`); releasing nothing is fine.
    pub fn del(&self, sandbox: &str, ifname: &str) -> Result<(), CniError> {
        self.call(Command::Del, sandbox, ifname, &self.conf.raw)
            .map(drop)
    }

    /// Asks the IPAM plugin whether the allocation still exists.
    pub fn check(&self, sandbox: &str, ifname: &str) -> Result<(), CniError> {
        self.call(Command::Check, sandbox, ifname, &self.conf.raw)
            .map(drop)
    }

    /// True when the plugin speaks 1.1.0, i.e. has STATUS and GC.
    fn speaks_1_1(&self) -> Result<bool, CniError> {
        let theirs = invoke::versions(self.env, self.args, &self.ipam.plugin, CniVersion::CURRENT)
            .map_err(|e| e.context("ipam"))?;
        Ok(theirs.contains(&CniVersion::CURRENT))
    }

    /// STATUS, forwarded when the plugin has it.
    pub fn status(&self) -> Result<(), CniError> {
        if self.speaks_1_1()? {
            self.call(Command::Status, "", "", &self.conf.raw)?;
        }
        Ok(())
    }

    /// GC, forwarded when the plugin has it (with the same valid attachments).
    pub fn gc(&self) -> Result<(), CniError> {
        if self.speaks_1_1()? {
            self.call(Command::Gc, "", "", &self.conf.raw)?;
        }
        Ok(())
    }
}
