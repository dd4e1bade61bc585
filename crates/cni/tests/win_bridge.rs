//! win-bridge end to end: the winnet binary run as `win-bridge` by a runtime's rules, hnsd
//! serving a node namespace with its data plane (endpoints become TAPs in the pods'
//! namespaces), Debian's host-local as IPAM.

mod common;

use std::collections::BTreeSet;

use common::{Node, result_ip, win_bridge_conf};
use serde_json::{Value, json};

const NET: &str = "cbr0";

fn node_with_network() -> (Node, String) {
    let node = Node::start();
    node.l2bridge(NET, "10.244.1.0/24", "10.244.1.1");
    let conf = win_bridge_conf(&node, "1.1.0", NET, "10.244.1.0/24", "10.244.1.10");
    (node, conf)
}

#[test]
fn add_creates_endpoint_namespace_and_attachment() {
    let (node, conf) = node_with_network();
    let ns = node.netns("pod1");
    let run = node.verb("win-bridge", "ADD", "pod1", &ns, &conf);
    let r = run.ok();
    assert_eq!(r["cniVersion"], "1.1.0");
    assert_eq!(r["ips"][0]["address"], "10.244.1.10/24");
    // win-bridge's gateway is .2 of the pod's subnet, whatever host-local says (.1).
    assert_eq!(r["ips"][0]["gateway"], "10.244.1.2");
    assert_eq!(r["interfaces"][0]["name"], "pod1_cbr0");
    // On Linux the pod has a real interface: named CNI_IFNAME, in CNI_NETNS, holding the
    // address (what podman and containerd look the pod's IP up by).
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    assert_eq!(r["interfaces"][1]["sandbox"], ns.as_str());
    assert_eq!(r["ips"][0]["interface"], 1);
    assert_eq!(
        r["dns"],
        json!({"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]})
    );

    let eps = node.endpoints();
    assert_eq!(eps.len(), 1);
    let ep = &eps[0];
    assert_eq!(ep.name, "pod1_cbr0");
    assert_eq!(ep.ips().next(), Some("10.244.1.10".parse().unwrap()));
    assert_eq!(
        r["interfaces"][0]["mac"],
        ep.mac_address.unwrap().to_string()
    );
    let linux_mac = ep.mac_address.unwrap().to_string().replace('-', ":");
    assert_eq!(r["interfaces"][1]["mac"], linux_mac.to_lowercase());
    // Config policies plus ipMasqNetwork's OutBoundNAT exception, appended separately.
    let types: Vec<&str> = ep.policies.iter().map(|p| p.type_name()).collect();
    assert_eq!(types, ["OutBoundNAT", "SDNRoute", "OutBoundNAT"]);

    let nss = node.namespaces();
    assert_eq!(nss.len(), 1);
    assert_eq!(nss[0].linux_netns, ns);
    assert_eq!(nss[0].endpoint_ids().collect::<Vec<_>>(), vec![ep.id]);
    assert_eq!(ep.host_compute_namespace, nss[0].id);

    assert_eq!(
        node.allocations(NET),
        vec![("10.244.1.10".into(), "pod1".into())]
    );
    // The pod's vNIC: a TAP named CNI_IFNAME in its namespace, with the allocated address.
    assert_eq!(
        node.addresses_in(&ns, "eth0"),
        Some(vec!["10.244.1.10/24".to_string()]),
        "{}",
        node.hnsd_log()
    );
}

#[test]
fn a_second_container_of_the_pod_joins_the_same_endpoint() {
    let (node, conf) = node_with_network();
    let ns = node.netns("pod1");
    let first = node
        .verb("win-bridge", "ADD", "pod1", &ns, &conf)
        .ok()
        .clone();
    // dockershim style: the workload names the sandbox.
    let joined = node
        .verb("win-bridge", "ADD", "work1", "container:pod1", &conf)
        .ok()
        .clone();
    // containerd style: another container in the same namespace.
    let same_ns = node
        .verb("win-bridge", "ADD", "work2", &ns, &conf)
        .ok()
        .clone();
    assert_eq!(joined, first);
    assert_eq!(same_ns, first);
    assert_eq!(node.endpoints().len(), 1);
    assert_eq!(node.namespaces().len(), 1);
    assert_eq!(node.allocations(NET).len(), 1, "one address per pod");

    // A workload leaving keeps the pod's endpoint and address.
    node.verb("win-bridge", "DEL", "work1", "container:pod1", &conf)
        .ok();
    node.verb("win-bridge", "DEL", "work2", &ns, &conf).ok();
    assert_eq!(node.endpoints().len(), 1);
    assert_eq!(node.allocations(NET).len(), 1);
    node.check("win-bridge", "pod1", &ns, &conf, &first).ok();
}

#[test]
fn a_workload_before_its_sandbox_is_refused_and_creates_nothing() {
    let (node, conf) = node_with_network();
    let before = node.dump();
    let run = node.verb("win-bridge", "ADD", "work1", "container:pause1", &conf);
    assert_eq!(run.err_code(), 3, "{}", run.out);
    assert_eq!(node.dump(), before);
    assert!(node.allocations(NET).is_empty());
    // A failed ADD leaves no record (nor the lock file it took) behind.
    assert!(node.records().is_empty(), "{:?}", node.records());
}

#[test]
fn a_pod_whose_vnic_hnsd_could_not_make_is_not_reported_built() {
    let (node, conf) = node_with_network();
    let ns = node.netns("pod1");
    let name = ns.rsplit('/').next().unwrap_or_default().to_string();
    // Another plugin's interface holds the name the pod's vNIC needs: hnsd cannot make its
    // TAP there (it logs why), so the pod has no network.
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(["-n", &name])
            .args(args)
            .output()
            .expect("run ip");
        assert!(out.status.success(), "ip {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    ip(&[
        "link", "add", "eth0", "type", "veth", "peer", "name", "theirs0",
    ]);
    let theirs = ip(&["-br", "link", "show", "eth0"]);
    let before = node.dump();
    let run = node.verb("win-bridge", "ADD", "pod1", &ns, &conf);
    assert_eq!(run.err_code(), 102, "{}", run.out);
    assert!(
        run.msg().contains("vNIC eth0") && run.msg().contains("is not the endpoint's vNIC"),
        "{}",
        run.msg()
    );
    // Undone: no endpoint or namespace in HNS, no address, no record; theirs untouched.
    assert_eq!(node.dump(), before, "HNS changed");
    assert!(node.allocations(NET).is_empty(), "an address is still held");
    assert!(node.records().is_empty(), "{:?}", node.records());
    assert_eq!(ip(&["-br", "link", "show", "eth0"]), theirs);
    // With the name free, the same ADD builds the pod.
    ip(&["link", "del", "eth0"]);
    let r = node.verb("win-bridge", "ADD", "pod1", &ns, &conf);
    let address = r.ok()["ips"][0]["address"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(node.addresses_in(&ns, "eth0"), Some(vec![address]));
    assert!(ip(&["-br", "link", "show", "eth0"]).contains("UP"));
    assert_eq!(node.allocations(NET).len(), 1);
}

#[test]
fn check_passes_then_fails_when_the_endpoint_is_deleted_behind_its_back() {
    let (node, conf) = node_with_network();
    let ns = node.netns("pod1");
    let result = node
        .verb("win-bridge", "ADD", "pod1", &ns, &conf)
        .ok()
        .clone();
    node.check("win-bridge", "pod1", &ns, &conf, &result).ok();

    // A prevResult that disagrees with HNS fails, naming what differs.
    let mut wrong = result.clone();
    wrong["ips"][0]["address"] = json!("10.244.1.99/24");
    let run = node.check("win-bridge", "pod1", &ns, &conf, &wrong);
    assert_eq!(run.err_code(), 100);
    assert!(
        run.msg().contains("10.244.1.10") && run.msg().contains("10.244.1.99"),
        "{}",
        run.msg()
    );

    // A policy removed behind its back.
    let ep = node.endpoints().remove(0);
    let masq = ep.policies[2].clone();
    node.hns(
        node.client()
            .endpoint_policy(ep.id, hcn::RequestType::Remove, vec![masq]),
    )
    .expect("remove policy");
    let run = node.check("win-bridge", "pod1", &ns, &conf, &result);
    assert_eq!(run.err_code(), 100);
    assert!(
        run.msg().contains("lacks the configured policy"),
        "{}",
        run.msg()
    );

    // The endpoint deleted behind its back.
    let client = node.client();
    node.hns(client.remove_namespace_endpoint(ep.host_compute_namespace, ep.id))
        .expect("detach");
    node.hns(client.delete_endpoint(ep.id)).expect("delete");
    let run = node.check("win-bridge", "pod1", &ns, &conf, &result);
    assert_eq!(run.err_code(), 100);
    assert!(
        run.msg().contains("pod1_cbr0") && run.msg().contains("does not exist"),
        "{}",
        run.msg()
    );
}

#[test]
fn check_notices_a_detached_endpoint_and_a_released_address() {
    let (node, conf) = node_with_network();
    let ns = node.netns("pod1");
    let result = node
        .verb("win-bridge", "ADD", "pod1", &ns, &conf)
        .ok()
        .clone();
    let ep = node.endpoints().remove(0);
    node.hns(
        node.client()
            .remove_namespace_endpoint(ep.host_compute_namespace, ep.id),
    )
    .expect("detach");
    let run = node.check("win-bridge", "pod1", &ns, &conf, &result);
    assert_eq!(run.err_code(), 100);
    assert!(run.msg().contains("attached"), "{}", run.msg());
    node.hns(
        node.client()
            .add_namespace_endpoint(ep.host_compute_namespace, ep.id),
    )
    .expect("attach");
    node.check("win-bridge", "pod1", &ns, &conf, &result).ok();

    // host-local's own CHECK runs too: its allocation gone is a failure.
    for f in std::fs::read_dir(node.ipam_dir().join(NET))
        .unwrap()
        .flatten()
    {
        if f.file_name()
            .to_string_lossy()
            .parse::<std::net::IpAddr>()
            .is_ok()
        {
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    let run = node.check("win-bridge", "pod1", &ns, &conf, &result);
    assert_ne!(run.code, 0, "{}", run.out);
    assert!(run.msg().starts_with("ipam"), "{}", run.msg());
}

#[test]
fn del_removes_everything_and_a_second_del_succeeds() {
    let (node, conf) = node_with_network();
    let ns = node.netns("pod1");
    node.verb("win-bridge", "ADD", "pod1", &ns, &conf).ok();
    node.verb("win-bridge", "DEL", "pod1", &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
    assert!(
        node.namespaces().is_empty(),
        "the namespace made for the netns path goes too"
    );
    assert!(node.allocations(NET).is_empty());
    assert!(node.records().is_empty(), "{:?}", node.records());
    node.verb("win-bridge", "DEL", "pod1", &ns, &conf).ok();
    // DEL without CNI_NETNS (the runtime lost it) also succeeds.
    node.call(
        "win-bridge",
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "pod1"),
            ("CNI_IFNAME", "eth0"),
        ],
        &conf,
    )
    .ok();
}

#[test]
fn del_without_netns_still_cleans_up() {
    let (node, conf) = node_with_network();
    let ns = node.netns("pod1");
    node.verb("win-bridge", "ADD", "pod1", &ns, &conf).ok();
    node.call(
        "win-bridge",
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "pod1"),
            ("CNI_IFNAME", "eth0"),
        ],
        &conf,
    )
    .ok();
    assert!(node.endpoints().is_empty());
    assert!(node.namespaces().is_empty());
    assert!(node.allocations(NET).is_empty());
}

#[test]
fn gc_collects_a_leaked_attachment() {
    let (node, conf) = node_with_network();
    let keep = node.netns("keep");
    let leak = node.netns("leak");
    let kept = node
        .verb("win-bridge", "ADD", "keep", &keep, &conf)
        .ok()
        .clone();
    node.verb("win-bridge", "ADD", "leak", &leak, &conf).ok();
    assert_eq!(node.endpoints().len(), 2);

    let run = node.gc("win-bridge", &conf, &["keep"]);
    assert_eq!(run.code, 0, "{}", run.out);
    assert_eq!(run.out, Value::Null, "GC prints nothing on success");
    let eps = node.endpoints();
    assert_eq!(
        eps.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["keep_cbr0"]
    );
    assert_eq!(node.namespaces().len(), 1);
    assert_eq!(
        node.allocations(NET),
        vec![(
            result_ip(&kept).trim_end_matches("/24").to_string(),
            "keep".into()
        )]
    );
    node.check("win-bridge", "keep", &keep, &conf, &kept).ok();

    // Without the list GC refuses rather than collect everything.
    let run = node.call("win-bridge", &[("CNI_COMMAND", "GC")], &conf);
    assert_eq!(run.err_code(), 7);
    assert_eq!(node.endpoints().len(), 1);
}

#[test]
fn gc_collects_an_endpoint_whose_record_is_lost() {
    let (node, conf) = node_with_network();
    let ns = node.netns("lost");
    node.verb("win-bridge", "ADD", "lost", &ns, &conf).ok();
    std::fs::remove_dir_all(node.state_dir()).unwrap();
    node.gc("win-bridge", &conf, &[]).ok();
    assert!(node.endpoints().is_empty());
    assert!(node.namespaces().is_empty() || node.namespaces()[0].endpoint_ids().next().is_none());
}

#[test]
fn fifty_parallel_adds_give_fifty_addresses_and_fifty_dels_leave_nothing() {
    let (node, conf) = node_with_network();
    let pods: Vec<(String, String)> = (0..50)
        .map(|i| (format!("pod{i}"), node.netns(&format!("pod{i}"))))
        .collect();
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = pods
            .iter()
            .map(|(id, ns)| {
                let (node, conf) = (&node, &conf);
                s.spawn(move || node.verb("win-bridge", "ADD", id, ns, conf).ok().clone())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("ADD thread"))
            .collect()
    });
    let addrs: BTreeSet<String> = results.iter().map(result_ip).collect();
    assert_eq!(addrs.len(), 50, "50 distinct addresses");
    assert_eq!(node.endpoints().len(), 50);
    assert_eq!(node.namespaces().len(), 50);
    assert_eq!(node.allocations(NET).len(), 50);
    for ((_, ns), r) in pods.iter().zip(&results) {
        assert_eq!(
            node.addresses_in(ns, "eth0"),
            Some(vec![
                r["ips"][0]["address"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            ]),
            "the pod's TAP carries its address"
        );
    }

    std::thread::scope(|s| {
        for (id, ns) in &pods {
            let (node, conf) = (&node, &conf);
            s.spawn(move || node.verb("win-bridge", "DEL", id, ns, conf).ok().clone());
        }
    });
    assert!(node.endpoints().is_empty());
    assert!(node.namespaces().is_empty());
    assert!(
        node.allocations(NET).is_empty(),
        "{:?}",
        node.allocations(NET)
    );
    assert!(node.records().is_empty(), "{:?}", node.records());
    for (_, ns) in &pods {
        assert_eq!(
            node.addresses_in(ns, "eth0"),
            None,
            "DEL removes the pod's TAP"
        );
    }
}

#[test]
fn a_failed_add_releases_its_address_and_leaves_no_endpoint() {
    let node = Node::start();
    node.l2bridge(NET, "10.244.1.0/24", "10.244.1.1");
    // IPAM hands out an address outside the network's subnet: hnsd refuses the endpoint.
    let conf = win_bridge_conf(&node, "1.0.0", NET, "10.99.0.0/24", "10.99.0.10");
    let before = node.dump();
    let ns = node.netns("pod1");
    let run = node.verb("win-bridge", "ADD", "pod1", &ns, &conf);
    assert_eq!(run.err_code(), 101, "{}", run.out);
    assert!(run.msg().contains("create the endpoint"), "{}", run.msg());
    assert_eq!(node.dump(), before);
    assert!(
        node.allocations(NET).is_empty(),
        "{:?}",
        node.allocations(NET)
    );
    assert!(node.records().is_empty(), "{:?}", node.records());
}

#[test]
fn results_come_in_the_config_version() {
    let node = Node::start();
    node.l2bridge(NET, "10.244.1.0/24", "10.244.1.1");
    for (i, v) in ["0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]
        .iter()
        .enumerate()
    {
        let conf = win_bridge_conf(&node, v, NET, "10.244.1.0/24", "10.244.1.10");
        let ns = node.netns(&format!("p{i}"));
        let r = node
            .verb("win-bridge", "ADD", &format!("p{i}"), &ns, &conf)
            .ok()
            .clone();
        assert_eq!(r["cniVersion"], *v);
        match *v {
            "0.2.0" => {
                assert!(r["ip4"]["ip"].is_string(), "{r}");
                assert!(r.get("ips").is_none());
            }
            "0.3.1" | "0.4.0" => assert_eq!(r["ips"][0]["version"], "4"),
            _ => assert!(r["ips"][0].get("version").is_none(), "{r}"),
        }
        node.verb("win-bridge", "DEL", &format!("p{i}"), &ns, &conf)
            .ok();
    }
}

#[test]
fn version_status_and_their_failures() {
    let (mut node, conf) = node_with_network();
    let v = node.call("win-bridge", &[("CNI_COMMAND", "VERSION")], "");
    assert_eq!(
        v.ok()["supportedVersions"],
        json!([
            "0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"
        ])
    );
    let run = node.call("win-bridge", &[("CNI_COMMAND", "STATUS")], &conf);
    assert_eq!(run.code, 0, "{}", run.out);

    let other = common::with(&conf, "name", json!("nosuchnet"));
    let run = node.call("win-bridge", &[("CNI_COMMAND", "STATUS")], &other);
    assert_eq!(run.err_code(), 50);
    assert!(run.msg().contains("nosuchnet"), "{}", run.msg());

    node.stop_hnsd();
    let run = node.call("win-bridge", &[("CNI_COMMAND", "STATUS")], &conf);
    assert_eq!(run.err_code(), 51);
    // ADD and DEL with hnsd down: try again later.
    let ns = node.netns("pod1");
    assert_eq!(
        node.verb("win-bridge", "ADD", "pod1", &ns, &conf)
            .err_code(),
        11
    );
    assert_eq!(
        node.verb("win-bridge", "DEL", "pod1", &ns, &conf)
            .err_code(),
        11
    );
}

#[test]
fn hns_ipam_when_the_config_has_no_ipam() {
    let node = Node::start();
    node.l2bridge(NET, "10.244.1.0/24", "10.244.1.1");
    let conf =
        json!({"cniVersion": "1.0.0", "name": NET, "type": "win-bridge", "loopbackDSR": true})
            .to_string();
    let ns = node.netns("pod1");
    let r = node
        .verb("win-bridge", "ADD", "pod1", &ns, &conf)
        .ok()
        .clone();
    let ip = result_ip(&r);
    assert!(ip.starts_with("10.244.1.") && ip.ends_with("/24"), "{ip}");
    // loopbackDSR needs the address: HNS picked it, and the policy names it.
    let ep = node.endpoints().remove(0);
    let dsr = serde_json::to_value(&ep.policies).unwrap();
    assert!(
        dsr.to_string().contains(&format!(
            "\"Destinations\":[\"{}\"]",
            ip.trim_end_matches("/24")
        )),
        "{dsr}"
    );
    node.check("win-bridge", "pod1", &ns, &conf, &r).ok();
    node.verb("win-bridge", "DEL", "pod1", &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
}

#[test]
fn an_hcn_namespace_guid_and_none_work_too() {
    let (node, conf) = node_with_network();
    // containerd on Windows: the runtime made the namespace and passes its ID.
    let ns = node
        .hns(node.client().create_namespace(&hcn::Namespace::default()))
        .expect("namespace");
    let id = ns.id.to_string();
    let r = node
        .verb("win-bridge", "ADD", "pod1", &id, &conf)
        .ok()
        .clone();
    let ns = node.hns(node.client().get_namespace_by_id(ns.id)).unwrap();
    assert_eq!(ns.endpoint_ids().count(), 1);
    // A Windows namespace reference keeps the upstream result: the endpoint, no sandbox.
    assert_eq!(r["interfaces"].as_array().map(Vec::len), Some(1), "{r}");
    assert!(r["ips"][0].get("interface").is_none(), "{r}");
    node.check("win-bridge", "pod1", &id, &conf, &r).ok();
    node.verb("win-bridge", "DEL", "pod1", &id, &conf).ok();
    // The runtime's namespace stays; it is the runtime's to delete.
    assert_eq!(node.namespaces().len(), 1);
    assert!(node.endpoints().is_empty());

    // dockershim: the pause container with `none`, then a workload joining it.
    node.verb("win-bridge", "ADD", "pause1", "none", &conf).ok();
    node.verb("win-bridge", "ADD", "work1", "container:pause1", &conf)
        .ok();
    assert_eq!(node.endpoints().len(), 1);
    node.verb("win-bridge", "DEL", "work1", "container:pause1", &conf)
        .ok();
    node.verb("win-bridge", "DEL", "pause1", "none", &conf).ok();
    assert!(node.endpoints().is_empty());
    assert!(node.allocations(NET).is_empty());

    let missing = "5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D";
    assert_eq!(
        node.verb("win-bridge", "ADD", "pod2", missing, &conf)
            .err_code(),
        8
    );
}

#[test]
fn runtime_port_mappings_and_dns_reach_the_endpoint() {
    let (node, conf) = node_with_network();
    let conf = common::with(
        &conf,
        "runtimeConfig",
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
               "dns": {"servers": ["10.96.0.53"], "searches": ["ns1.svc.cluster.local"]}}),
    );
    let ns = node.netns("pod1");
    let r = node
        .verb("win-bridge", "ADD", "pod1", &ns, &conf)
        .ok()
        .clone();
    assert_eq!(r["dns"]["nameservers"], json!(["10.96.0.53"]));
    let ep = node.endpoints().remove(0);
    let pm = ep.policies.iter().find_map(|p| match p {
        hcn::EndpointPolicy::PortMapping(s) => Some(s.clone()),
        _ => None,
    });
    let pm = pm.expect("a PortMapping policy");
    assert_eq!(
        (pm.external_port, pm.internal_port, pm.protocol),
        (8080, 80, 6)
    );
    assert_eq!(ep.dns.search, ["ns1.svc.cluster.local"]);
}

#[test]
fn the_pods_resolv_conf_goes_with_the_last_endpoint_of_its_namespace() {
    let (node, conf) = node_with_network();
    node.l2bridge("net2", "10.245.1.0/24", "10.245.1.1");
    let conf2 = win_bridge_conf(&node, "1.1.0", "net2", "10.245.1.0/24", "10.245.1.10");
    let ns = node.netns("pod1");
    let name = ns.rsplit('/').next().unwrap().to_string();
    let dir = std::path::Path::new("/etc/netns").join(&name);
    let eth1 = |verb| {
        [
            ("CNI_COMMAND", verb),
            ("CNI_CONTAINERID", "pod1"),
            ("CNI_NETNS", ns.as_str()),
            ("CNI_IFNAME", "eth1"),
        ]
    };
    node.verb("win-bridge", "ADD", "pod1", &ns, &conf).ok();
    node.call("win-bridge", &eth1("ADD"), &conf2).ok();
    let text = std::fs::read_to_string(dir.join("resolv.conf")).expect("hnsd wrote resolv.conf");
    // The test node's profile is a Windows build: the pod's resolver is its DNS client stub.
    assert!(text.contains("nameserver 127.0.0.53"), "{text}");

    // Two endpoints in one namespace share the file: it stays while one is left.
    node.call("win-bridge", &eth1("DEL"), &conf2).ok();
    assert!(dir.join("resolv.conf").is_file(), "{}", node.hnsd_log());
    node.verb("win-bridge", "DEL", "pod1", &ns, &conf).ok();
    assert!(!dir.exists(), "{} is left behind", dir.display());
}
