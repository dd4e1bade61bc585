//! `POST /trace` through hnsd's socket without a data plane (no root): the request's checks
//! name the bad field, `From` must name something, and an hnsd that serves the objects only
//! says it has no switch to trace. Traces on a data plane are tested in
//! `crates/winnet/tests/trace.rs` (root) and in `crates/lab/tests/trace_explain.rs` (the simulated node).

mod common;

use common::{Hnsd, l2bridge};
use hcn::error::HResult;
use hns::Profile;
use hns::trace::NO_DATAPLANE;
use hns_client::{ClientError, Kind, Method, TraceProtocol, TraceRequest};
use serde_json::{Value, json};

/// POSTs `body` to /trace: hnsd's error as (HTTP status, HRESULT, message).
async fn refused(h: &Hnsd, body: &str) -> (u16, HResult, String) {
    let r = h
        .client()
        .call(Method::POST, "/trace", Some(body.as_bytes().to_vec()))
        .await;
    match r {
        Err(ClientError::Hns {
            status,
            code,
            error,
        }) => (status, HResult(code), error),
        other => panic!("hnsd must refuse {body}: {other:?}"),
    }
}

async fn with_pod(h: &Hnsd) -> Value {
    let c = h.client();
    let net = c
        .call(
            Method::POST,
            &format!("/{}", Kind::Network),
            Some(
                l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1")
                    .to_string()
                    .into_bytes(),
            ),
        )
        .await
        .unwrap();
    let ep = json!({"Name": "pa_cbr0", "HostComputeNetwork": net["ID"],
        "IpConfigurations": [{"IpAddress": "10.244.1.10", "PrefixLength": 24}]});
    c.call(
        Method::POST,
        &format!("/{}", Kind::Endpoint),
        Some(ep.to_string().into_bytes()),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn without_a_data_plane_a_trace_is_503_and_says_how_to_get_one() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let ep = with_pod(&h).await;
    // By name, by the CNI's container ID (the name before `_<network>`), by ID, by address:
    // each names something, so the answer is about the missing data plane.
    let id = ep["ID"].as_str().unwrap().to_string();
    for from in ["pa_cbr0", "pa", &id, "10.244.1.10", "203.0.113.10"] {
        let body = json!({"From": from, "To": "10.96.0.10:80", "Protocol": "tcp"}).to_string();
        let (status, code, error) = refused(&h, &body).await;
        assert_eq!((status, code), (503, NO_DATAPLANE), "{from}: {error}");
        assert!(error.contains("--node-netns"), "{error}");
    }
    // The client's call, and keys in any case.
    let req = TraceRequest::new("pa", "10.200.0.1", TraceProtocol::Icmp).unwrap();
    let e = h.client().trace(&req).await.unwrap_err();
    assert_eq!(e.code(), Some(NO_DATAPLANE), "{e}");
    let (status, ..) = refused(&h, r#"{"from":"pa","TO":"10.0.0.1","pRoToCoL":"ICMP"}"#).await;
    assert_eq!(status, 503);
}

#[tokio::test]
async fn from_that_names_no_endpoint_is_404() {
    let h = Hnsd::start(Profile::Ws2022).await;
    with_pod(&h).await;
    for from in ["nobody", "5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D"] {
        let body = json!({"From": from, "To": "10.96.0.10:80"}).to_string();
        let (status, code, error) = refused(&h, &body).await;
        assert_eq!(status, 404, "{error}");
        assert_eq!(code, HResult::HCN_E_ENDPOINT_NOT_FOUND);
        assert!(error.contains("From:") && error.contains(from), "{error}");
    }
}

#[tokio::test]
async fn bad_input_is_400_naming_the_field() {
    let h = Hnsd::start(Profile::Ws2022).await;
    let cases = [
        (r#"{"To": "10.96.0.10:80"}"#, "From:"),
        (r#"{"From": "", "To": "10.96.0.10:80"}"#, "From:"),
        (r#"{"From": "pa"}"#, "To:"),
        (r#"{"From": "pa", "To": "10.96.0.10"}"#, "To:"),
        (r#"{"From": "pa", "To": "web.default:80"}"#, "To:"),
        (
            r#"{"From": "pa", "To": "10.96.0.10:80", "Protocol": "icmp"}"#,
            "To:",
        ),
        (
            r#"{"From": "pa", "To": "10.96.0.10:80", "Protocol": "sctp"}"#,
            "Protocol:",
        ),
        (
            r#"{"From": "pa", "To": "10.96.0.10:80", "Port": "80"}"#,
            "Port:",
        ),
        (r#"{"From": ["pa"], "To": "10.96.0.10:80"}"#, "From:"),
    ];
    for (body, field) in cases {
        let (status, code, error) = refused(&h, body).await;
        assert_eq!(
            (status, code),
            (400, HResult::E_INVALIDARG),
            "{body}: {error}"
        );
        assert!(error.contains(field), "{body}: {error}");
    }
    let (status, code, _) = refused(&h, "From=pa").await;
    assert_eq!((status, code), (400, HResult::HCN_E_INVALID_JSON));
}
