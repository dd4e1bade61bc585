//! HNS error records and the HRESULTs HNS answers with.

use serde::{Deserialize, Serialize};

/// An HRESULT as HNS returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HResult(pub u32);

impl HResult {
    pub const E_NOTIMPL: HResult = HResult(0x8000_4001);
    /// Unspecified failure: a fault inside hnsd, not the caller's input.
    pub const E_FAIL: HResult = HResult(0x8000_4005);
    pub const E_INVALIDARG: HResult = HResult(0x8007_0057);
    pub const ERROR_NOT_FOUND: HResult = HResult(0x8007_0490);
    pub const E_OUTOFMEMORY: HResult = HResult(0x8007_000E);
    /// "Cannot create a file when that file already exists": an ID already in use.
    pub const ERROR_ALREADY_EXISTS: HResult = HResult(0x8007_00B7);
    pub const HCN_E_NETWORK_NOT_FOUND: HResult = HResult(0x803B_0001);
    pub const HCN_E_ENDPOINT_NOT_FOUND: HResult = HResult(0x803B_0002);
    pub const HCN_E_SUBNET_NOT_FOUND: HResult = HResult(0x803B_0005);
    pub const HCN_E_ADAPTER_NOT_FOUND: HResult = HResult(0x803B_0006);
    pub const HCN_E_POLICY_NOT_FOUND: HResult = HResult(0x803B_0008);
    pub const HCN_E_INVALID_NETWORK: HResult = HResult(0x803B_000A);
    pub const HCN_E_INVALID_NETWORK_TYPE: HResult = HResult(0x803B_000B);
    pub const HCN_E_INVALID_ENDPOINT: HResult = HResult(0x803B_000C);
    pub const HCN_E_INVALID_POLICY: HResult = HResult(0x803B_000D);
    pub const HCN_E_INVALID_POLICY_TYPE: HResult = HResult(0x803B_000E);
    pub const HCN_E_INVALID_REMOTE_ENDPOINT_OPERATION: HResult = HResult(0x803B_000F);
    pub const HCN_E_NETWORK_ALREADY_EXISTS: HResult = HResult(0x803B_0010);
    pub const HCN_E_POLICY_ALREADY_EXISTS: HResult = HResult(0x803B_0012);
    pub const HCN_E_PORT_ALREADY_EXISTS: HResult = HResult(0x803B_0013);
    pub const HCN_E_ENDPOINT_ALREADY_ATTACHED: HResult = HResult(0x803B_0014);
    pub const HCN_E_REQUEST_UNSUPPORTED: HResult = HResult(0x803B_0015);
    pub const HCN_E_INVALID_JSON: HResult = HResult(0x803B_001B);
    pub const HCN_E_INVALID_IP: HResult = HResult(0x803B_001E);
    pub const HCN_E_MANAGER_STOPPED: HResult = HResult(0x803B_0020);
    pub const HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS: HResult = HResult(0x803B_002B);
    pub const HCN_E_ENTITY_HAS_REFERENCES: HResult = HResult(0x803B_002C);
    pub const HCN_E_INVALID_INTERNAL_PORT: HResult = HResult(0x803B_002D);
    pub const HCN_E_ADDR_INVALID_OR_RESERVED: HResult = HResult(0x803B_002F);
    pub const HCN_E_INVALID_PREFIX: HResult = HResult(0x803B_0030);
    pub const HCN_E_INVALID_SUBNET: HResult = HResult(0x803B_0032);
    pub const HCN_E_ENDPOINT_NOT_ATTACHED: HResult = HResult(0x803B_0034);
    /// Not an HNS code: the namespace was not found (HNS reports ERROR_NOT_FOUND).
    pub const NAMESPACE_NOT_FOUND: HResult = HResult(0x8007_0490);

    /// True for the "not found" family of codes.
    pub fn is_not_found(self) -> bool {
        matches!(
            self,
            HResult::ERROR_NOT_FOUND
                | HResult::HCN_E_NETWORK_NOT_FOUND
                | HResult::HCN_E_ENDPOINT_NOT_FOUND
                | HResult::HCN_E_SUBNET_NOT_FOUND
                | HResult::HCN_E_POLICY_NOT_FOUND
        )
    }

    /// The HTTP status hnsd answers with for this code.
    pub fn http_status(self) -> u16 {
        match self {
            c if c.is_not_found() => 404,
            HResult::HCN_E_PORT_ALREADY_EXISTS
            | HResult::ERROR_ALREADY_EXISTS
            | HResult::HCN_E_NETWORK_ALREADY_EXISTS
            | HResult::HCN_E_POLICY_ALREADY_EXISTS
            | HResult::HCN_E_ENDPOINT_ALREADY_ATTACHED
            | HResult::HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS
            | HResult::HCN_E_ENTITY_HAS_REFERENCES
            | HResult::HCN_E_ADDR_INVALID_OR_RESERVED => 409,
            HResult::E_NOTIMPL | HResult::HCN_E_REQUEST_UNSUPPORTED => 501,
            HResult::HCN_E_MANAGER_STOPPED | HResult::E_OUTOFMEMORY => 503,
            HResult::E_FAIL => 500,
            _ => 400,
        }
    }

