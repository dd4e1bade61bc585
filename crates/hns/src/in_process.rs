//! An hnsd in this process: its API router answers a [`Client`] directly, without a socket.
//! The requests and answers are the same HNS v2 JSON as on the socket, through the same
//! handlers, so a CNI plugin or kube-proxy on an in-process hnsd runs exactly as on a real one.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use hns_client::transport::Exchange;
use hns_client::{Client, ClientError, Method, Transport};
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::service::Service;

/// The transport to an hnsd [`Service`] of this process.
pub struct InProcess {
    router: Router,
    name: String,
}

impl InProcess {
    /// The API of `service`; `name` says which hnsd in messages (e.g. the node's name).
    pub fn new(service: Arc<Service>, name: &str) -> InProcess {
        InProcess {
            router: crate::api::router(service),
            name: name.to_string(),
        }
    }

    /// A client of `service`.
    pub fn client(service: Arc<Service>, name: &str) -> Client {
        Client::over(Arc::new(InProcess::new(service, name)))
    }
}

impl Transport for InProcess {
    fn exchange(&self, method: Method, path: &str, body: Vec<u8>) -> Exchange<'_> {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from(body));
        Box::pin(async move {
            let request = request.map_err(|e| ClientError::Protocol(e.to_string()))?;
            let answer = match self.router.clone().oneshot(request).await {
                Ok(a) => a,
                Err(never) => match never {},
            };
            let status = answer.status().as_u16();
            let bytes = answer
                .into_body()
                .collect()
                .await
                .map_err(|e| ClientError::Protocol(e.to_string()))?
                .to_bytes();
            Ok((status, bytes))
        })
    }

    fn endpoint(&self) -> String {
        format!("the in-process hnsd of {}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::{Profile, Service};

    fn service() -> Arc<Service> {
        let store = Store::in_memory().expect("in-memory store");
        Arc::new(Service::start(store, Profile::Ws2022).expect("service"))
    }

    #[tokio::test]
    async fn a_client_in_process_gets_what_the_socket_would_give() {
        let hns = InProcess::client(service(), "node-1");
        let version = hns.get_version().await.expect("version");
        assert_eq!(version, Profile::Ws2022.version());
        let net: hcn::Network = hcn::decode_value(serde_json::json!({
            "Name": "cbr0", "Type": "L2Bridge",
            "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": "10.244.1.0/24"}]}]
        }))
        .expect("network");
        let made = hns.create_network(&net).await.expect("create");
        let found = hns.get_network_by_name("cbr0").await.expect("query");
        assert_eq!(found.map(|n| n.id), Some(made.id));
        // An HNS error keeps its HRESULT; the client names the hnsd it talks to.
        let missing = hns
            .get_network_by_id(hcn::Guid::default())
            .await
            .expect_err("no such network");
        assert!(missing.is_not_found(), "{missing}");
        assert!(format!("{hns:?}").contains("node-1"));
    }
}
