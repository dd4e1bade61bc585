//! `winnet install-cni DIR`: installs the CNI plugins (win-bridge, win-overlay, flannel,
//! sdnbridge, sdnoverlay, nat) as links to this binary, which runs the plugin its name says.

use crate::output::outln;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

#[derive(clap::Args)]
pub struct Args {
    /// The runtime's plugin directory (its CNI_PATH), e.g. /opt/cni/bin.
    dir: PathBuf,
    /// Replace regular files of the same names too (links are always replaced).
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("cannot find the path of the winnet binary")?;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    for name in cni::NAMES {
        let link = args.dir.join(name);
        install(&exe, &link, args.force)?;
        outln!("{} -> {}", link.display(), exe.display())?;
    }
    Ok(())
}

fn install(exe: &Path, link: &Path, force: bool) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(link) {
        Ok(m) if m.file_type().is_symlink() => {
            if std::fs::read_link(link).is_ok_and(|t| t == exe) {
                return Ok(());
            }
            std::fs::remove_file(link)
                .with_context(|| format!("cannot replace {}", link.display()))?;
        }
        Ok(m) if m.is_file() && force => std::fs::remove_file(link)
            .with_context(|| format!("cannot replace {}", link.display()))?,
        Ok(_) => bail!(
            "{} exists and is not a link; remove it or pass --force to replace it",
            link.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect {}", link.display())),
    }
    std::os::unix::fs::symlink(exe, link)
        .with_context(|| format!("cannot link {} to {}", link.display(), exe.display()))
}
