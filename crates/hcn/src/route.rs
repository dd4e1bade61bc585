//! HostComputeRoute: an SDN route applied to a set of endpoints.

use serde::{Deserialize, Serialize};

use crate::policy::SdnRoutePolicySetting;
use crate::types::{Guid, SchemaVersion};

/// An SDN route (HostComputeRoute). The SDN PowerShell module sends the list as `Routes`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SdnRoute {
    #[serde(rename = "ID", skip_serializing_if = "Guid::is_nil")]
    pub id: Guid,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_compute_endpoints: Vec<Guid>,
    #[serde(alias = "Routes", skip_serializing_if = "Vec::is_empty")]
    pub setting: Vec<SdnRoutePolicySetting>,
    pub schema_version: SchemaVersion,
}
