//! Who sends the traced packet: a local endpoint (its port and its pod's IP stack), the node
//! (the host vNICs and the host's routes), or a host beyond the uplink.

use std::net::IpAddr;

use hcn::error::{HResult, HnsError};
use hcn::{Endpoint, Guid};
use hns::state::State;
use hns::trace::TraceSource;
use hns_client::trace::answer::SenderKind;
use vfp::PortId;
use vfp::wire::MacAddr;

use super::stack::{Iface, Stack};
use super::{UNKNOWN_MAC, invalid};
use crate::{Compiler, pod};

/// Who sends the traced packet.
pub(super) struct Sender {
    pub(super) kind: SenderKind,
    /// How the answer names it.
    pub(super) name: String,
    pub(super) endpoint: Option<Guid>,
    pub(super) address: IpAddr,
    /// The port it enters by (for a sender with a stack, the one its route picks).
    pub(super) port: PortId,
    pub(super) mac: MacAddr,
    /// The sender's IP stack; `None` for a host beyond the uplink.
    pub(super) stack: Option<Stack>,
    /// How the source MAC of a packet from beyond the uplink was found.
    pub(super) mac_note: Option<String>,
}

impl Sender {
    pub(super) fn find(
        state: &State,
        c: &Compiler,
        source: TraceSource,
        to: IpAddr,
    ) -> Result<Sender, HnsError> {
        match source {
            TraceSource::Endpoint(id) => {
                let ep = state.endpoint(id).ok_or_else(|| {
                    HnsError::new(
                        HResult::HCN_E_ENDPOINT_NOT_FOUND,
                        format!("From: endpoint {id} is gone"),
                    )
                })?;
                let address = ep
                    .ips()
                    .find(|a| a.is_ipv4() == to.is_ipv4())
                    .ok_or_else(|| {
                        invalid(format!(
                            "From: endpoint {} has no {} address to reach {to} from",
                            name_of(ep),
                            if to.is_ipv4() { "IPv4" } else { "IPv6" }
                        ))
                    })?;
                Sender::endpoint(state, c, ep, address)
            }
            TraceSource::Address(ip) => {
                if ip.is_ipv4() != to.is_ipv4() {
                    return Err(invalid(format!(
                        "From: {ip} and To: {to} are of different IP families; give two IPv4 or two IPv6 addresses"
                    )));
                }
                let local = state.endpoints().find(|e| {
                    e.ips().any(|a| a == ip)
                        && c.endpoint_port(e.id)
                            .and_then(|p| c.switch().port(p))
                            .is_some_and(|p| p.kind() == vfp::PortKind::PodVnic)
                });
                if let Some(ep) = local {
                    return Sender::endpoint(state, c, ep, ip);
                }
                if is_node_address(c, ip) {
                    return Ok(Sender::node(c, format!("the node ({ip})"), ip, None));
                }
                Sender::external(c, ip)
            }
        }
    }

    pub(super) fn endpoint(
        state: &State,
        c: &Compiler,
        ep: &Endpoint,
        address: IpAddr,
    ) -> Result<Sender, HnsError> {
        let name = format!("endpoint {}", name_of(ep));
        if ep.is_remote() {
            return Err(HnsError::new(
                HResult::HCN_E_INVALID_REMOTE_ENDPOINT_OPERATION,
                format!(
                    "From: {name} is a remote endpoint (it lives on another node); trace from that node"
                ),
            ));
        }
        let port = c.endpoint_port(ep.id).and_then(|p| c.switch().port(p));
        let Some(port) = port else {
            return Err(invalid(format!(
                "From: {name} has no port on this node's switch (an endpoint without a MAC, or an address of the host); trace from its IP address instead"
            )));
        };
        if port.kind() == vfp::PortKind::HostVnic {
            // A host vNIC (flannel's cbr0_ep): its packets are the host's.
            return Ok(Sender::node(c, name, address, Some(ep.id)));
        }
        let mac = port.config().mac.unwrap_or(MacAddr::ZERO);
        let iface = Iface {
            port: port.id(),
            mac,
            prefixes: pod::addresses(state, ep),
        };
        Ok(Sender {
            kind: SenderKind::Endpoint,
            name,
            endpoint: Some(ep.id),
            address,
            port: port.id(),
            mac,
            stack: Some(Stack {
                ifaces: vec![iface],
                routes: pod::routes(state, ep),
            }),
            mac_note: None,
        })
    }

    pub(super) fn node(
        c: &Compiler,
        name: String,
        address: IpAddr,
        endpoint: Option<Guid>,
    ) -> Sender {
        let ifaces = c
            .host_interfaces()
            .into_iter()
            .map(|i| Iface {
                port: i.port,
                mac: i.mac,
                prefixes: i.addresses,
            })
            .collect();
        let routes = c
            .facts()
            .routes
            .iter()
            .map(|r| (r.destination, r.next_hop))
            .collect();
        Sender {
            kind: SenderKind::Node,
            name,
            endpoint,
            address,
            port: c.management_port(),
            mac: c.facts().host_mac,
            stack: Some(Stack { ifaces, routes }),
            mac_note: None,
        }
    }

    /// A host beyond the uplink: its frames arrive from its own MAC when it is on the node's
    /// segment, else from the router's.
    pub(super) fn external(c: &Compiler, ip: IpAddr) -> Result<Sender, HnsError> {
        let Some(uplink) = c.uplink_port() else {
            return Err(HnsError::new(
                HResult::ERROR_NOT_FOUND,
                format!(
                    "From: {ip} is neither a local endpoint's address nor the node's, and this node's switch has no uplink (no external network) for a packet from it to arrive on"
                ),
            ));
        };
        let facts = c.facts();
        let on_link = facts.addresses.iter().any(|n| n.trunc().contains(&ip));
        let (mac, mac_note) = if on_link {
            match facts.resolver.mac_of(ip) {
                Some(m) => (m, None),
                None => (
                    UNKNOWN_MAC,
                    Some(format!(
                        "{ip} is not in the host's neighbour table; its MAC is shown as {UNKNOWN_MAC}"
                    )),
                ),
            }
        } else {
            match facts
                .default_gateway(ip)
                .and_then(|g| facts.resolver.mac_of(g).map(|m| (g, m)))
            {
                Some((g, m)) => (
                    m,
                    Some(format!("from the router {g}, the node's default gateway")),
                ),
                None => (
                    UNKNOWN_MAC,
                    Some(format!(
                        "the router's MAC is not known; shown as {UNKNOWN_MAC}"
                    )),
                ),
            }
        };
        Ok(Sender {
            kind: SenderKind::External,
            name: format!("{ip}, beyond the uplink"),
            endpoint: None,
            address: ip,
            port: uplink,
            mac,
            stack: None,
            mac_note,
        })
    }
}

pub(super) fn name_of(ep: &Endpoint) -> String {
    if ep.name.is_empty() {
        ep.id.to_string()
    } else {
        format!("{} ({})", ep.name, ep.id)
    }
}

pub(super) fn is_node_address(c: &Compiler, ip: IpAddr) -> bool {
    c.facts().ips().any(|a| a == ip)
        || c.host_interfaces()
            .iter()
            .any(|i| i.addresses.iter().any(|n| n.addr() == ip))
}
