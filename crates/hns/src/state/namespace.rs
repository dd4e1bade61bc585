//! Namespace rules: endpoints attached and detached by modify requests, one namespace per
//! endpoint, local endpoints only, no delete while endpoints remain.

use hcn::error::{HResult, HnsError};
use hcn::modify::{ModifyRequest, NamespaceEndpointRequest};
use hcn::namespace::NamespaceResourceData;
use std::path::{Path, PathBuf};

use hcn::{Guid, Namespace, NamespaceResource, NamespaceResourceType, RequestType, ResourceType};

use super::{Change, Kind, Object, Plan, State, settings};

/// Where `ip netns` keeps named network namespaces.
pub const NETNS_DIR: &str = "/run/netns";
/// Prefix of the namespaces hnsd makes for HostComputeNamespaces created without one.
pub const NETNS_PREFIX: &str = "hcn-";

/// The Linux network namespace a HostComputeNamespace is: its `LinuxNetns`, or the one hnsd
/// makes for it (`/run/netns/hcn-<ID>`).
pub fn netns_path(ns: &Namespace) -> PathBuf {
    if ns.linux_netns.is_empty() {
        Path::new(NETNS_DIR).join(format!("{NETNS_PREFIX}{}", ns.id))
    } else {
        PathBuf::from(&ns.linux_netns)
    }
}

impl State {
    pub(super) fn plan_create_namespace(&self, mut ns: Namespace) -> Result<Plan, HnsError> {
        ns.id = self.new_id(Kind::Namespace, ns.id)?;
        if ns.endpoint_ids().next().is_some() {
            return Err(HnsError::new(
                HResult::E_INVALIDARG,
                "Resources: create the namespace without endpoints, then add each with a modify request (ResourceType Endpoint, RequestType Add)",
            ));
        }
        if ns.namespace_id == 0 {
            ns.namespace_id = self
                .namespaces
                .values()
                .map(|n| n.namespace_id)
                .max()
                .unwrap_or(1)
                + 1;
        }
        let obj = Object::Namespace(ns);
        Ok(Plan {
            changes: vec![Change::Put(obj.clone())],
            result: Some(obj),
        })
    }

    pub(super) fn plan_modify_namespace(
        &self,
        id: Guid,
        req: ModifyRequest,
    ) -> Result<Plan, HnsError> {
        let mut ns = self
            .namespaces
            .get(&id)
            .cloned()
            .ok_or_else(|| Kind::Namespace.not_found(&id))?;
        if req.resource_type != ResourceType::Endpoint {
            return Err(HnsError::new(
                HResult::HCN_E_REQUEST_UNSUPPORTED,
                format!(
                    "ResourceType {} cannot be modified on a namespace; use Endpoint",
                    req.resource_type
                ),
            ));
        }
        let NamespaceEndpointRequest { endpoint_id } = settings(&req)?;
        let mut ep = self
            .endpoints
            .get(&endpoint_id)
            .cloned()
            .ok_or_else(|| Kind::Endpoint.not_found(&endpoint_id))?;
        match req.request_type {
            RequestType::Add => {
                if ep.is_remote() {
                    return Err(HnsError::new(
                        HResult::HCN_E_INVALID_REMOTE_ENDPOINT_OPERATION,
                        format!("endpoint {endpoint_id} is remote and cannot join a namespace"),
                    ));
                }
                if !ep.host_compute_namespace.is_nil() {
                    return Err(HnsError::new(
                        HResult::HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS,
                        format!(
                            "endpoint {endpoint_id} is already in namespace {}",
                            ep.host_compute_namespace
                        ),
                    ));
                }
                ep.host_compute_namespace = id;
                ns.resources.push(NamespaceResource {
                    resource_type: NamespaceResourceType::Endpoint,
                    data: NamespaceResourceData {
                        id: Some(endpoint_id),
                    },
                });
            }
            RequestType::Remove => {
                if ep.host_compute_namespace != id {
                    return Err(HnsError::new(
                        HResult::HCN_E_ENDPOINT_NOT_ATTACHED,
                        format!("endpoint {endpoint_id} is not in namespace {id}"),
                    ));
                }
                ep.host_compute_namespace = Guid::default();
                ns.resources.retain(|r| r.data.id != Some(endpoint_id));
            }
            other => {
                return Err(HnsError::new(
                    HResult::HCN_E_REQUEST_UNSUPPORTED,
                    format!(
                        "RequestType {other} is not supported for namespace endpoints; use Add or Remove"
                    ),
                ));
            }
        }
        let result = Object::Namespace(ns);
        Ok(Plan {
            changes: vec![
                Change::Put(Object::Endpoint(ep)),
                Change::Put(result.clone()),
            ],
            result: Some(result),
        })
    }

    pub(super) fn plan_delete_namespace(&self, id: Guid) -> Result<Plan, HnsError> {
        let ns = self
            .namespaces
            .get(&id)
            .ok_or_else(|| Kind::Namespace.not_found(&id))?;
        let attached: Vec<String> = ns.endpoint_ids().map(|e| e.to_string()).collect();
        if !attached.is_empty() {
            return Err(HnsError::new(
                HResult::HCN_E_ENTITY_HAS_REFERENCES,
                format!(
                    "namespace {id} still holds endpoint(s) {}; remove them first",
                    attached.join(", ")
                ),
            ));
        }
        Ok(Plan {
            changes: vec![Change::Delete(Kind::Namespace, id)],
            result: None,
        })
    }
}
