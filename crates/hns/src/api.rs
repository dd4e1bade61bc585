//! The HTTP/JSON API: HCN's functions as routes (DESIGN §3.1). Bodies are HNS v2 JSON; errors
//! are HNS error records with the HRESULT.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hcn::error::{HResult, HnsError};
use hcn::query::Filter;
use hcn::{Guid, decode};
use serde_json::Value;

use crate::resolve::ResolveRequest;
use crate::service::Service;
use crate::state::{Kind, Object, WriteOp};
use crate::trace::{NO_DATAPLANE, TraceRequest};

type Svc = AxState<Arc<Service>>;

/// The router of hnsd.
pub fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/globals/version", get(version))
        .route("/globals/features", get(features))
        .route("/trace", post(trace))
        .route("/resolve", post(resolve))
        .route(hns_client::switch::PATH, get(switch))
        .route(hns_client::switch::RULES_PATH, post(rules))
        .route(crate::metrics::PATH, get(metrics))
        .route(hns_client::changes::PATH, get(changes))
        .route("/{kind}", get(list).post(create))
        .route(
            "/{kind}/{id}",
            get(query).patch(modify).delete(delete).post(v1_update),
        )
        .with_state(service)
}

/// An HNS failure as an HTTP response.
struct ApiError(HnsError);

impl From<HnsError> for ApiError {
    fn from(e: HnsError) -> Self {
        ApiError(e)
    }
}

