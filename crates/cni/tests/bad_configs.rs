//! Bad configs through the winnet binary: each gives a CNI error with the right code and a
//! message naming the field, and creates nothing (no HNS object, no address, no record).

mod common;

use common::{Node, win_bridge_conf, with};
use serde_json::json;

struct Case {
    what: &'static str,
    plugin: &'static str,
    conf: String,
    code: u64,
    names: &'static str,
}

#[test]
fn bad_configs_fail_with_the_right_code_and_create_nothing() {
    let node = Node::start();
    node.l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1");
    node.overlay("vxlan0", "10.244.9.0/24", "10.244.9.1", "10.0.0.9");
    let good = win_bridge_conf(&node, "1.0.0", "cbr0", "10.244.1.0/24", "10.244.1.10");
    let mut no_name: serde_json::Value = serde_json::from_str(&good).unwrap();
    no_name.as_object_mut().unwrap().remove("name");
    let overlay = with(
        &with(&good, "name", json!("vxlan0")),
        "type",
        json!("win-overlay"),
    );
    let missing_env = node.dir.path().join("no-subnet.env");
    let cases = [
        Case { what: "missing name", plugin: "win-bridge", conf: no_name.to_string(), code: 7, names: "name" },
        Case { what: "unknown network", plugin: "win-bridge", conf: with(&good, "name", json!("nosuchnet")), code: 7, names: "nosuchnet" },
        Case { what: "bad JSON", plugin: "win-bridge", conf: good[..good.len() - 5].to_string(), code: 6, names: "JSON" },
        Case { what: "name of the wrong type", plugin: "win-bridge", conf: with(&good, "name", json!(["cbr0"])), code: 6, names: "name" },
        Case { what: "unsupported version", plugin: "win-bridge", conf: with(&good, "cniVersion", json!("0.5.0")), code: 1, names: "cniVersion" },
        Case { what: "bad MAC prefix", plugin: "win-overlay", conf: with(&overlay, "endpointMacPrefix", json!("0E2A")), code: 7, names: "endpointMacPrefix" },
        Case { what: "wrong network type", plugin: "win-overlay", conf: with(&overlay, "name", json!("cbr0")), code: 7, names: "unexpected type" },
        Case {
            what: "policy HNS would refuse",
            plugin: "win-bridge",
            conf: with(&good, "policies", json!([{"name": "EndpointPolicy", "value": {"Type": "OutBoundNAT", "ExceptionList": ["10.0.0.0/99"]}}])),
            code: 7,
            names: "policies[0].value.Settings.Exceptions",
        },
        Case { what: "bad ipMasqNetwork", plugin: "win-bridge", conf: with(&good, "ipMasqNetwork", json!("10.244.0.0")), code: 7, names: "ipMasqNetwork" },
        Case {
            what: "IPAM plugin not on CNI_PATH",
            plugin: "win-bridge",
            conf: with(&good, "ipam", json!({"type": "no-such-ipam"})),
            code: 7,
            names: "no-such-ipam",
        },
        Case {
            what: "flannel delegate naming itself",
            plugin: "flannel",
            conf: json!({"cniVersion": "0.2.0", "name": "cbr0", "type": "flannel", "delegate": {"name": "x"}}).to_string(),
            code: 7,
            names: "delegate.name",
        },
        Case {
            what: "flannel before flanneld wrote subnet.env",
            plugin: "flannel",
            conf: json!({"cniVersion": "0.2.0", "name": "cbr0", "type": "flannel", "subnetFile": missing_env, "dataDir": node.dir.path().join("fl")}).to_string(),
            code: 11,
            names: "subnet.env",
        },
        Case { what: "sdn type unknown", plugin: "sdnbridge", conf: with(&good, "type", json!("bridge")), code: 7, names: "type" },
        Case {
            what: "sdn network to create without a subnet",
            plugin: "sdnbridge",
            conf: json!({"cniVersion": "1.0.0", "name": "newnet", "type": "sdnbridge"}).to_string(),
            code: 7,
            names: "ipam.subnet",
        },
    ];
    let before = node.dump();
    for case in &cases {
        let ns = node.netns("pod");
        let run = node.verb(case.plugin, "ADD", "pod", &ns, &case.conf);
        assert_eq!(run.err_code(), case.code, "{}: {}", case.what, run.out);
        assert!(
            run.msg().contains(case.names),
            "{}: message does not name {}: {}",
            case.what,
            case.names,
            run.msg()
        );
        assert_eq!(node.dump(), before, "{}: HNS changed", case.what);
        assert!(
            node.allocations("cbr0").is_empty(),
            "{}: an address was taken",
            case.what
        );
        assert!(
            node.records().is_empty(),
            "{}: a record was written: {:?}",
            case.what,
            node.records()
        );
        assert!(
            !node.dir.path().join("fl").exists(),
            "{}: flannel saved a delegate",
            case.what
        );
    }
}

#[test]
fn bad_environments_are_code_4_naming_the_variable() {
    let node = Node::start();
    let conf = win_bridge_conf(&node, "1.0.0", "cbr0", "10.244.1.0/24", "10.244.1.10");
    let run = node.call("win-bridge", &[("CNI_COMMAND", "ADD")], &conf);
    assert_eq!(run.err_code(), 4);
    assert!(
        run.msg().contains("CNI_CONTAINERID") && run.msg().contains("CNI_NETNS"),
        "{}",
        run.msg()
    );
    let run = node.call("win-bridge", &[("CNI_COMMAND", "FROB")], &conf);
    assert_eq!(run.err_code(), 4);
    assert!(run.msg().contains("CNI_COMMAND"), "{}", run.msg());
    let run = node.verb("win-bridge", "ADD", "bad/id", "none", &conf);
    assert_eq!(run.err_code(), 4);
    assert!(run.msg().contains("CNI_CONTAINERID"), "{}", run.msg());
    let run = node.verb("win-bridge", "ADD", "pod", "/no/such/netns", &conf);
    assert_eq!(run.err_code(), 8);
    assert!(run.msg().contains("CNI_NETNS"), "{}", run.msg());
}

#[test]
fn a_cni_netns_that_is_no_pod_network_namespace_is_code_8_and_creates_nothing() {
    let node = Node::start();
    node.l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1");
    let conf = win_bridge_conf(&node, "1.0.0", "cbr0", "10.244.1.0/24", "10.244.1.10");
    let before = node.dump();
    // A file, a directory, a procfs file, another kind of namespace, and the plugin's own
    // network namespace (the node's: the plugins run in the test's).
    let cases = [
        ("/etc/passwd", "is not a network namespace"),
        ("/tmp", "is not a network namespace"),
        ("/proc/self/status", "is not a network namespace"),
        ("/proc/self/ns/uts", "is not a network namespace"),
        ("/proc/self/ns/net", "the plugin's own network namespace"),
    ];
    for (netns, says) in cases {
        for plugin in ["win-bridge", "sdnbridge"] {
            let conf = with(&conf, "type", json!(plugin));
            let run = node.verb(plugin, "ADD", "pod", netns, &conf);
            assert_eq!(run.err_code(), 8, "{plugin} {netns}: {}", run.out);
            assert!(
                run.msg().starts_with("CNI_NETNS: ") && run.msg().contains(says),
                "{plugin} {netns}: {}",
                run.msg()
            );
            assert_eq!(node.dump(), before, "{netns}: HNS changed");
            assert!(
                node.allocations("cbr0").is_empty(),
                "{netns}: an address was taken"
            );
            assert!(node.records().is_empty(), "{netns}: {:?}", node.records());
        }
    }
}
