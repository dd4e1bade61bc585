//! `winnet hns` as users run it: create from the example documents, list, get, dump (sorted and
//! stable), and errors that name the field.

use std::path::Path;
use std::process::{Command, Output};

fn winnet(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_winnet"))
        .arg("hns")
        .arg("--hns-socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run winnet hns")
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "winnet hns failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn examples() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hns")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_get_and_dump() {
    let hnsd = testkit::hnsd::Hnsd::start(hns::Profile::Ws2022).await;
    let s = hnsd.socket();
    let ex = examples();
    let net = ok(winnet(
        &s,
        &[
            "create",
            "networks",
            "-f",
            ex.join("network.json").to_str().unwrap(),
            "-o",
            "id",
        ],
    ));
    let net = net.trim();
    let set = format!("HostComputeNetwork={net}");
    let ep = ok(winnet(
        &s,
        &[
            "create",
            "endpoints",
            "-f",
            ex.join("endpoint.json").to_str().unwrap(),
            "--set",
            &set,
            "-o",
            "id",
        ],
    ));
    let backends = format!("HostComputeEndpoints=[\"{}\"]", ep.trim());
    ok(winnet(
        &s,
        &[
            "create",
            "loadbalancers",
            "-f",
            ex.join("loadbalancer.json").to_str().unwrap(),
            "--set",
            &backends,
        ],
    ));

    let table = ok(winnet(&s, &["list", "endpoints"]));
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains("10.244.1.2") && table.contains("pod-a_cbr0"),
        "{table}"
    );
    let lbs = ok(winnet(&s, &["list", "loadbalancers"]));
    assert!(
        lbs.contains("10.96.0.10") && lbs.contains("UDP/53->53"),
        "{lbs}"
    );
    let got: serde_json::Value = serde_json::from_str(&ok(winnet(
        &s,
        &["get", "endpoints", ep.trim(), "-o", "json"],
    )))
    .expect("JSON");
    assert_eq!(got["Policies"][0]["Type"], "OutBoundNAT");
    let filtered = ok(winnet(
        &s,
        &[
            "list",
            "networks",
            "--filter",
            "{\"name\":\"CBR0\"}",
            "-o",
            "id",
        ],
    ));
    assert_eq!(filtered.trim(), net);

    let dump1 = ok(winnet(&s, &["dump"]));
    let dump2 = ok(winnet(&s, &["dump"]));
    assert_eq!(dump1, dump2, "two dumps of the same state are identical");
    let doc: serde_json::Value = serde_json::from_str(&dump1).expect("JSON");
    let keys: Vec<&String> = doc.as_object().expect("object").keys().collect();
    assert_eq!(
        keys,
        [
            "endpoints",
            "loadbalancers",
            "namespaces",
            "networks",
            "routes"
        ],
        "sorted"
    );

    let refused = winnet(&s, &["delete", "networks", net]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("0x803B002C"));
    let bad = hnsd.dir().join("bad.json");
    std::fs::write(&bad, r#"{"Name":"x","Type":"Bridge"}"#).expect("write");
    let out = winnet(&s, &["create", "networks", "-f", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Type") && err.contains("L2Bridge"), "{err}");
}

/// A cell wider than a format width can be (65,535 characters) is printed whole, not a panic:
/// here the subnet column of a network with 6,000 subnets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_prints_a_column_wider_than_65535_characters() {
    let hnsd = testkit::hnsd::Hnsd::start(hns::Profile::Ws2022).await;
    let subnets: Vec<serde_json::Value> = (0..6000u32)
        .map(|i| {
            serde_json::json!({"IpAddressPrefix":
                format!("10.{}.{}.0/24", 10 + i / 256, i % 256)})
        })
        .collect();
    let doc = serde_json::json!({
        "Name": "wide", "Type": "L2Bridge",
        "Ipams": [{"Type": "Static", "Subnets": subnets}],
        "SchemaVersion": {"Major": 2, "Minor": 0}
    });
    testkit::hnsd::create_network(&hnsd.client(), &doc).await;
    let out = ok(winnet(&hnsd.socket(), &["list", "networks"]));
    let row = out
        .lines()
        .find(|l| l.contains("wide"))
        .unwrap_or_else(|| panic!("the network is listed: {out}"));
    assert!(
        row.len() > 65_535,
        "the whole subnet column: {} bytes",
        row.len()
    );
    assert!(
        row.ends_with("10.33.111.0/24"),
        "the last subnet is printed"
    );
}
