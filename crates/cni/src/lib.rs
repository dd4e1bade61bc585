//! The CNI plugins of a Windows node, on hnsd: win-bridge, win-overlay, flannel, sdnbridge,
//! sdnoverlay and nat, speaking CNI 1.1 (ADD, DEL, CHECK, STATUS, GC, VERSION) and accepting
//! configs down to 0.2.0 as Windows clusters write them.
//!
//! The `winnet` binary is every plugin: installed (linked) under a plugin's name, it runs that
//! plugin ([`main_if_plugin`]).
//!
//! - [`protocol`]: the environment, the verbs, stdout and exit codes;
//! - [`config`], [`result`], [`version`], [`error`]: the documents;
//! - [`attachment`]: a pod on an HNS network (endpoint, namespace, IPAM), shared by the plugins;
//! - [`plugins`]: what differs per plugin; [`ipam`] and [`invoke`]: running other plugins.

pub mod attachment;
pub mod config;
pub mod dns;
pub mod error;
pub mod invoke;
pub mod ipam;
pub mod netns;
pub mod plugins;
pub mod policy;
pub mod protocol;
pub mod result;
pub mod state;
pub mod subnet_env;
pub mod version;

pub use error::{CniError, Code};
pub use plugins::NAMES;
pub use protocol::{Env, Output, Plugin, run, run_with_hns};
pub use result::CniResult;
pub use version::CniVersion;

use std::io::{Read, Write};
use std::path::Path;

/// When the program was started under a plugin's name (argv[0]), runs that plugin on this
/// process's environment and stdin and returns the exit code; otherwise `None`.
pub fn main_if_plugin(argv0: &std::ffi::OsStr) -> Option<i32> {
    let program = Path::new(argv0).file_name()?.to_str()?;
    let plugin = plugins::by_name(program)?;
    let env = Env::from_process();
    let mut stdin = Vec::new();
    // VERSION may come with nothing on stdin; a closed or unreadable stdin is an empty config.
    let _ = std::io::stdin().read_to_end(&mut stdin);
    let out = run(plugin.as_ref(), &env, &stdin);
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&out.stdout).and_then(|()| stdout.flush());
    Some(out.exit_code)
}
