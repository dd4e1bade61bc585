//! The request of `POST /trace` (what the switch of a node does with the first packet of a
//! connection) and its [`answer`], read and written here so that hnsd and its clients agree on
//! them.

pub mod answer;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use hcn::error::{HResult, HnsError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

use crate::request::invalid;

pub use answer::TraceAnswer;

/// The HRESULT of a trace asked of an hnsd without a data plane
/// (`HRESULT_FROM_WIN32(ERROR_SERVICE_NOT_ACTIVE)`); the API answers it with 503.
pub const NO_DATAPLANE: HResult = HResult(0x8007_0426);

/// The transport of the traced connection's first packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TraceProtocol {
    /// A TCP SYN.
    #[default]
    Tcp,
    /// A UDP datagram.
    Udp,
    /// An ICMP (ICMPv6) echo request.
    Icmp,
}

impl TraceProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            TraceProtocol::Tcp => "tcp",
            TraceProtocol::Udp => "udp",
            TraceProtocol::Icmp => "icmp",
        }
    }

    /// True when the destination is an address and a port.
    pub fn has_ports(self) -> bool {
        self != TraceProtocol::Icmp
    }
}

impl fmt::Display for TraceProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TraceProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        [TraceProtocol::Tcp, TraceProtocol::Udp, TraceProtocol::Icmp]
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!("\"{s}\" is not a protocol a trace can send; use tcp, udp or icmp")
            })
    }
}

/// A connection to trace: from a local endpoint (by name or ID), an address of the node, or
/// any other address (which arrives on the uplink), to an address and, for TCP and UDP, a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRequest {
    /// An endpoint name, an endpoint ID, or an IP address.
    pub from: String,
    /// The destination address.
    pub to: IpAddr,
    /// The destination port; `None` for ICMP.
    pub port: Option<u16>,
    pub protocol: TraceProtocol,
}

impl TraceRequest {
    /// A request from its three fields as a user writes them; an error names the field.
    pub fn new(from: &str, to: &str, protocol: TraceProtocol) -> Result<TraceRequest, HnsError> {
        let from = from.trim();
        if from.is_empty() {
            return Err(invalid(
                "From",
                "is empty; give an endpoint name, an endpoint ID or an IP address",
            ));
        }
        let (to, port) = parse_destination(to, protocol).map_err(|m| invalid("To", &m))?;
        Ok(TraceRequest {
            from: from.to_string(),
            to,
            port,
            protocol,
        })
    }

    /// Reads the body of `POST /trace`: `{"From": ..., "To": ..., "Protocol": ...}`, keys in
    /// any case, `Protocol` tcp when absent.
    pub fn from_json(body: &[u8]) -> Result<TraceRequest, HnsError> {
        let [from, to, protocol] =
            crate::request::string_fields(body, "trace request", ["From", "To", "Protocol"])?;
        let (from, to) = (from.as_deref(), to.as_deref());
        let protocol = match protocol {
            Some(p) => p.parse().map_err(|m: String| invalid("Protocol", &m))?,
            None => TraceProtocol::Tcp,
        };
        let from = from.ok_or_else(|| {
            invalid(
                "From",
                "is missing; give an endpoint name, an endpoint ID or an IP address",
            )
        })?;
        let to = to.ok_or_else(|| {
            invalid(
                "To",
                "is missing; give IP:PORT (tcp, udp) or IP (icmp), e.g. 10.96.0.10:80",
            )
        })?;
        TraceRequest::new(from, to, protocol)
    }

    /// The body of `POST /trace` for this request.
    pub fn to_json(&self) -> Value {
        json!({
            "From": self.from,
            "To": self.destination(),
            "Protocol": self.protocol.as_str(),
        })
    }

    /// The destination as written in the request: `IP:PORT`, `[IPv6]:PORT` or `IP`.
    pub fn destination(&self) -> String {
        match self.port {
            Some(p) => SocketAddr::new(self.to, p).to_string(),
            None => self.to.to_string(),
        }
    }
}

/// The request as [`TraceRequest::to_json`] writes it: `From`, `To`, `Protocol`.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RequestBody<S> {
    from: S,
    to: S,
    protocol: Option<S>,
}

