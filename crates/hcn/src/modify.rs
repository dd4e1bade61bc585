//! Modify requests (`HcnModify*`): `{ResourceType, RequestType, Settings}`.

use serde::{Deserialize, Serialize};

use crate::serde_util::string_enum;
use crate::types::Guid;

string_enum! {
    /// What a modify request changes.
    ResourceType {
        Policy = "Policy",
        Dns = "DNS",
        Extension = "Extension",
        Port = "Port",
        Endpoint = "Endpoint",
        Subnet = "Subnet",
        IpSubnet = "IPSubnet",
    }
}

string_enum! {
    /// How a modify request changes it.
    RequestType { Add = "Add", Remove = "Remove", Update = "Update", Refresh = "Refresh" }
}

/// A modify request. `Settings` is interpreted by the object and resource type it targets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ModifyRequest {
    pub resource_type: ResourceType,
    pub request_type: RequestType,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub settings: serde_json::Value,
}

/// `Settings` of a policy modify request: `{"Policies": [...]}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PolicyRequest<P> {
    #[serde(default = "Vec::new")]
    pub policies: Vec<P>,
}

/// `Settings` of a namespace modify request that adds or removes an endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NamespaceEndpointRequest {
    pub endpoint_id: Guid,
}
