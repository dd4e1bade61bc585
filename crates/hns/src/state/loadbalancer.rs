//! Load balancer rules: backends must exist, the profile's backend limit, one owner per
//! frontend, and the features of the profile's HNS version.

use hcn::error::{HResult, HnsError};
use hcn::loadbalancer::{LoadBalancerDistribution, LoadBalancerFlags};
use hcn::{Guid, LoadBalancer};

use super::{Change, Kind, Object, Plan, State, frontends};

impl State {
    pub(super) fn plan_create_load_balancer(&self, mut lb: LoadBalancer) -> Result<Plan, HnsError> {
        lb.id = self.new_id(Kind::LoadBalancer, lb.id)?;
        self.check_load_balancer(&lb)?;
        let obj = Object::LoadBalancer(lb);
        Ok(Plan {
            changes: vec![Change::Put(obj.clone())],
            result: Some(obj),
        })
    }

    pub(super) fn plan_update_load_balancer(
        &self,
        id: Guid,
        mut lb: LoadBalancer,
    ) -> Result<Plan, HnsError> {
        // Where hnslib does not let a client modify (HNS 15.4 included, whose modify leaves a
        // mismatched state), refuse as older HNS does, rather than reproduce that state.
        if !self.profile.features().modify_loadbalancer {
            let v = self.profile.version();
            return Err(HnsError::new(
                HResult::E_NOTIMPL,
                format!(
                    "HcnModifyLoadBalancer needs HNS 15.5 to 15.x or 16.0 and later (HNS 15.4's modify leaves state that does not match, kubernetes#131466); profile {} is HNS {}.{}; delete and create instead",
                    self.profile, v.major, v.minor
                ),
            ));
        }
        if !self.load_balancers.contains_key(&id) {
            return Err(Kind::LoadBalancer.not_found(&id));
        }
        if !lb.id.is_nil() && lb.id != id {
            return Err(HnsError::new(
                HResult::E_INVALIDARG,
                format!("ID: the body names {} but the path names {id}", lb.id),
            ));
        }
        lb.id = id;
        self.check_load_balancer(&lb)?;
        let obj = Object::LoadBalancer(lb);
        Ok(Plan {
            changes: vec![Change::Put(obj.clone())],
            result: Some(obj),
        })
    }

    pub(super) fn plan_delete_load_balancer(&self, id: Guid) -> Result<Plan, HnsError> {
        if !self.load_balancers.contains_key(&id) {
            return Err(Kind::LoadBalancer.not_found(&id));
        }
        Ok(Plan {
            changes: vec![Change::Delete(Kind::LoadBalancer, id)],
            result: None,
        })
    }

    fn check_load_balancer(&self, lb: &LoadBalancer) -> Result<(), HnsError> {
        let n = lb.host_compute_endpoints.len();
        let limit = self.profile.max_lb_backends();
        // HNS fails to build the VFP rule for 0 backends (kubernetes#106936) and above its
        // limit (kubernetes#98680), with the same message.
        if n == 0 || limit.is_some_and(|max| n > max) {
            return Err(HnsError::new(
                HResult::E_INVALIDARG,
                format!(
                    "Unable to initialize VFP LB rule: invalid number of destinations. (HostComputeEndpoints has {n}; profile {} allows 1 to {})",
                    self.profile,
                    limit.map_or("any number".to_string(), |m| m.to_string())
                ),
            ));
        }
        for (i, ep) in lb.host_compute_endpoints.iter().enumerate() {
            if !self.endpoints.contains_key(ep) {
                return Err(HnsError::new(
                    HResult::HCN_E_ENDPOINT_NOT_FOUND,
                    format!("HostComputeEndpoints[{i}]: no endpoint with ID {ep}"),
                ));
            }
        }
        self.check_lb_features(lb)?;
        for f in frontends(lb) {
            if let Some(owner) = self.frontends.get(&f).filter(|owner| **owner != lb.id) {
                let vip = match (f.vip, f.ipv6) {
                    (Some(v), _) => v.to_string(),
                    (None, false) => "every IPv4 node address".to_string(),
                    (None, true) => "every IPv6 node address".to_string(),
                };
                return Err(HnsError::new(
                    HResult::HCN_E_PORT_ALREADY_EXISTS,
                    format!(
                        "{vip} protocol {} port {} is already load balanced by {owner}",
                        f.protocol, f.port
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses what the profile's HNS version does not have, as that HNS would.
    fn check_lb_features(&self, lb: &LoadBalancer) -> Result<(), HnsError> {
        let features = self.profile.features();
        let version = self.profile.version();
        let refuse = |what: &str| {
            HnsError::new(
                HResult::E_INVALIDARG,
                format!(
                    "{what} is not supported by HNS {}.{} (profile {})",
                    version.major, version.minor, self.profile
                ),
            )
        };
        if lb.is_dsr() && !features.dsr {
            return Err(refuse("Flags: DSR (1)"));
        }
        let v6 =
            lb.flags & LoadBalancerFlags::IPV6 != 0 || lb.frontend_vips.iter().any(|v| v.is_ipv6());
        if v6 && !features.ipv6_dual_stack {
            return Err(refuse("IPv6 load balancing"));
        }
        if lb
            .port_mappings
            .iter()
            .any(|pm| pm.distribution_type != LoadBalancerDistribution::NONE)
            && !features.session_affinity
        {
            return Err(refuse("PortMappings[].DistributionType (session affinity)"));
        }
        Ok(())
    }
}
