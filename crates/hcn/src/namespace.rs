//! HostComputeNamespace: a network compartment (a Linux network namespace here) and the
//! endpoints attached to it.

use serde::{Deserialize, Serialize};

use crate::serde_util::{is_default, string_enum};
use crate::types::{Guid, SchemaVersion};

string_enum! {
    /// Kind of namespace.
    NamespaceType { Host = "Host", HostDefault = "HostDefault", Guest = "Guest", GuestDefault = "GuestDefault" }
}

string_enum! {
    /// Kind of resource in a namespace.
    NamespaceResourceType { Container = "Container", Endpoint = "Endpoint" }
}

/// A namespace (HostComputeNamespace).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Namespace {
    #[serde(rename = "ID", skip_serializing_if = "Guid::is_nil")]
    pub id: Guid,
    #[serde(skip_serializing_if = "is_default")]
    pub namespace_id: u32,
    #[serde(rename = "Type", skip_serializing_if = "Option::is_none")]
    pub namespace_type: Option<NamespaceType>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<NamespaceResource>,
    pub schema_version: SchemaVersion,
    /// winnet: the Linux network namespace this compartment is (a path like
    /// `/var/run/netns/pod1`). Empty on create means "make one".
    #[serde(skip_serializing_if = "String::is_empty")]
    pub linux_netns: String,
}

impl Namespace {
    /// IDs of the endpoints attached to this namespace.
    pub fn endpoint_ids(&self) -> impl Iterator<Item = Guid> + '_ {
        self.resources.iter().filter_map(|r| match r.resource_type {
            NamespaceResourceType::Endpoint => r.data.id,
            NamespaceResourceType::Container => None,
        })
    }
}

/// One resource in a namespace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NamespaceResource {
    #[serde(rename = "Type")]
    pub resource_type: NamespaceResourceType,
    #[serde(default)]
    pub data: NamespaceResourceData,
}

/// The `Data` of a namespace resource: `{"ID": "<guid>"}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NamespaceResourceData {
    #[serde(rename = "ID", default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Guid>,
}
