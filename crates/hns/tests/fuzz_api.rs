//! Arbitrary JSON thrown at the API: hnsd never panics, always answers with an HNS error record
//! when it refuses, and a refused call changes nothing.

mod common;

use common::{Hnsd, dump, l2bridge};
use hns::{Kind, Profile};
use hns_client::Method;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Name".to_string()),
        Just("type".to_string()),
        Just("Policies".to_string()),
        Just("Settings".to_string()),
        Just("IpConfigurations".to_string()),
        Just("IPAddress".to_string()),
        Just("HostComputeEndpoints".to_string()),
        Just("PortMappings".to_string()),
        Just("FrontendVIPs".to_string()),
        Just("Ipams".to_string()),
        Just("Subnets".to_string()),
        Just("ResourceType".to_string()),
        Just("RequestType".to_string()),
        Just("MacAddress".to_string()),
        Just("Flags".to_string()),
        "[A-Za-z]{1,12}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        prop_oneof![
            Just("10.244.1.7".to_string()),
            Just("10.0.0.0/8".to_string()),
            Just("00-15-5D-00-00-01".to_string()),
            Just("OutBoundNAT".to_string()),
            Just("Add".to_string()),
            Just("Policy".to_string()),
            ".{0,20}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Valid documents with one field replaced by arbitrary JSON: reaches the deeper checks.
fn mutated(net: String) -> impl Strategy<Value = (Kind, Value)> {
    let docs = vec![
        (Kind::Network, l2bridge("n", "10.9.0.0/24", "10.9.0.1")),
        (
            Kind::Endpoint,
            json!({"HostComputeNetwork": net, "IpConfigurations": [{"IpAddress": "10.244.1.50"}],
            "Policies": [{"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.0.0.0/8"]}}]}),
        ),
        (
            Kind::LoadBalancer,
            json!({"HostComputeEndpoints": [], "FrontendVIPs": ["10.96.0.1"],
            "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}]}),
        ),
        (Kind::Namespace, json!({})),
        (
            Kind::Route,
            json!({"Setting": [{"DestinationPrefix": "10.0.0.0/8", "NeedEncap": true}]}),
        ),
    ];
    (prop::sample::select(docs), key(), json_value()).prop_map(|((kind, mut doc), k, v)| {
        if let Some(o) = doc.as_object_mut() {
            o.insert(k, v);
        }
        (kind, doc)
    })
}

#[test]
fn arbitrary_json_never_panics_and_refusals_change_nothing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (h, net, ids) = rt.block_on(async {
        let h = Hnsd::start(Profile::Ws2022).await;
        let c = h.client();
        let net = c.list_raw(Kind::Network, None).await.unwrap();
        assert!(net.is_empty());
        let doc = l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1");
        let net = c
            .call(
                Method::POST,
                "/networks",
                Some(doc.to_string().into_bytes()),
            )
            .await
            .unwrap();
        let net = net["ID"].as_str().unwrap().to_string();
        let ep = c
            .call(
                Method::POST,
                "/endpoints",
                Some(json!({"HostComputeNetwork": net}).to_string().into_bytes()),
            )
            .await
            .unwrap();
        let ns = c
            .call(Method::POST, "/namespaces", Some(b"{}".to_vec()))
            .await
            .unwrap();
        let ids = vec![
            (Kind::Network, net.clone()),
            (Kind::Endpoint, ep["ID"].as_str().unwrap().to_string()),
            (Kind::Namespace, ns["ID"].as_str().unwrap().to_string()),
        ];
        (h, net, ids)
    });
    let client = h.client();
    let check = |method: Method, path: String, body: Value| -> Result<(), TestCaseError> {
        rt.block_on(async {
            let before = dump(&client).await;
            match client
                .call(method, &path, Some(body.to_string().into_bytes()))
                .await
            {
                Ok(_) => {}
                Err(hns_client::ClientError::Hns { status, error, .. }) => {
                    prop_assert!((400..600).contains(&status), "status {status}");
                    prop_assert!(!error.is_empty());
                    prop_assert_eq!(
                        dump(&client).await,
                        before,
                        "refused {} {} changed state",
                        path,
                        body
                    );
                }
                Err(other) => prop_assert!(false, "not an HNS answer (a panic?): {other}"),
            }
            prop_assert!(client.get_version().await.is_ok(), "hnsd still answers");
            Ok(())
        })
    };
    let mut runner = TestRunner::new(Config {
        cases: 300,
        ..Config::default()
    });
    let kinds = prop::sample::select(Kind::ALL.to_vec());
    runner
        .run(&(kinds, json_value()), |(kind, body)| {
            check(Method::POST, format!("/{kind}"), body)
        })
        .unwrap();
    runner
        .run(&mutated(net), |(kind, body)| {
            check(Method::POST, format!("/{kind}"), body)
        })
        .unwrap();
    runner
        .run(
            &(prop::sample::select(ids), json_value()),
            |((kind, id), body)| check(Method::PATCH, format!("/{kind}/{id}"), body),
        )
        .unwrap();
}
