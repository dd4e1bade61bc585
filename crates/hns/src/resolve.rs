//! `POST /resolve`: what a pod's resolver does with a name, step by step (the DNS counterpart
//! of `/trace`). The request is read by [`hns_client::ResolveRequest`] and its endpoint found
//! among hnsd's objects; the data plane, which runs the pods' DNS clients, answers through a
//! [`PodResolver`] it registers with the [`Service`](crate::Service).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use dnsclient::{AskedName, Walk};
use hcn::Guid;
use hcn::error::HnsError;
use hickory_proto::rr::RecordType;

pub use hns_client::ResolveRequest;

/// A walk in progress.
pub type WalkFuture = Pin<Box<dyn Future<Output = Result<Walk, HnsError>> + Send>>;

/// Runs the walk of a name through the DNS client of an endpoint's pod.
pub type PodResolver = Arc<dyn Fn(Guid, AskedName, RecordType) -> WalkFuture + Send + Sync>;
