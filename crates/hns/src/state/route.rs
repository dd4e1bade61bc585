//! SDN route rules: the endpoints it applies to must exist.

use hcn::error::{HResult, HnsError};
use hcn::{Guid, SdnRoute};

use super::{Change, Kind, Object, Plan, State};

impl State {
    pub(super) fn plan_create_route(&self, mut route: SdnRoute) -> Result<Plan, HnsError> {
        route.id = self.new_id(Kind::Route, route.id)?;
        for (i, ep) in route.host_compute_endpoints.iter().enumerate() {
            if !self.endpoints.contains_key(ep) {
                return Err(HnsError::new(
                    HResult::HCN_E_ENDPOINT_NOT_FOUND,
                    format!("HostComputeEndpoints[{i}]: no endpoint with ID {ep}"),
                ));
            }
        }
        let obj = Object::Route(route);
        Ok(Plan {
            changes: vec![Change::Put(obj.clone())],
            result: Some(obj),
        })
    }

    pub(super) fn plan_delete_route(&self, id: Guid) -> Result<Plan, HnsError> {
        if !self.routes.contains_key(&id) {
            return Err(Kind::Route.not_found(&id));
        }
        Ok(Plan {
            changes: vec![Change::Delete(Kind::Route, id)],
            result: None,
        })
    }
}