impl From<hcn::DecodeError> for ApiError {
    fn from(e: hcn::DecodeError) -> Self {
        ApiError(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.0.code == NO_DATAPLANE {
            // Not an HNS code: its record says what is missing, without HNS's generic text.
            let record = hcn::error::ErrorRecord {
                success: false,
                error: self.0.detail,
                error_code: NO_DATAPLANE.0,
            };
            return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(record)).into_response();
        }
        let status =
            StatusCode::from_u16(self.0.code.http_status()).unwrap_or(StatusCode::BAD_REQUEST);
        (status, axum::Json(self.0.record())).into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

async fn version(AxState(svc): Svc) -> ApiResult {
    Ok(axum::Json(svc.profile().version()).into_response())
}

async fn features(AxState(svc): Svc) -> ApiResult {
    Ok(axum::Json(svc.profile().features()).into_response())
}

fn kind(s: &str) -> Result<Kind, ApiError> {
    Kind::ALL.into_iter().find(|k| k.plural() == s).ok_or_else(|| {
        ApiError(HnsError::new(
            HResult::ERROR_NOT_FOUND,
            format!("no route /{s}; use /networks, /endpoints, /namespaces, /loadbalancers or /routes"),
        ))
    })
}

fn guid(s: &str) -> Result<Guid, ApiError> {
    s.parse().map_err(|e: String| {
        ApiError(HnsError::new(
            HResult::E_INVALIDARG,
            format!("ID in the path: {e}"),
        ))
    })
}

async fn list(
    AxState(svc): Svc,
    Path(k): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult {
    let kind = kind(&k)?;
    let filter = q
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case("filter"))
        .map(|(_, f)| Filter::parse(f))
        .transpose()
        .map_err(|m| HnsError::new(HResult::E_INVALIDARG, m))?
        .unwrap_or_default();
    let body = tokio::task::spawn_blocking(move || {
        let objects = svc.read(|s| s.list_objects(kind));
        let items: Vec<Value> = objects
            .iter()
            .map(|o| o.to_json())
            .filter(|o| filter.matches(o))
            .collect();
        serde_json::to_vec(&items)
    })
    .await
    .map_err(|e| HnsError::new(HResult::E_FAIL, format!("listing failed: {e}")))?
    .map_err(|e| HnsError::new(HResult::E_FAIL, format!("listing failed: {e}")))?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

async fn query(AxState(svc): Svc, Path((k, id)): Path<(String, String)>) -> ApiResult {
    let (kind, id) = (kind(&k)?, guid(&id)?);
    let obj = svc
        .read(|s| s.get(kind, id))
        .ok_or_else(|| kind.not_found(&id))?;
    Ok(axum::Json(obj.to_json()).into_response())
}

async fn create(AxState(svc): Svc, Path(k): Path<String>, body: Bytes) -> ApiResult {
    let obj = match kind(&k)? {
        Kind::Network => Object::Network(decode(&body)?),
        Kind::Endpoint => Object::Endpoint(decode(&body)?),
        Kind::Namespace => Object::Namespace(decode(&body)?),
        Kind::LoadBalancer => Object::LoadBalancer(decode(&body)?),
        Kind::Route => Object::Route(decode(&body)?),
    };
    let created = svc.write(WriteOp::Create(obj)).await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(created.map(|o| o.to_json())),
    )
        .into_response())
}

async fn modify(
    AxState(svc): Svc,
    Path((k, id)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let (kind, id) = (kind(&k)?, guid(&id)?);
    let op = match kind {
        Kind::LoadBalancer => WriteOp::UpdateLoadBalancer(id, decode(&body)?),
        _ => WriteOp::Modify(kind, id, decode(&body)?),
    };
    let modified = svc.write(op).await?;
    Ok(axum::Json(modified.map(|o| o.to_json())).into_response())
}

/// HNS v1 `POST /endpoints/{id}` (hcsshim `HNSEndpoint.Update`, which `ApplyACLPolicy` calls,
/// Calico's felix for every local endpoint): the endpoint document, v1 or v2 shaped; only its
/// `Policies` are taken. ACLs alone replace the endpoint's ACLs; a list with other policies
/// (an endpoint read, its ACLs appended) replaces the whole list.
async fn v1_update(
    AxState(svc): Svc,
    Path((k, id)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    let (kind, id) = (kind(&k)?, guid(&id)?);
    if kind != Kind::Endpoint {
        return Err(HnsError::new(
            HResult::HCN_E_REQUEST_UNSUPPORTED,
            format!("POST /{k}/{{id}} (HNS v1 update) applies to endpoints; modify a {k} with PATCH and a modify request"),
        )
        .into());
    }
    let doc: Value = serde_json::from_slice(&body).map_err(|e| {
        HnsError::new(
            HResult::HCN_E_INVALID_JSON,
            format!("the endpoint document is not valid JSON: {e}"),
        )
    })?;
    let policies = doc
        .as_object()
        .and_then(|m| m.iter().find(|(k, _)| k.eq_ignore_ascii_case("Policies")))
        .map_or(Value::Array(Vec::new()), |(_, v)| v.clone());
    let given: hcn::modify::PolicyRequest<hcn::EndpointPolicy> =
        hcn::decode_value(serde_json::json!({ "Policies": policies }))
            .map_err(|e| HnsError::new(e.code, format!("{}: {}", e.path, e.message)))?;
    let modified = svc
        .write(WriteOp::UpdateEndpointV1(id, given.policies))
        .await?;
    Ok(axum::Json(modified.map(|o| o.to_json())).into_response())
}

async fn delete(AxState(svc): Svc, Path((k, id)): Path<(String, String)>) -> ApiResult {
    let (kind, id) = (kind(&k)?, guid(&id)?);
    svc.write(WriteOp::Delete(kind, id)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /resolve`: what a pod's DNS client does with a name, step by step.
async fn resolve(AxState(svc): Svc, body: Bytes) -> ApiResult {
    let req = ResolveRequest::from_json(&body)?;
    let walk = svc.resolve(&req).await?;
    Ok(axum::Json(walk).into_response())
}

/// `POST /trace`: the first packet of a connection through this node's switch, explained.
async fn trace(AxState(svc): Svc, body: Bytes) -> ApiResult {
    let req = TraceRequest::from_json(&body)?;
    let answer = tokio::task::spawn_blocking(move || svc.trace(&req))
        .await
        .map_err(|e| HnsError::new(HResult::E_FAIL, format!("the trace failed: {e}")))??;
    Ok(axum::Json(answer).into_response())
}

/// `GET /linux/switch`: the compiled switch of this node, with each rule's owner and counters.
async fn switch(AxState(svc): Svc) -> ApiResult {
    let dump = tokio::task::spawn_blocking(move || svc.switch_dump())
        .await
        .map_err(|e| HnsError::new(HResult::E_FAIL, format!("the switch dump failed: {e}")))??;
    Ok(axum::Json(dump).into_response())
}

/// `GET /linux/changes?since=N`: the objects committed after revision N.
async fn changes(AxState(svc): Svc, Query(q): Query<HashMap<String, String>>) -> ApiResult {
    let since = match q.iter().find(|(k, _)| k.eq_ignore_ascii_case("since")) {
        None => None,
        Some((_, n)) => Some(n.parse::<u64>().map_err(|_| {
            HnsError::new(
                HResult::E_INVALIDARG,
                format!("since: \"{n}\" is not a revision; give the Revision of an earlier answer"),
            )
        })?),
    };
    Ok(axum::Json(svc.changes(since)).into_response())
}

/// `POST /linux/switch/rules`: an operator's hand edit of the live switch (`winnet vfpctrl`):
/// list, remove or add rules on one port, HNS objects untouched.
async fn rules(AxState(svc): Svc, body: Bytes) -> ApiResult {
    let edit: hns_client::switch::RuleEdit = serde_json::from_slice(&body).map_err(|e| {
        HnsError::new(
            HResult::HCN_E_INVALID_JSON,
            format!("the rule edit is not valid JSON ({e}); send {{\"Port\", \"Layer\", \"Group\", \"Op\"}}"),
        )
    })?;
    let answer = tokio::task::spawn_blocking(move || svc.edit_rules(&edit))
        .await
        .map_err(|e| HnsError::new(HResult::E_FAIL, format!("the rule edit failed: {e}")))??;
    Ok(axum::Json(answer).into_response())
}

/// `GET /linux/metrics`: the doctor's counts per problem kind, in Prometheus' text format.
async fn metrics(AxState(svc): Svc) -> ApiResult {
    let text = tokio::task::spawn_blocking(move || crate::metrics::render(&svc))
        .await
        .map_err(|e| HnsError::new(HResult::E_FAIL, format!("the metrics failed: {e}")))?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