impl Serialize for TraceRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let to = self.destination();
        RequestBody {
            from: self.from.as_str(),
            to: to.as_str(),
            protocol: Some(self.protocol.as_str()),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for TraceRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let b = RequestBody::<String>::deserialize(d)?;
        let protocol = match b.protocol {
            Some(p) => p.parse().map_err(serde::de::Error::custom)?,
            None => TraceProtocol::Tcp,
        };
        TraceRequest::new(&b.from, &b.to, protocol).map_err(|e| serde::de::Error::custom(e.detail))
    }
}

/// `To` for `protocol`: an address and a port for TCP and UDP, an address alone for ICMP.
fn parse_destination(s: &str, protocol: TraceProtocol) -> Result<(IpAddr, Option<u16>), String> {
    let s = s.trim();
    if let Ok(a) = s.parse::<SocketAddr>() {
        if !protocol.has_ports() {
            return Err(format!(
                "\"{s}\" has a port, but {protocol} has none; give the address alone, e.g. {}",
                a.ip()
            ));
        }
        if a.port() == 0 {
            return Err(format!(
                "\"{s}\" has port 0; give the port the service listens on"
            ));
        }
        return Ok((a.ip(), Some(a.port())));
    }
    let bare = s.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) if protocol.has_ports() => Err(format!(
            "\"{s}\" has no port; {protocol} needs IP:PORT, e.g. {}",
            SocketAddr::new(ip, 80)
        )),
        Ok(ip) => Ok((ip, None)),
        Err(_) => Err(format!(
            "\"{s}\" is not an address; give IP:PORT (tcp, udp) or IP (icmp), e.g. 10.96.0.10:80 or [fd00::10]:80"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(body: Value) -> Result<TraceRequest, HnsError> {
        TraceRequest::from_json(body.to_string().as_bytes())
    }

    #[test]
    fn keys_are_read_in_any_case_and_tcp_is_the_default() {
        let r = req(json!({"from": "pa", "TO": "10.96.0.10:80"})).unwrap();
        assert_eq!(r.protocol, TraceProtocol::Tcp);
        assert_eq!(r.to, "10.96.0.10".parse::<IpAddr>().unwrap());
        assert_eq!(r.port, Some(80));
        let r = req(json!({"From": "pa", "To": "10.200.0.1", "protocol": "ICMP"})).unwrap();
        assert_eq!((r.protocol, r.port), (TraceProtocol::Icmp, None));
        let r = req(json!({"From": "pa", "To": "[fd00::10]:53", "Protocol": "udp"})).unwrap();
        assert_eq!(r.destination(), "[fd00::10]:53");
        assert_eq!(req(r.to_json()).unwrap(), r);
    }

    #[test]
    fn each_bad_field_is_named() {
        let field = |body: Value| {
            let e = req(body).unwrap_err();
            assert_eq!(e.code.http_status(), 400, "{e}");
            e.detail
        };
        assert!(field(json!({"To": "10.0.0.1:80"})).starts_with("From:"));
        assert!(field(json!({"From": " ", "To": "10.0.0.1:80"})).starts_with("From:"));
        assert!(field(json!({"From": "a"})).starts_with("To:"));
        assert!(field(json!({"From": "a", "To": "10.0.0.1"})).contains("needs IP:PORT"));
        assert!(
            field(json!({"From": "a", "To": "10.0.0.1:7", "Protocol": "icmp"}))
                .contains("give the address alone")
        );
        assert!(field(json!({"From": "a", "To": "web:80"})).starts_with("To:"));
        assert!(
            field(json!({"From": "a", "To": "10.0.0.1:80", "Protocol": "sctp"}))
                .starts_with("Protocol:")
        );
        assert!(field(json!({"From": "a", "To": "10.0.0.1:80", "Dest": "x"})).starts_with("Dest:"));
        assert!(field(json!({"From": 7, "To": "10.0.0.1:80"})).starts_with("From:"));
        let e = TraceRequest::from_json(b"not json").unwrap_err();
        assert_eq!(e.code, HResult::HCN_E_INVALID_JSON);
    }
}
