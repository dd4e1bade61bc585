//! The data plane's answer to `GET /linux/switch`: the compiled switch as data
//! ([`hns_compiler::dump`]), taken under the data plane's lock.

use std::net::IpAddr;
use std::sync::Weak;

use hcn::policy::{EndpointPolicy, NetworkPolicy};
use hns::state::State;
use hns::trace::Inspector;
use hns_compiler::dump::switch_dump;

use crate::Shared;

/// The inspector the data plane registers with the service.
pub(crate) fn inspector(shared: Weak<Shared>) -> Inspector {
    Box::new(move || {
        crate::ask_switch(&shared, |state, _, c| {
            let mut asked = underlay_neighbors(state);
            asked.extend(c.facts().routes.iter().map(|r| r.next_hop));
            Ok(switch_dump(c, &asked))
        })
    })
}

/// The underlay addresses the compiler resolves besides next hops: remote provider addresses
/// (Overlay remote subnets, remote endpoints' ProviderAddress), so a replayed compiler can be
/// given the same answers.
fn underlay_neighbors(state: &State) -> Vec<IpAddr> {
    let mut out = Vec::new();
    for n in state.networks() {
        for p in &n.policies {
            if let NetworkPolicy::RemoteSubnetRoute(r) = p {
                out.push(r.provider_address);
            }
        }
    }
    for e in state.endpoints() {
        for p in &e.policies {
            if let EndpointPolicy::ProviderAddress(pa) = p {
                out.push(pa.provider_address);
            }
        }
    }
    out
}
