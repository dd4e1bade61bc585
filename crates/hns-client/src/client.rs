//! [`Client`]: the HCN functions with hcsshim's names, over a [`Transport`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hcn::error::{ErrorRecord, HResult};
use hcn::modify::{ModifyRequest, NamespaceEndpointRequest, PolicyRequest};
use hcn::{
    Endpoint, EndpointPolicy, Guid, LoadBalancer, Namespace, Network, NetworkPolicy, RequestType,
    ResourceType, SdnRoute, SupportedFeatures, Version,
};
use hyper::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Kind;
use crate::trace::{TraceAnswer, TraceRequest};
use crate::transport::{Transport, UnixSocket};

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// hnsd answered with an HNS error.
    #[error("hns: {error} ({code})", code = HResult(*code))]
    Hns {
        status: u16,
        code: u32,
        error: String,
    },
    /// hnsd could not be reached.
    #[error(
        "cannot reach hnsd at {socket}: {reason} (is `winnet hnsd` running? set --hns-socket or HNS_SOCKET)"
    )]
    Connect { socket: PathBuf, reason: String },
    /// The answer was not what the API promises.
    #[error("unexpected answer from hnsd: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The HRESULT of an HNS error.
    pub fn code(&self) -> Option<HResult> {
        match self {
            ClientError::Hns { code, .. } => Some(HResult(*code)),
            _ => None,
        }
    }

    /// True when HNS said the object does not exist (hcsshim's `IsNotFoundError`).
    pub fn is_not_found(&self) -> bool {
        self.code().is_some_and(HResult::is_not_found)
    }
}

type Result<T> = std::result::Result<T, ClientError>;

/// A client of one hnsd: the HCN functions with hcsshim's names. Cheap to clone; clones share
/// the transport (and, on a socket, its idle connections).
#[derive(Clone)]
pub struct Client {
    transport: Arc<dyn Transport>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("hnsd", &self.transport.endpoint())
            .finish()
    }
}

impl Client {
    /// A client of the hnsd serving on `socket`.
    pub fn new(socket: impl AsRef<Path>) -> Client {
        Client::over(Arc::new(UnixSocket::new(socket)))
    }

    /// A client over any transport, e.g. an hnsd in this process.
    pub fn over(transport: Arc<dyn Transport>) -> Client {
        Client { transport }
    }

    /// Where the calls go: the socket, or the in-process hnsd's name.
    pub fn endpoint(&self) -> String {
        self.transport.endpoint()
    }

