//! Random bytes, truncations and byte flips of a real store thrown at the store loader: it never
//! panics; it either loads a state whose objects are whole and whose references resolve, or
//! refuses with a message that names the file.

use std::path::Path;
use std::sync::OnceLock;

use hns::Profile;
use hns::store::Store;
use proptest::prelude::*;
use proptest::sample::Index;

/// A store with a network, endpoints, a namespace and a load balancer, as hnsd wrote it.
fn valid() -> &'static [u8] {
    static STORE: OnceLock<Vec<u8>> = OnceLock::new();
    STORE.get_or_init(|| {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let h = testkit::hnsd::Hnsd::start(Profile::Ws2022).await;
            let c = h.client();
            let net = testkit::hnsd::create_network(
                &c,
                &testkit::hnsd::l2bridge("fuzz", "10.244.1.0/24", "10.244.1.1"),
            )
            .await;
            let mut eps = Vec::new();
            for i in 0..4 {
                let e = c
                    .create_endpoint(&hcn::Endpoint {
                        name: format!("fuzz-{i}"),
                        host_compute_network: net.id,
                        ..hcn::Endpoint::default()
                    })
                    .await
                    .expect("endpoint");
                eps.push(e.id);
            }
            let lb: hcn::LoadBalancer = serde_json::from_value(serde_json::json!({
                "HostComputeEndpoints": eps, "FrontendVIPs": ["10.96.0.10"],
                "PortMappings": [{"Protocol": 6, "InternalPort": 80, "ExternalPort": 80}],
                "SchemaVersion": {"Major": 2, "Minor": 0}
            }))
            .expect("lb");
            c.create_load_balancer(&lb).await.expect("load balancer");
            let dir = h.stop().await;
            std::fs::read(dir.path().join("state/hns.redb")).expect("the store")
        })
    })
}

/// Opens `bytes` as a store: a refusal must name the file; a store that opens must load, whole.
fn open_as_store(bytes: &[u8]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("hns.redb");
    std::fs::write(&file, bytes).expect("write");
    check(&file)
}

fn check(file: &Path) -> Result<(), TestCaseError> {
    match Store::open(file) {
        Ok(store) => {
            let state = store
                .load(Profile::Ws2022)
                .map_err(|e| TestCaseError::fail(format!("opened but does not load: {e}")))?;
            prop_assert!(state.problems().is_empty(), "{:?}", state.problems());
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(
                message.contains(&file.display().to_string()),
                "the refusal names the file: {message}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn flipped_bytes_never_panic(flips in prop::collection::vec((any::<Index>(), 1..=255u8), 1..12)) {
        let mut bytes = valid().to_vec();
        for (at, x) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        open_as_store(&bytes)?;
    }

    #[test]
    fn flipped_bytes_in_the_header_never_panic(flips in prop::collection::vec((0..4096usize, 1..=255u8), 1..4)) {
        let mut bytes = valid().to_vec();
        let len = bytes.len();
        for (i, x) in flips {
            bytes[i % len] ^= x;
        }
        open_as_store(&bytes)?;
    }

    #[test]
    fn truncated_stores_never_panic(cut in any::<Index>()) {
        let bytes = valid();
        open_as_store(&bytes[..cut.index(bytes.len())])?;
    }

    #[test]
    fn random_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..8192), header in 0..2usize) {
        // With redb's own header in front, or without.
        let mut bytes = valid()[..header * 512].to_vec();
        bytes.extend(tail);
        open_as_store(&bytes)?;
    }
}
