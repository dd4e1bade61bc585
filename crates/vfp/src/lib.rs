//! VFP-style packet engine: the data plane of winnet. Pure: no I/O, no async, no clock (time
//! is a parameter), deterministic.
//!
//! A [`Switch`] has ports ([`Port`]: pod vNIC, host vNIC, uplink); each port has ordered
//! [`Layer`]s (ACL, SLB, NAT, route/encap, MAC rewrite by default); a layer has groups of
//! prioritised [`Rule`]s with conditions and an [`Action`] (allow, block, MAC rewrite, DNAT,
//! SNAT from a pool, load balance, VXLAN encap/decap). The first packet of a connection runs
//! through the layers; the composite transposition is cached with its reverse in the
//! [`FlowTable`], so later packets of both directions take one lookup. [`Switch::trace`]
//! explains a packet layer by layer, naming the object ([`Origin`]) behind each rule.
//!
//! Programming (what a compiler from HNS objects calls):
//! `Switch::add_port`, `Switch::layer_mut(port, layer::SLB)?.set_rules(origin, rules)`,
//! `Layer::remove_owner`, `Switch::own_address`, `Switch::add_provider_address`,
//! `Switch::add_snat_pool`. Data path: `Switch::process(port, &mut frame, now)`.

pub mod action;
pub mod counters;
pub mod direction;
pub mod disposition;
pub mod encap;
pub mod error;
pub mod flow_table;
pub mod forwarding;
mod fragments;
pub mod frame;
pub mod headers;
pub mod layer;
pub mod lb;
pub mod nat;
mod neighbor;
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
