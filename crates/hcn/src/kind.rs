//! The kinds of HNS object, as the API's paths and the store's tables name them.

use std::fmt;
use std::str::FromStr;

use crate::error::{HResult, HnsError};

/// The kinds of HNS object, named as in the API paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Network,
    Endpoint,
    Namespace,
    LoadBalancer,
    Route,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Network,
        Kind::Endpoint,
        Kind::Namespace,
        Kind::LoadBalancer,
        Kind::Route,
    ];

    /// The path segment and store table: `networks`, `endpoints`, ...
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Network => "networks",
            Kind::Endpoint => "endpoints",
            Kind::Namespace => "namespaces",
            Kind::LoadBalancer => "loadbalancers",
            Kind::Route => "routes",
        }
    }

    /// The HRESULT for "no such object" of this kind.
    pub fn not_found(self, id: &dyn fmt::Display) -> HnsError {
        let code = match self {
            Kind::Network => HResult::HCN_E_NETWORK_NOT_FOUND,
            Kind::Endpoint => HResult::HCN_E_ENDPOINT_NOT_FOUND,
            _ => HResult::ERROR_NOT_FOUND,
        };
        HnsError::new(code, format!("no {} with ID {id}", self.singular()))
    }

    pub fn singular(self) -> &'static str {
        match self {
            Kind::Network => "network",
            Kind::Endpoint => "endpoint",
            Kind::Namespace => "namespace",
            Kind::LoadBalancer => "load balancer",
            Kind::Route => "SDN route",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.plural())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        let s = s.to_ascii_lowercase();
        let s = s.trim_end_matches('s');
        Kind::ALL
            .into_iter()
            .find(|k| k.plural().trim_end_matches('s') == s || k.singular().replace(' ', "") == s)
            .ok_or_else(|| {
                format!("unknown kind \"{s}\"; use networks, endpoints, namespaces, loadbalancers or routes")
            })
    }
}