    /// One call: method, path, optional JSON body; the answer's JSON (Null for 204).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<serde_json::Value> {
        let (status, bytes) = self
            .transport
            .exchange(method, path, body.unwrap_or_default())
            .await?;
        let success = (200..300).contains(&status);
        if status == 204 || bytes.is_empty() {
            return if success {
                Ok(serde_json::Value::Null)
            } else {
                Err(ClientError::Protocol(format!(
                    "status {status} with no body"
                )))
            };
        }
        if !success {
            let rec: ErrorRecord = serde_json::from_slice(&bytes).map_err(|_| {
                ClientError::Protocol(format!(
                    "status {status}: {}",
                    String::from_utf8_lossy(&bytes)
                ))
            })?;
            return Err(ClientError::Hns {
                status,
                code: rec.error_code,
                error: rec.error,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    async fn typed<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T> {
        let v = self.call(method, path, body).await?;
        serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string()))
    }

    fn json(body: &impl Serialize) -> Result<Option<Vec<u8>>> {
        serde_json::to_vec(body)
            .map(Some)
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    async fn create<T: Serialize + DeserializeOwned>(&self, kind: Kind, obj: &T) -> Result<T> {
        self.typed(Method::POST, &format!("/{kind}"), Self::json(obj)?)
            .await
    }

    async fn get<T: DeserializeOwned>(&self, kind: Kind, id: Guid) -> Result<T> {
        self.typed(Method::GET, &format!("/{kind}/{id}"), None)
            .await
    }

    /// Objects of `kind` matching a filter (a JSON object, e.g. `{"Name":"cbr0"}`).
    pub async fn list_raw(
        &self,
        kind: Kind,
        filter: Option<&serde_json::Value>,
    ) -> Result<Vec<serde_json::Value>> {
        let path = match filter {
            None => format!("/{kind}"),
            Some(f) => {
                let enc = percent_encoding::utf8_percent_encode(
                    &f.to_string(),
                    percent_encoding::NON_ALPHANUMERIC,
                )
                .to_string();
                format!("/{kind}?filter={enc}")
            }
        };
        self.typed(Method::GET, &path, None).await
    }

    async fn list<T: DeserializeOwned>(
        &self,
        kind: Kind,
        filter: Option<serde_json::Value>,
    ) -> Result<Vec<T>> {
        let raw = self.list_raw(kind, filter.as_ref()).await?;
        raw.into_iter()
            .map(|v| serde_json::from_value(v).map_err(|e| ClientError::Protocol(e.to_string())))
            .collect()
    }

    async fn first<T: DeserializeOwned>(
        &self,
        kind: Kind,
        filter: serde_json::Value,
    ) -> Result<Option<T>> {
        Ok(self.list(kind, Some(filter)).await?.into_iter().next())
    }

    /// Deletes an object of any kind by ID.
    pub async fn delete(&self, kind: Kind, id: Guid) -> Result<()> {
        self.call(Method::DELETE, &format!("/{kind}/{id}"), None)
            .await
            .map(drop)
    }

    async fn modify<T: DeserializeOwned>(
        &self,
        kind: Kind,
        id: Guid,
        req: &ModifyRequest,
    ) -> Result<T> {
        self.typed(Method::PATCH, &format!("/{kind}/{id}"), Self::json(req)?)
            .await
    }

    /// `GetGlobals`: the HNS version.
    pub async fn get_version(&self) -> Result<Version> {
        self.typed(Method::GET, "/globals/version", None).await
    }

    /// `GetSupportedFeatures`.
    pub async fn get_supported_features(&self) -> Result<SupportedFeatures> {
        self.typed(Method::GET, "/globals/features", None).await
    }

    pub async fn create_network(&self, n: &Network) -> Result<Network> {
        self.create(Kind::Network, n).await
    }
    pub async fn list_networks(&self) -> Result<Vec<Network>> {
        self.list(Kind::Network, None).await
    }
    pub async fn get_network_by_id(&self, id: Guid) -> Result<Network> {
        self.get(Kind::Network, id).await
    }
    pub async fn get_network_by_name(&self, name: &str) -> Result<Option<Network>> {
        self.first(Kind::Network, serde_json::json!({ "Name": name }))
            .await
    }
    pub async fn modify_network(&self, id: Guid, req: &ModifyRequest) -> Result<Network> {
        self.modify(Kind::Network, id, req).await
    }
    /// `AddPolicy` / `RemovePolicy` on a network.
    pub async fn network_policy(
        &self,
        id: Guid,
        request: RequestType,
        policies: Vec<NetworkPolicy>,
    ) -> Result<Network> {
        let req = policy_request(request, policies)?;
        self.modify_network(id, &req).await
    }
    pub async fn delete_network(&self, id: Guid) -> Result<()> {
        self.delete(Kind::Network, id).await
    }

    pub async fn create_endpoint(&self, e: &Endpoint) -> Result<Endpoint> {
        self.create(Kind::Endpoint, e).await
    }
    pub async fn list_endpoints(&self) -> Result<Vec<Endpoint>> {
        self.list(Kind::Endpoint, None).await
    }
    /// `ListEndpointsOfNetwork`, with hcsshim's v1 filter key.
    pub async fn list_endpoints_of_network(&self, network: Guid) -> Result<Vec<Endpoint>> {
        self.list(
            Kind::Endpoint,
            Some(serde_json::json!({ "VirtualNetwork": network.to_string() })),
        )
        .await
    }
    pub async fn get_endpoint_by_id(&self, id: Guid) -> Result<Endpoint> {
        self.get(Kind::Endpoint, id).await
    }
    pub async fn get_endpoint_by_name(&self, name: &str) -> Result<Option<Endpoint>> {
        self.first(Kind::Endpoint, serde_json::json!({ "Name": name }))
            .await
    }
    pub async fn modify_endpoint(&self, id: Guid, req: &ModifyRequest) -> Result<Endpoint> {
        self.modify(Kind::Endpoint, id, req).await
    }
    /// `ApplyPolicy` on an endpoint.
    pub async fn endpoint_policy(
        &self,
        id: Guid,
        request: RequestType,
        policies: Vec<EndpointPolicy>,
    ) -> Result<Endpoint> {
        let req = policy_request(request, policies)?;
        self.modify_endpoint(id, &req).await
    }
    pub async fn delete_endpoint(&self, id: Guid) -> Result<()> {
        self.delete(Kind::Endpoint, id).await
    }

    pub async fn create_namespace(&self, n: &Namespace) -> Result<Namespace> {
        self.create(Kind::Namespace, n).await
    }
    pub async fn list_namespaces(&self) -> Result<Vec<Namespace>> {
        self.list(Kind::Namespace, None).await
    }
    pub async fn get_namespace_by_id(&self, id: Guid) -> Result<Namespace> {
        self.get(Kind::Namespace, id).await
    }
    /// `AddNamespaceEndpoint`.
    pub async fn add_namespace_endpoint(
        &self,
        namespace: Guid,
        endpoint: Guid,
    ) -> Result<Namespace> {
        self.namespace_endpoint(namespace, endpoint, RequestType::Add)
            .await
    }
    /// `RemoveNamespaceEndpoint`.
    pub async fn remove_namespace_endpoint(
        &self,
        namespace: Guid,
        endpoint: Guid,
    ) -> Result<Namespace> {
        self.namespace_endpoint(namespace, endpoint, RequestType::Remove)
            .await
    }
    async fn namespace_endpoint(
        &self,
        namespace: Guid,
        endpoint: Guid,
        request_type: RequestType,
    ) -> Result<Namespace> {
        let settings = serde_json::to_value(NamespaceEndpointRequest {
            endpoint_id: endpoint,
        })
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let req = ModifyRequest {
            resource_type: ResourceType::Endpoint,
            request_type,
            settings,
        };
        self.modify(Kind::Namespace, namespace, &req).await
    }
    pub async fn delete_namespace(&self, id: Guid) -> Result<()> {
        self.delete(Kind::Namespace, id).await
    }

    pub async fn create_load_balancer(&self, lb: &LoadBalancer) -> Result<LoadBalancer> {
        self.create(Kind::LoadBalancer, lb).await
    }
    pub async fn list_load_balancers(&self) -> Result<Vec<LoadBalancer>> {
        self.list(Kind::LoadBalancer, None).await
    }
    pub async fn get_load_balancer_by_id(&self, id: Guid) -> Result<LoadBalancer> {
        self.get(Kind::LoadBalancer, id).await
    }
    /// `LoadBalancer.Update`: `HcnModifyLoadBalancer` with the whole object.
    pub async fn update_load_balancer(&self, id: Guid, lb: &LoadBalancer) -> Result<LoadBalancer> {
        self.typed(
            Method::PATCH,
            &format!("/{}/{id}", Kind::LoadBalancer),
            Self::json(lb)?,
        )
        .await
    }
    pub async fn delete_load_balancer(&self, id: Guid) -> Result<()> {
        self.delete(Kind::LoadBalancer, id).await
    }

    pub async fn create_sdn_route(&self, r: &SdnRoute) -> Result<SdnRoute> {
        self.create(Kind::Route, r).await
    }
    pub async fn list_sdn_routes(&self) -> Result<Vec<SdnRoute>> {
        self.list(Kind::Route, None).await
    }
    pub async fn delete_sdn_route(&self, id: Guid) -> Result<()> {
        self.delete(Kind::Route, id).await
    }

    /// What the node's switch does with the first packet of a connection (`POST /trace`): the
    /// structured trace, its disposition and the switch's text.
    pub async fn trace(&self, req: &TraceRequest) -> Result<TraceAnswer> {
        self.typed(Method::POST, "/trace", Self::json(&req.to_json())?)
            .await
    }

    /// The node's compiled switch (`GET /linux/switch`): ports, layers, rules with their owners
    /// and counters, SNAT pools, and the facts the compiler used.
    pub async fn switch_dump(&self) -> Result<crate::switch::SwitchDump> {
        self.typed(Method::GET, crate::switch::PATH, None).await
    }

    /// The objects written or deleted after revision `since` (`GET /linux/changes`); without
    /// `since`, only where hnsd is now (its epoch and revision), to ask from later.
    pub async fn changes_since(&self, since: Option<u64>) -> Result<crate::changes::Changes> {
        let path = match since {
            Some(n) => format!("{}?since={n}", crate::changes::PATH),
            None => crate::changes::PATH.to_string(),
        };
        self.typed(Method::GET, &path, None).await
    }

    /// Lists, removes or adds rules on one port of the live switch (`POST /linux/switch/rules`,
    /// `winnet vfpctrl`), without touching HNS objects.
    pub async fn edit_rules(
        &self,
        edit: &crate::switch::RuleEdit,
    ) -> Result<crate::switch::PortRules> {
        self.typed(Method::POST, crate::switch::RULES_PATH, Self::json(edit)?)
            .await
    }

    /// What the DNS client of a pod does with a name (`POST /resolve`), step by step.
    pub async fn resolve(&self, req: &crate::resolve::ResolveRequest) -> Result<dnsclient::Walk> {
        self.typed(Method::POST, "/resolve", Self::json(&req.to_json())?)
            .await
    }
}

fn policy_request<P: Serialize>(
    request_type: RequestType,
    policies: Vec<P>,
) -> Result<ModifyRequest> {
    let settings = serde_json::to_value(PolicyRequest { policies })
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(ModifyRequest {
        resource_type: ResourceType::Policy,
        request_type,
        settings,
    })
}
