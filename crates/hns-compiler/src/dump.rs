//! The compiled switch as data ([`SwitchDump`]): what `GET /linux/switch` answers. Every rule
//! keeps its owner, so a reader can tell which HNS object each rule came from, and which
//! objects have none.

use std::net::IpAddr;

use hns_client::switch::{
    LayerDump, NoticeDump, PlacedDump, RouteFact, RuleDump, SnatPoolDump, SwitchDump, SwitchFacts,
    SwitchPort, rule_id,
};
use vfp::PortKind;

use crate::Compiler;

/// The protocol classes of an SNAT pool, in the switch's order.
const CLASSES: [(u8, &str); 3] = [(0, "tcp"), (1, "udp"), (2, "icmp")];

/// The switch of `c`, its facts (with the MAC the resolver gives for each address in
/// `neighbors`) and its notices.
pub fn switch_dump(c: &Compiler, neighbors: &[IpAddr]) -> SwitchDump {
    let facts = c.facts();
    let endpoint_of: std::collections::HashMap<vfp::PortId, hcn::Guid> =
        c.endpoint_ports.iter().map(|(ep, p)| (*p, *ep)).collect();
    let mut ports: Vec<SwitchPort> = c
        .switch()
        .ports()
        .map(|p| SwitchPort {
            id: p.id(),
            name: p.name().to_string(),
            kind: match p.kind() {
                PortKind::PodVnic => "Pod",
                PortKind::HostVnic => "Host",
                PortKind::Uplink => "Uplink",
            }
            .to_string(),
            endpoint: endpoint_of.get(&p.id()).map(ToString::to_string),
            mac: p.config().mac.map(|m| m.to_string()).unwrap_or_default(),
            ips: p.config().ips.clone(),
            layers: p.layers().iter().map(layer_dump).collect(),
            rx_packets: p.counters.rx_packets,
            tx_packets: p.counters.tx_packets,
            drops: p.counters.total_drops(),
        })
        .collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    let mut snat_pools: Vec<SnatPoolDump> = c
        .pools
        .iter()
        .filter_map(|(ip, id)| c.switch().snat_pool(*id).map(|p| (ip, p)))
        .map(|(ip, p)| SnatPoolDump {
            address: Some(*ip),
            size: p.size() as u64,
            busiest: CLASSES
                .iter()
                .map(|(class, name)| (name.to_string(), p.usage(*class).busiest as u64))
                .collect(),
        })
        .collect();
    snat_pools.sort_by_key(|p| p.address);
    let mut neighbors: Vec<(IpAddr, String)> = neighbors
        .iter()
        .filter_map(|ip| facts.resolver.mac_of(*ip).map(|m| (*ip, m.to_string())))
        .collect();
    neighbors.sort();
    neighbors.dedup();
    SwitchDump {
        node: facts.name.clone(),
        facts: SwitchFacts {
            profile: facts.profile.as_str().to_string(),
            host_mac: facts.host_mac.to_string(),
            addresses: facts.addresses.clone(),
            uplink: facts.uplink.clone(),
            routes: facts
                .routes
                .iter()
                .map(|r| RouteFact {
                    destination: r.destination,
                    next_hop: r.next_hop,
                })
                .collect(),
            neighbors,
            dynamic_ports: facts.dynamic_ports,
        },
        ports,
        snat_pools,
        notices: c
            .notices()
            .into_iter()
            .map(|n| NoticeDump {
                owner: n.owner,
                message: n.message,
            })
            .collect(),
        placed: placed(c),
    }
}

/// A layer with its rules, each with its ID and group.
pub(crate) fn layer_dump(l: &vfp::Layer) -> LayerDump {
    LayerDump {
        name: l.name().to_string(),
        rules: l
            .groups()
            .iter()
            .flat_map(|g| g.rules().map(move |r| (g.name(), r)))
            .map(|(group, r)| rule_dump(group, r))
            .collect(),
    }
}

fn rule_dump(group: &str, r: &vfp::rule::StoredRule) -> RuleDump {
    let ports = |list: &Option<Vec<vfp::PortRange>>| -> Vec<String> {
        list.iter()
            .flatten()
            .map(|p| match p.single() {
                Some(one) => one.to_string(),
                None => format!("{}-{}", p.first, p.last),
            })
            .collect()
    };
    let c = &r.rule.conditions;
    RuleDump {
        id: rule_id(&r.origin.owner.kind, &r.origin.owner.id, r.index),
        group: group.to_string(),
        owner_kind: r.origin.owner.kind.clone(),
        owner_id: r.origin.owner.id.clone(),
        source: r.origin.source.clone(),
        priority: u32::from(r.rule.priority),
        destinations: c.dst.clone().unwrap_or_default(),
        destination_ports: ports(&c.dst_ports),
        action: r.rule.action.to_string(),
        hits: r.hits,
        name: r.origin.name.clone(),
        direction: c.direction.map(|d| match d {
            vfp::Direction::In => "In".to_string(),
            vfp::Direction::Out => "Out".to_string(),
        }),
        protocols: c.protocols.clone().unwrap_or_default(),
        sources: c.src.clone().unwrap_or_default(),
        source_ports: ports(&c.src_ports),
    }
}

/// How many rules each owner was given on each port and layer: every object's placements, on
/// the ports they were installed on.
fn placed(c: &Compiler) -> Vec<PlacedDump> {
    let mut out: Vec<PlacedDump> = Vec::new();
    for compiled in c.objects.values() {
        for (port, layer, owner) in &compiled.installed {
            let Some(place) = c.places.get(port) else {
                continue;
            };
            let rules: usize = compiled
                .placements
                .iter()
                .filter(|p| p.layer == *layer && p.origin.owner == *owner)
                .filter(|p| p.target.reaches(place))
                .map(|p| p.rules.len())
                .sum();
            out.push(PlacedDump {
                port: *port,
                layer: layer.to_string(),
                owner_kind: owner.kind.clone(),
                owner_id: owner.id.clone(),
                rules: rules as u64,
            });
        }
    }
    out.sort_by(|a, b| {
        (a.port, &a.layer, &a.owner_kind, &a.owner_id).cmp(&(
            b.port,
            &b.layer,
            &b.owner_kind,
            &b.owner_id,
        ))
    });
    out.dedup();
    out
}
