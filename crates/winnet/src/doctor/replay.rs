//! A trace replayed from a snapshot: the node's HNS objects loaded into an in-memory store,
//! compiled with the node facts the live compiler had (its addresses, routes and the underlay
//! neighbours it resolved), and the same explain logic run over them
//! ([`hns_compiler::explain::trace`]) — what hnsd's `POST /trace` runs on the live switch.

use std::collections::HashMap;

use anyhow::{Context, anyhow};
use doctor::NodeSnapshot;
use hns::state::{Change, Object};
use hns::store::Store;
use hns_client::{TraceAnswer, TraceRequest};
use hns_compiler::{Compiler, HostRoute, NodeFacts, Resolver};

/// What the node's switch does with `req`, from the snapshot alone.
pub fn trace(snap: &NodeSnapshot, req: &TraceRequest) -> anyhow::Result<TraceAnswer> {
    let dump = snap.switch.as_ref().with_context(|| {
        format!(
            "the bundle has no switch of node {} (its hnsd ran without a data plane), so there is nothing to trace",
            snap.node
        )
    })?;
    let profile: hns::Profile = dump
        .facts
        .profile
        .parse()
        .map_err(|e: String| anyhow!("the bundle's profile: {e}"))?;
    let store = Store::in_memory().map_err(|e| anyhow!("in-memory store: {e}"))?;
    let h = &snap.hns;
    let objects: Vec<Change> = h
        .networks
        .iter()
        .cloned()
        .map(Object::Network)
        .chain(h.namespaces.iter().cloned().map(Object::Namespace))
        .chain(h.endpoints.iter().cloned().map(Object::Endpoint))
        .chain(h.load_balancers.iter().cloned().map(Object::LoadBalancer))
        .chain(h.routes.iter().cloned().map(Object::Route))
        .map(Change::Put)
        .collect();
    store
        .commit(&objects)
        .map_err(|e| anyhow!("loading the bundle's HNS objects: {e}"))?;
    let state = store
        .load(profile)
        .map_err(|e| anyhow!("loading the bundle's HNS objects: {e}"))?;
    let mac = |s: &str, what: &str| {
        s.parse::<vfp::wire::MacAddr>()
            .map_err(|e| anyhow!("the bundle's {what} \"{s}\": {e}"))
    };
    let mut neighbors = HashMap::new();
    for (ip, m) in &dump.facts.neighbors {
        neighbors.insert(*ip, mac(m, "neighbour MAC")?);
    }
    let facts = NodeFacts {
        name: snap.node.clone(),
        profile,
        host_mac: mac(&dump.facts.host_mac, "host MAC")?,
        addresses: dump.facts.addresses.clone(),
        uplink: dump.facts.uplink.clone(),
        routes: dump
            .facts
            .routes
            .iter()
            .map(|r| HostRoute::new(r.destination, r.next_hop))
            .collect(),
        resolver: Resolver::from_table(neighbors),
        dynamic_ports: dump.facts.dynamic_ports,
    };
    // Port numbers follow the order the live ports were made in; the rebuilt switch is given
    // the live numbers by name, so that the trace names the same ports.
    let pins = dump.ports.iter().map(|p| (p.name.clone(), p.id)).collect();
    let mut compiler = Compiler::build_pinned(&state, facts, pins);
    hns_compiler::explain::trace(&state, &mut compiler, &snap.node, req, vfp::Timestamp(0))
        .map_err(|e| anyhow!("{}", e.detail))
}
