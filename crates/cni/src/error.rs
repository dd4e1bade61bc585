//! CNI error results: the spec's codes, a message that names the field, details for the curious.

use std::fmt;

use serde_json::{Map, Value, json};

/// A CNI error code (spec §"Error"): 0-99 are the spec's, 100 and up are this plugin's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Code(pub u32);

impl Code {
    /// The config's `cniVersion` is not one the plugin speaks, or the verb needs a later one.
    pub const INCOMPATIBLE_VERSION: Code = Code(1);
    /// A field the plugin does not support; the message names key and value.
    pub const UNSUPPORTED_FIELD: Code = Code(2);
    /// The container is unknown; the runtime need not clean up.
    pub const UNKNOWN_CONTAINER: Code = Code(3);
    /// A `CNI_*` environment variable is missing or invalid; the message names it.
    pub const INVALID_ENVIRONMENT: Code = Code(4);
    /// Reading or writing a file, or running a delegate, failed.
    pub const IO_FAILURE: Code = Code(5);
    /// stdin is not a JSON object, or a field has the wrong JSON type.
    pub const DECODING_FAILURE: Code = Code(6);
    /// The network configuration is wrong; the message names the key.
    pub const INVALID_NETWORK_CONFIG: Code = Code(7);
    /// `CNI_NETNS` does not name an existing namespace.
    pub const INVALID_NETNS: Code = Code(8);
    /// A transient condition (hnsd not answering yet, flanneld not started): retry later.
    pub const TRY_AGAIN_LATER: Code = Code(11);
    /// STATUS: the plugin cannot serve ADD.
    pub const NOT_AVAILABLE: Code = Code(50);
    /// STATUS: not available, and existing containers may have limited connectivity.
    pub const LIMITED_CONNECTIVITY: Code = Code(51);
    /// CHECK: what HNS holds differs from the ADD result or the config.
    pub const CHECK_FAILED: Code = Code(100);
    /// hnsd refused a call; the message carries its HRESULT and text.
    pub const HNS_REFUSED: Code = Code(101);
    /// hnsd took the endpoint, but the pod's vNIC is not up in the pod's namespace.
    pub const VNIC_NOT_READY: Code = Code(102);
    /// A fault of this plugin, not of its input.
    pub const INTERNAL: Code = Code(999);
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A failed CNI call, printed as the spec's error object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{msg} (CNI code {code}){}", if details.is_empty() { String::new() } else { format!(": {details}") })]
pub struct CniError {
    pub code: Code,
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: Code, msg: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// Adds details (the text of an underlying error, the value that was refused).
    pub fn details(mut self, details: impl Into<String>) -> CniError {
        self.details = details.into();
        self
    }

    /// Code 7 for `field`: "`field`: problem".
    pub fn config(field: &str, problem: impl fmt::Display) -> CniError {
        CniError::new(Code::INVALID_NETWORK_CONFIG, format!("{field}: {problem}"))
    }

    /// Code 6 for `field` of the wrong JSON type.
    pub fn decode(field: &str, problem: impl fmt::Display) -> CniError {
        CniError::new(Code::DECODING_FAILURE, format!("{field}: {problem}"))
    }

    /// Code 5 for a file operation on `path`.
    pub fn io(what: &str, path: &std::path::Path, e: std::io::Error) -> CniError {
        CniError::new(
            Code::IO_FAILURE,
            format!("cannot {what} {}: {e}", path.display()),
        )
    }

    /// Code 999: a bug or an impossible state.
    pub fn internal(msg: impl Into<String>) -> CniError {
        CniError::new(Code::INTERNAL, msg)
    }

    /// Puts `context` in front of the message ("IPAM ADD: ...").
    pub fn context(mut self, context: &str) -> CniError {
        self.msg = format!("{context}: {}", self.msg);
        self
    }

    /// The error object as the spec prints it; `cniVersion` is the config's, when known.
    pub fn to_json(&self, cni_version: Option<&str>) -> Value {
        let mut m = Map::new();
        if let Some(v) = cni_version {
            m.insert("cniVersion".into(), json!(v));
        }
        m.insert("code".into(), json!(self.code.0));
        m.insert("msg".into(), json!(self.msg));
        if !self.details.is_empty() {
            m.insert("details".into(), json!(self.details));
        }
        Value::Object(m)
    }

    /// Reads an error object another plugin printed.
    pub fn from_json(v: &Value) -> Option<CniError> {
        let code = v.get("code")?.as_u64()?;
        let msg = v.get("msg").and_then(Value::as_str).unwrap_or_default();
        let details = v.get("details").and_then(Value::as_str).unwrap_or_default();
        Some(CniError {
            code: Code(u32::try_from(code).unwrap_or(u32::MAX)),
            msg: msg.to_string(),
            details: details.to_string(),
        })
    }
}

impl From<hns_client::ClientError> for CniError {
    /// hnsd not answering is transient (code 11); an HNS refusal keeps its HRESULT in the text.
    fn from(e: hns_client::ClientError) -> CniError {
        match &e {
            hns_client::ClientError::Connect { .. } => {
                CniError::new(Code::TRY_AGAIN_LATER, e.to_string())
            }
            hns_client::ClientError::Hns { .. } => CniError::new(Code::HNS_REFUSED, e.to_string()),
            hns_client::ClientError::Protocol(_) => CniError::internal(e.to_string()),
        }
    }
}

/// The `?`-friendly way to say what was being done when hnsd failed.
pub trait HnsContext<T> {
    fn hns(self, what: &str) -> Result<T, CniError>;
}

impl<T> HnsContext<T> for Result<T, hns_client::ClientError> {
    fn hns(self, what: &str) -> Result<T, CniError> {
        self.map_err(|e| CniError::from(e).context(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_the_spec_shape() {
        let e = CniError::new(Code::INVALID_NETWORK_CONFIG, "name: missing").details("x");
        assert_eq!(
            e.to_json(Some("1.1.0")),
            json!({"cniVersion": "1.1.0", "code": 7, "msg": "name: missing", "details": "x"})
        );
        assert_eq!(
            CniError::new(Code(4), "m").to_json(None),
            json!({"code": 4, "msg": "m"})
        );
    }

    #[test]
    fn reads_what_another_plugin_printed() {
        let e = CniError::from_json(
            &json!({"code": 1, "msg": "incompatible CNI versions", "details": "d"}),
        )
        .unwrap();
        assert_eq!(e.code, Code::INCOMPATIBLE_VERSION);
        assert_eq!(e.details, "d");
        assert!(CniError::from_json(&json!({"ips": []})).is_none());
    }
}
