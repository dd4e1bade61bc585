//! `winnet cluster down`: every process the cluster started is stopped (etcd, hnsd, flanneld,
//! kube-proxy, the servers) and every namespace it made removed (with the pods' TAPs and the
//! veth ends inside them), then its directory (with etcd's data, the nodes' subnet.env and
//! host-local's reservations).

use std::path::Path;

use host::netns::Netns;

use super::{NS_PREFIX, State, procs};

/// Removes the cluster in `dir`; Ok (and nothing done) when there is none.
pub fn down(dir: &Path) -> anyhow::Result<bool> {
    let Some(state) = State::load(dir)? else {
        return Ok(false);
    };
    let mut failed: Vec<String> = procs::stop(&state.procs)
        .into_iter()
        .map(|p| format!("{p} did not exit"))
        .collect();
    for ns in state.namespaces.iter().rev() {
        if !ns.starts_with(NS_PREFIX) {
            continue;
        }
        if let Err(e) = Netns::named(ns).delete() {
            failed.push(format!("{ns}: {e}"));
        }
        let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
    }
    std::fs::remove_dir_all(dir).or_else(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(e)
        }
    })?;
    if !failed.is_empty() {
        anyhow::bail!(
            "some of the cluster could not be removed: {}",
            failed.join("; ")
        );
    }
    Ok(true)
}
