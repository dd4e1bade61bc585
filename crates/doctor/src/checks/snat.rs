//! SNAT port-pool pressure per node address: the busiest remote end's share of a pool's ports
//! (checkPortExhaustion.ps1 on Windows).

use crate::finding::{Finding, ObjectRef, ProblemKind};
use crate::node::Node;

/// The share of a pool's ports one remote end may hold before the doctor warns.
pub const PRESSURE: f64 = 0.8;

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    let Some(sw) = &n.snap.switch else { return };
    for pool in &sw.snat_pools {
        if pool.size == 0 {
            continue;
        }
        for (class, busiest) in &pool.busiest {
            let share = *busiest as f64 / pool.size as f64;
            if share < PRESSURE {
                continue;
            }
            let addr = pool.address.map(|a| a.to_string()).unwrap_or_default();
            out.push(n.finding(
                ProblemKind::SnatPortPressure,
                format!(
                    "SNAT pool {addr} {class}: one remote end holds {busiest} of {} ports ({:.0}%)",
                    pool.size,
                    share * 100.0
                ),
                vec![ObjectRef::new("SnatPool", addr.clone(), format!("{class} {busiest}/{}", pool.size))],
                format!("new {class} connections from pods to that remote end, translated to {addr}, are refused once every port is held"),
                "reuse connections (keep-alive, pooling) in the pods that open many; add node addresses or exempt the destination from OutBoundNAT when it is inside the network".into(),
            ));
        }
    }
}