    /// The text Windows gives for this code, which HNS puts first in `Error`.
    pub fn text(self) -> &'static str {
        match self {
            HResult::E_NOTIMPL => "Not implemented.",
            HResult::E_FAIL => "Unspecified error.",
            HResult::E_INVALIDARG => "The parameter is incorrect.",
            HResult::ERROR_NOT_FOUND => "Element not found.",
            HResult::E_OUTOFMEMORY => "Not enough memory resources are available.",
            HResult::ERROR_ALREADY_EXISTS => "Cannot create a file when that file already exists.",
            HResult::HCN_E_NETWORK_NOT_FOUND => "The network was not found.",
            HResult::HCN_E_ENDPOINT_NOT_FOUND => "The endpoint was not found.",
            HResult::HCN_E_SUBNET_NOT_FOUND => {
                "The network does not have a subnet for this endpoint."
            }
            HResult::HCN_E_ADAPTER_NOT_FOUND => "An adapter was not found.",
            HResult::HCN_E_POLICY_NOT_FOUND => "An expected policy was not found.",
            HResult::HCN_E_INVALID_NETWORK => {
                "The provided network configuration is invalid or missing parameters."
            }
            HResult::HCN_E_INVALID_NETWORK_TYPE => "Invalid network type.",
            HResult::HCN_E_INVALID_ENDPOINT => {
                "The provided endpoint configuration is invalid or missing parameters."
            }
            HResult::HCN_E_INVALID_POLICY => {
                "The provided policy configuration is invalid or missing parameters."
            }
            HResult::HCN_E_INVALID_POLICY_TYPE => "Invalid policy type.",
            HResult::HCN_E_INVALID_REMOTE_ENDPOINT_OPERATION => {
                "This requested operation is invalid for a remote endpoint."
            }
            HResult::HCN_E_NETWORK_ALREADY_EXISTS => "A network with this name already exists.",
            HResult::HCN_E_POLICY_ALREADY_EXISTS => {
                "Policy information already exists on this object."
            }
            HResult::HCN_E_PORT_ALREADY_EXISTS => "The specified port already exists.",
            HResult::HCN_E_ENDPOINT_ALREADY_ATTACHED => {
                "This endpoint is already attached to the switch."
            }
            HResult::HCN_E_REQUEST_UNSUPPORTED => "The specified request is unsupported.",
            HResult::HCN_E_INVALID_JSON => "Invalid JSON document string.",
            HResult::HCN_E_INVALID_IP => {
                "IP address is either invalid or not part of any configured subnet(s)."
            }
            HResult::HCN_E_MANAGER_STOPPED => {
                "Operation cannot be performed while service is stopping."
            }
            HResult::HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS => {
                "This requested operation is invalid as endpoint is already part of a network namespace."
            }
            HResult::HCN_E_ENTITY_HAS_REFERENCES => {
                "The specified entity cannot be removed while it still has references."
            }
            HResult::HCN_E_INVALID_INTERNAL_PORT => {
                "The internal port must exist and cannot be zero."
            }
            HResult::HCN_E_ADDR_INVALID_OR_RESERVED => {
                "An address provided is invalid or reserved."
            }
            HResult::HCN_E_INVALID_PREFIX => "The prefix provided is invalid.",
            HResult::HCN_E_INVALID_SUBNET => {
                "The provided subnet configuration is invalid or missing parameters."
            }
            HResult::HCN_E_ENDPOINT_NOT_ATTACHED => {
                "The endpoint must be attached to complete the operation."
            }
            _ => "The operation failed.",
        }
    }
}

impl std::fmt::Display for HResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{:08X}", self.0)
    }
}

/// An HNS failure: the code and a message that names the field and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} ({code}) {detail}", code.text())]
pub struct HnsError {
    pub code: HResult,
    pub detail: String,
}

impl HnsError {
    pub fn new(code: HResult, detail: impl Into<String>) -> Self {
        HnsError {
            code,
            detail: detail.into(),
        }
    }

    /// The error record HNS returns alongside the HRESULT.
    pub fn record(&self) -> ErrorRecord {
        ErrorRecord {
            success: false,
            error: format!("{} {}", self.code.text(), self.detail)
                .trim()
                .to_string(),
            error_code: self.code.0,
        }
    }
}

/// HNS's error record: `{"Success":false,"Error":"...","ErrorCode":<HRESULT>}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ErrorRecord {
    pub success: bool,
    #[serde(default)]
    pub error: String,
    #[serde(default)]
    pub error_code: u32,
}
