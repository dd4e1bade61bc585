//! The HNS v2 (HCN) object model as hcsshim and hnslib marshal it.
//!
//! Pure data, no I/O. Output is what hcsshim marshals (PascalCase keys, `ID`, empty values left
//! out, `Settings` as a nested object); input is matched case-insensitively and the v1 spellings
//! found in real CNI configs are normalised (see [`decode`]).

pub mod acl;
mod acl_check;
pub mod decode;
pub mod endpoint;
pub mod error;
pub mod features;
mod keys;
pub mod kind;
pub mod loadbalancer;
pub mod modify;
pub mod namespace;
pub mod network;
pub mod policy;
pub mod query;
pub mod route;
mod serde_util;
pub mod types;
mod v1;

pub use decode::{DecodeError, Validate, decode, decode_value};
pub use endpoint::{Endpoint, EndpointFlags, IpConfig};
pub use error::{ErrorRecord, HResult, HnsError};
pub use features::{SupportedFeatures, Version};
pub use kind::Kind;
pub use loadbalancer::{
    LoadBalancer, LoadBalancerDistribution, LoadBalancerFlags, LoadBalancerPortMapping,
    PortMappingFlags,
};
pub use modify::{ModifyRequest, RequestType, ResourceType};
pub use namespace::{Namespace, NamespaceResource, NamespaceResourceType, NamespaceType};
pub use network::{Ipam, MacPool, MacRange, Network, NetworkFlags, NetworkType, Route, Subnet};
pub use policy::{EndpointPolicy, NetworkPolicy, SubnetPolicy};
pub use query::Query;
pub use route::SdnRoute;
pub use types::{Dns, Guid, Health, MacAddress, Protocol, SchemaVersion};
