//! The calls a NetworkPolicy agent makes: an endpoint's whole ACL list replaced in one
//! `Update` (HNS's Update replaces the endpoint's policy list, so the other policies are sent
//! again first, as Azure NPM does), network `SetPolicy` sets added plain before nested and
//! removed nested before plain, and Calico felix's v1 call, the endpoint document with its ACLs
//! posted to `/endpoints/{id}` (hcsshim `HNSEndpoint.ApplyACLPolicy`).

use hcn::policy::{AclPolicySetting, SetPolicySetting, SetPolicyType};
use hcn::{Endpoint, EndpointPolicy, Guid, Network, NetworkPolicy, RequestType};
use hyper::Method;

use crate::client::{Client, ClientError};

type Result<T> = std::result::Result<T, ClientError>;

/// The endpoint's `ACL` policies, in the order it holds them.
pub fn endpoint_acls(ep: &Endpoint) -> Vec<&AclPolicySetting> {
    ep.policies
        .iter()
        .filter_map(|p| match p {
            EndpointPolicy::Acl(a) => Some(a),
            _ => None,
        })
        .collect()
}

/// The sets in the order HNS takes them for `request`: IPSETs before the NESTEDIPSETs that
/// hold them when adding or updating, nested first when removing.
pub fn set_order(request: RequestType, mut sets: Vec<SetPolicySetting>) -> Vec<SetPolicySetting> {
    let nested_first = request == RequestType::Remove;
    sets.sort_by_key(|s| (s.policy_type == SetPolicyType::NestedIpSet) != nested_first);
    sets
}

impl Client {
    /// Replaces the ACLs of endpoint `id` with `acls` in one `Update`, keeping its other
    /// policies (read first, sent first). Every call re-applies, as HNS does (a build that
    /// resets connections on an ACL update resets them here too): skipping an unchanged list is
    /// the agent's choice ([`endpoint_acls`] tells what the endpoint has).
    pub async fn set_endpoint_acls(
        &self,
        id: Guid,
        acls: Vec<AclPolicySetting>,
    ) -> Result<Endpoint> {
        let ep = self.get_endpoint_by_id(id).await?;
        let mut policies: Vec<EndpointPolicy> = ep
            .policies
            .into_iter()
            .filter(|p| !matches!(p, EndpointPolicy::Acl(_)))
            .collect();
        policies.extend(acls.into_iter().map(EndpointPolicy::Acl));
        self.endpoint_policy(id, RequestType::Update, policies)
            .await
    }

    /// Adds (`Add`), changes by `Id` (`Update`) or removes (`Remove`) sets of network `id`, in
    /// [`set_order`], in one request.
    pub async fn set_policies(
        &self,
        id: Guid,
        request: RequestType,
        sets: Vec<SetPolicySetting>,
    ) -> Result<Network> {
        let policies = set_order(request, sets)
            .into_iter()
            .map(NetworkPolicy::SetPolicy)
            .collect();
        self.network_policy(id, request, policies).await
    }

    /// HNS v1 `POST /endpoints/{id}`: the endpoint document with a policy list (v1 policies,
    /// e.g. `{"Type":"ACL","Protocol":256,...}`); ACLs alone replace the endpoint's ACLs, a
    /// list with other policies replaces the whole list. hcsshim's `ApplyACLPolicy` sends
    /// this, Calico's felix for every local endpoint.
    pub async fn apply_v1_endpoint(
        &self,
        id: Guid,
        endpoint: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let body =
            serde_json::to_vec(endpoint).map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.call(Method::POST, &format!("/endpoints/{id}"), Some(body))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(id: &str, policy_type: SetPolicyType) -> SetPolicySetting {
        SetPolicySetting {
            id: id.into(),
            name: id.into(),
            policy_type,
            values: Default::default(),
        }
    }

    #[test]
    fn plain_sets_go_before_nested_ones_and_come_out_after() {
        let sets = vec![
            set("n", SetPolicyType::NestedIpSet),
            set("a", SetPolicyType::IpSet),
            set("b", SetPolicyType::IpSet),
        ];
        let ids = |v: Vec<SetPolicySetting>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(
            ids(set_order(RequestType::Add, sets.clone())),
            ["a", "b", "n"]
        );
        assert_eq!(
            ids(set_order(RequestType::Update, sets.clone())),
            ["a", "b", "n"]
        );
        assert_eq!(ids(set_order(RequestType::Remove, sets)), ["n", "a", "b"]);
    }
}
