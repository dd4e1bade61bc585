//! VFP-style packet engine: the data plane of winnet. Pure: no I/O, no async, no clock (time
//! is a parameter), deterministic for a given `SwitchConfig::seed`.
//!
//! # Model
//! A [`Switch`] has ports ([`Port`]: pod vNIC, host vNIC, uplink). Each port has ordered
//! [`Layer`]s (by default ACL, SLB, NAT, route/encap, MAC rewrite); a packet leaving a device
//! ([`Direction::Out`]) crosses its port's layers top-down, a packet delivered to a device
//! ([`Direction::In`]) bottom-up. A layer has groups of prioritised [`Rule`]s: conditions
//! ([`Conditions`]: direction, protocols, source/destination prefixes, port ranges, VNI) and an
//! [`Action`] (allow, block, MAC rewrite, DNAT, SNAT from a pool, load balance, VXLAN
//! encap/decap). Every rule carries the [`Origin`] (owner kind and id, and the Kubernetes
//! object) that made it.
//!
//! # Data path
//! The first packet of a connection runs through the ingress port's layers, forwarding (by
//! destination MAC, through gateway MACs by IP, by VNI and inner destination for VXLAN to a
//! provider address, else the uplink), and the egress port's layers. The composite
//! transposition is cached in the [`FlowTable`] under the forward and the reverse key, so later
//! packets of both directions take one lookup. Rule changes mark cached connections stale
//! (generation numbers per port and for the switch); they are re-evaluated when next seen,
//! keeping their backend and SNAT port where the rules still allow.
//!
//! # Programming API (what a compiler from HNS objects calls)
//! ```text
//! let mut sw = Switch::new(SwitchConfig::default());
//! let ep = sw.add_port(PortConfig::pod("ep-guid", mac, vec![ip]).on_vni(4096))?;
//! sw.layer_mut(ep, layer::SLB)?.set_rules(Origin::new("LoadBalancer", id).with_source(svc), rules);
//! sw.layer_mut(ep, layer::SLB)?.remove_owner(&Owner::new("LoadBalancer", id));
//! sw.own_address(gateway_ip, gateway_mac);      // ARP/ND answers, routing via the gateway MAC
//! sw.add_provider_address(pa);                   // VXLAN to this host
//! let pool = sw.add_snat_pool(host_ip, 49152, 65535);
//! let d = sw.process(port, &mut frame, now);     // Disposition: Deliver / Uplink / Reply / Flood / Drop(reason)
//! let t = sw.trace(port, &bytes, now);           // Trace: each layer's rule, origin, before/after
//! sw.expire(now);                                // idle timeouts
//! ```

pub mod action;
pub mod counters;
pub mod direction;
pub mod disposition;
pub mod encap;
pub mod error;
mod flow_index;
mod flow_record;
pub mod flow_table;
pub mod forwarding;
mod fragments;
pub mod frame;
pub mod headers;
pub mod layer;
pub mod lb;
pub mod nat;
mod neighbor;
pub mod packet;
mod parse;
mod pipeline;
pub mod port;
pub mod rule;
mod rule_index;
pub mod switch;
pub mod tcp_state;
pub mod time;
pub mod trace;
mod transform;
pub mod wire;

pub use action::Action;
pub use direction::Direction;
pub use disposition::{Disposition, DropReason};
pub use encap::Encap;
pub use error::ConfigError;
pub use flow_table::FlowTable;
pub use frame::Frame;
pub use headers::{FlowKey, Headers, PacketHeaders};
pub use layer::{DefaultAction, Layer};
pub use lb::{Backend, Distribution, LoadBalancer};
pub use nat::PoolId;
pub use port::{Port, PortConfig, PortId, PortKind};
pub use rule::{Conditions, Origin, Owner, PortRange, Rule};
pub use switch::{Switch, SwitchConfig, SwitchKind};
pub use time::Timestamp;
pub use trace::Trace;
