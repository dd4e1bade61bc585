//! What a pod's IP stack is configured with, from its endpoint: the addresses its vNIC gets
//! and its routes via gateways. The data plane configures the pod's TAP so; a trace routes the
//! pod's packets by the same.

use std::collections::BTreeMap;
use std::net::IpAddr;

use hcn::Endpoint;
use hns::state::State;
use ipnet::IpNet;

/// The pod's addresses with their prefixes, as its vNIC gets them.
pub fn addresses(state: &State, ep: &Endpoint) -> Vec<IpNet> {
    let net = state.network(ep.host_compute_network);
    ep.ip_configurations
        .iter()
        .filter_map(|cfg| {
            let ip = cfg.ip_address?;
            let len = match cfg.prefix_length {
                0 => net?.subnet_for(ip)?.ip_address_prefix?.prefix_len(),
                n => n,
            };
            IpNet::new(ip, len).ok()
        })
        .collect()
}

/// The pod's routes: the endpoint's own, else those of the subnet its address is in.
pub fn routes(state: &State, ep: &Endpoint) -> Vec<(IpNet, IpAddr)> {
    let own: Vec<(IpNet, IpAddr)> = ep
        .routes
        .iter()
        .filter_map(|r| Some((r.destination_prefix?, r.next_hop?)))
        .collect();
    if !own.is_empty() {
        return own;
    }
    let Some(net) = state.network(ep.host_compute_network) else {
        return Vec::new();
    };
    let mut routes: BTreeMap<IpNet, IpAddr> = BTreeMap::new();
    for ip in ep.ips() {
        if let Some(s) = net.subnet_for(ip) {
            for r in &s.routes {
                if let (Some(d), Some(h)) = (r.destination_prefix, r.next_hop)
                    && d.addr().is_ipv4() == ip.is_ipv4()
                {
                    routes.insert(d, h);
                }
            }
        }
    }
    routes.into_iter().collect()
}
