//! `POST /trace`: what the switch of this node does with the first packet of a connection.
//! The request is read by [`hns_client::TraceRequest`], and `From` is resolved here against
//! hnsd's objects; the data plane answers it through a [`Tracer`] it registers with the
//! [`Service`], so the API does not depend on the data plane's types and an hnsd without one
//! says so.
//!
//! [`Service`]: crate::Service

use std::net::IpAddr;

use crate::state::State;
use hcn::Guid;
use hcn::error::{HResult, HnsError};

pub use hns_client::trace::{NO_DATAPLANE, TraceAnswer, TraceProtocol, TraceRequest};

/// Answers a trace request on the data plane: the structured trace, or why there is none.
pub type Tracer = Box<dyn Fn(&TraceRequest) -> Result<TraceAnswer, HnsError> + Send + Sync>;

/// Answers `GET /linux/switch` on the data plane: the compiled switch as data.
pub type Inspector =
    Box<dyn Fn() -> Result<hns_client::switch::SwitchDump, HnsError> + Send + Sync>;

/// Answers `POST /linux/switch/rules` on the data plane: an operator's hand edit of the live
/// switch (`winnet vfpctrl`), and the port's rules after it.
pub type Operator = Box<
    dyn Fn(&hns_client::switch::RuleEdit) -> Result<hns_client::switch::PortRules, HnsError>
        + Send
        + Sync,
>;

/// Where a traced packet comes from, as `From` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceSource {
    /// An endpoint, named by its ID or name.
    Endpoint(Guid),
    /// An address: a local endpoint's, the node's, or one beyond the uplink.
    Address(IpAddr),
}

impl TraceSource {
    /// Resolves `from` against the objects: an IP address as it is, else an endpoint by ID, by
    /// name, or by the name a CNI plugin gives it (`<name>_<network>`). Not found is an HNS
    /// not-found error naming what was looked for.
    pub fn resolve(state: &State, from: &str) -> Result<TraceSource, HnsError> {
        if let Ok(ip) = from.trim_start_matches('[').trim_end_matches(']').parse() {
            return Ok(TraceSource::Address(ip));
        }
        if let Ok(id) = from.parse::<Guid>() {
            return match state.endpoint(id) {
                Some(_) => Ok(TraceSource::Endpoint(id)),
                None => Err(HnsError::new(
                    HResult::HCN_E_ENDPOINT_NOT_FOUND,
                    format!(
                        "From: no endpoint has the ID {id}; list them with `winnet hns list endpoints`"
                    ),
                )),
            };
        }
        let exact: Vec<Guid> = state
            .endpoints()
            .filter(|e| e.name == from)
            .map(|e| e.id)
            .collect();
        let found: Vec<(Guid, String)> = if exact.is_empty() {
            let prefix = format!("{from}_");
            state
                .endpoints()
                .filter(|e| e.name.eq_ignore_ascii_case(from) || e.name.starts_with(&prefix))
                .map(|e| (e.id, e.name.clone()))
                .collect()
        } else {
            exact.iter().map(|id| (*id, from.to_string())).collect()
        };
        match found.as_slice() {
            [(id, _)] => Ok(TraceSource::Endpoint(*id)),
            [] => Err(HnsError::new(
                HResult::HCN_E_ENDPOINT_NOT_FOUND,
                format!(
                    "From: no endpoint is named \"{from}\"; give an endpoint name, an endpoint ID or an IP address (`winnet hns list endpoints` shows them)"
                ),
            )),
            many => Err(HnsError::new(
                HResult::E_INVALIDARG,
                format!(
                    "From: \"{from}\" names {} endpoints ({}); give one's ID or IP address",
                    many.len(),
                    many.iter()
                        .map(|(id, name)| format!("{name} {id}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }
}
