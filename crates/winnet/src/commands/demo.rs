//! `winnet demo`: build the local cluster, run the flow matrix, summarise, and take it down
//! (unless `--keep`). Without root, the same topology runs on in-memory wires and says so.

use crate::output::{note, outln};
use std::path::Path;

use anyhow::bail;

use super::cluster::{CheckArgs, UpArgs, check_and_print, topology, up};
use crate::cluster;

#[derive(clap::Args)]
pub struct Args {
    /// flannel's mode: l2bridge (host-gw) or overlay (vxlan).
    #[arg(long)]
    mode: Option<cluster::Mode>,
    /// The Windows build: ws2019, ws2022, ws2025 (the default topology's) or unrestricted.
    #[arg(long)]
    profile: Option<hns::Profile>,
    /// Leave the cluster up afterwards (`winnet cluster down` removes it).
    #[arg(long)]
    keep: bool,
    /// A topology file instead of the default.
    #[arg(long)]
    topology: Option<std::path::PathBuf>,
    /// Print the matrix as Markdown.
    #[arg(long)]
    markdown: bool,
    /// Print the matrix as JSON (each flow, what the profile expects, what happened).
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Run on in-memory wires even as root (what a user without root gets).
    #[arg(long)]
    simulate: bool,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let t = topology(&UpArgs {
        file: a.topology.clone(),
        mode: a.mode,
        profile: a.profile,
        ..UpArgs::default()
    })?;
    if a.simulate || !cluster::is_root() {
        return simulate(&t, &a);
    }
    let dir = Path::new(cluster::DIR);
    if cluster::State::load(dir)?.is_some() {
        bail!("a cluster is already up; run `winnet cluster down` first");
    }
    let started = std::time::Instant::now();
    let state = up(&t, dir)?;
    let ok = check_and_print(
        &state,
        &CheckArgs {
            json: a.json,
            markdown: a.markdown,
        },
    );
    if a.keep {
        note!(
            "the cluster stays up (--keep): `winnet cluster status`, `winnet trace`, `winnet cluster down`"
        );
    } else {
        cluster::teardown::down(dir)?;
        note!("cluster removed");
    }
    note!("demo took {:.1} s", started.elapsed().as_secs_f64());
    match ok {
        Ok(true) => Ok(()),
        Ok(false) => bail!("some flows did not behave as the profile says (see MISMATCH above)"),
        Err(e) => Err(e),
    }
}

/// The demo on in-memory wires: the same topology, addresses and matrix.
fn simulate(t: &cluster::Topology, a: &Args) -> anyhow::Result<()> {
    note!(
        "SIMULATED: {}the cluster runs in memory: each Windows node an hnsd in process with its \
         switch, the real CNI plugins, flanneld and kube-proxy on it, real frames on virtual wires.\n",
        if a.simulate {
            ""
        } else {
            "not root, so no namespaces or devices are made; "
        }
    );
    let outcomes = cluster::run_sim::outcomes(t)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&outcomes)?)?;
    } else {
        let header = cluster::render::header(t, true);
        outln!(
            "{}",
            cluster::render::render(&outcomes, &header, a.markdown)
        )?;
    }
    let ran = outcomes.iter().filter(|o| o.skipped.is_none()).count();
    let bad = outcomes.iter().filter(|o| !o.matches).count();
    note!(
        "{ran} flows simulated, {} skipped ({} mode, profile {}): {bad} mismatched",
        outcomes.len() - ran,
        t.mode,
        t.profile
    );
    if bad > 0 {
        bail!("some simulated flows did not behave as the profile says (see MISMATCH above)");
    }
    Ok(())
}
