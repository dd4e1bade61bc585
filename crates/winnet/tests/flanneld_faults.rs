//! `winnet flanneld` facing what a node really meets, as root over real namespaces with etcd:
//! an HNS network of the wrong type under the name it wants, the subnet of its last run leased
//! to another node, subnets other nodes hold; and Linux host-gw end to end.

mod flannel_lab;

use std::net::{TcpListener, TcpStream};
use std::process::Command;

use flannel_lab::*;

const VXLAN: &str =
    r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}"#;

/// `winnet hns create KIND -f -` with `doc` against `sock`.
fn hns_create(sock: &std::path::Path, kind: &str, doc: &str) {
    let out = run_with_stdin(
        Command::new(WINNET)
            .args(["hns", "create", kind, "-f", "-", "--hns-socket"])
            .arg(sock),
        doc,
    );
    assert!(
        out.status.success(),
        "hns create {kind}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_hns_network_of_the_wrong_type_under_the_name_is_replaced_with_a_message() {
    let mut lab = Lab::new("wrong");
    put_config(&lab, VXLAN);
    let w = lab.node(0);
    let sock = lab.hnsd(w);
    // Left by something else: an L2Bridge network named as flannel's Overlay network.
    hns_create(
        &sock,
        "network",
        r#"{"Name":"flannel.4096","Type":"L2Bridge","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.99.0.0/24",
            "Routes":[{"NextHop":"10.99.0.1","DestinationPrefix":"0.0.0.0/0"}]}]}],
            "Policies":[{"Type":"NetAdapterName","Settings":{"NetworkAdapterName":"eth0"}}]}"#,
    );
    let old = network(&sock, "flannel.4096").expect("the old network");
    let sock_text = sock.to_string_lossy().into_owned();
    let p = lab.flanneld(w, &["--hns-socket", &sock_text]);
    lab.wait_ready(p);
    let log = lab.procs[p].log();
    assert!(
        log.contains("replacing HNS network flannel.4096: it is L2Bridge"),
        "{log}"
    );
    let all = hns_json(&sock, &["list", "networks"]);
    let named: Vec<_> = all
        .as_array()
        .expect("networks")
        .iter()
        .filter(|n| n["Name"] == "flannel.4096")
        .collect();
    assert_eq!(named.len(), 1, "one network under the name: {all}");
    assert_eq!(named[0]["Type"], "Overlay");
    assert_ne!(named[0]["ID"], old["ID"], "the old network was kept");
    assert_eq!(
        named[0]["Ipams"][0]["Subnets"][0]["IpAddressPrefix"],
        lab.lease_of(w).to_string()
    );
}

#[test]
fn the_last_runs_subnet_leased_to_another_node_gives_a_fresh_lease_and_leaves_others_alone() {
    let mut lab = Lab::new("prev");
    put_config(&lab, VXLAN);
    let a = lab.node(0);
    // Two other nodes hold 10.244.1.0/24 (the first subnet flanneld would take) and
    // 10.244.5.0/24 (the one this node had before it was away), each under an etcd lease.
    let held = [
        ("10.244.1.0-24", "10.1.1.1", "0e:00:00:00:01:01"),
        ("10.244.5.0-24", "10.1.1.5", "0e:00:00:00:01:05"),
    ];
    let mut values = Vec::new();
    for (key, ip, mac) in held {
        let grant = lab.etcdctl(&["lease", "grant", "600"]);
        let id = grant
            .split_whitespace()
            .nth(1)
            .expect("lease <id> granted")
            .to_string();
        let value = format!(
            r#"{{"PublicIP":"{ip}","BackendType":"vxlan","BackendData":{{"VNI":4096,"VtepMAC":"{mac}"}}}}"#
        );
        let key = format!("/coreos.com/network/subnets/{key}");
        lab.etcdctl(&["put", &key, &value, &format!("--lease={id}")]);
        values.push((key, value));
    }
    lab.put_subnet_env(
        a,
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.5.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
    );

    let p = lab.flanneld(a, &[]);
    lab.wait_ready(p);
    let log = lab.procs[p].log();
    assert!(
        log.contains("subnet 10.244.5.0/24 of the last run is leased to 10.1.1.5; taking another"),
        "{log}"
    );
    let mine = lab.lease_of(a);
    assert_eq!(mine.to_string(), "10.244.2.0/24", "the first free subnet");
    // The others' keys are as they were, and there is exactly one more: ours.
    for (key, value) in &values {
        assert_eq!(
            lab.etcdctl(&["get", key, "--print-value-only"]).trim(),
            value
        );
    }
    let keys = lab.lease_keys();
    let mut want: Vec<String> = ["10.244.1.0-24".to_string(), "10.244.5.0-24".to_string()]
        .into_iter()
        .chain([format!("{}-24", mine.network())])
        .map(|k| format!("/coreos.com/network/subnets/{k}"))
        .collect();
    want.sort();
    assert_eq!(keys, want);
    let leases = lab.etcdctl(&["lease", "list"]);
    assert!(
        leases.starts_with("found 3 leases"),
        "an etcd lease left behind: {leases}"
    );
    // The VXLAN device holds our subnet only, and the other nodes are routed to.
    let dev = lab.nodes[a].ip(&["-4", "addr", "show", "flannel.4096"]);
    assert!(
        dev.contains(&format!("inet {}/32", mine.network())),
        "{dev}"
    );
    assert!(!dev.contains("10.244.5."), "{dev}");
    wait_for("routes to both other nodes", 30, || {
        let r = lab.nodes[a].ip(&["route", "show"]);
        r.contains("10.244.1.0/24 via 10.244.1.0 dev flannel.4096")
            && r.contains("10.244.5.0/24 via 10.244.5.0 dev flannel.4096")
    });
}

#[test]
fn linux_host_gw_nodes_route_each_others_pods() {
    let mut lab = Lab::new("lgw");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let (a, b) = (lab.node(0), lab.node(1));
    let (pa, pb) = (lab.flanneld(a, &[]), lab.flanneld(b, &[]));
    lab.wait_ready(pa);
    lab.wait_ready(pb);
    let (sa, sb) = (lab.lease_of(a), lab.lease_of(b));
    let env = lab.subnet_env(a).expect("subnet.env");
    assert!(
        env.contains("FLANNEL_MTU=1500\n"),
        "host-gw keeps the MTU: {env}"
    );
    for (n, other, via) in [(a, sb, lab.node_ip(1)), (b, sa, lab.node_ip(0))] {
        wait_for("the host-gw route to the other node's subnet", 30, || {
            lab.nodes[n]
                .ip(&["route", "show", &other.to_string()])
                .contains(&format!("via {via} dev eth0"))
        });
    }
    assert!(
        !lab.nodes[a].ip(&["link", "show"]).contains("flannel."),
        "host-gw made a VXLAN device"
    );
    let ipa = lab.linux_pod(a, sa);
    let ipb = lab.linux_pod(b, sb);
    let server = lab.pods[1].run(move || TcpListener::bind((ipb, 7000)).expect("listen"));
    let mut client = lab.pods[0].run(move || TcpStream::connect((ipb, 7000)).expect("connect"));
    let (mut conn, peer) = server.accept().expect("accept");
    assert_eq!(peer.ip(), std::net::IpAddr::V4(ipa), "routed, not NATed");
    echo(&mut client, &mut conn, b"host-gw");
}

#[test]
fn a_wrong_network_that_cannot_be_replaced_stops_flanneld_with_nothing_half_made() {
    let mut lab = Lab::new("stuck");
    put_config(&lab, VXLAN);
    let w = lab.node(0);
    let sock = lab.hnsd(w);
    hns_create(
        &sock,
        "network",
        r#"{"Name":"flannel.4096","Type":"L2Bridge","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.99.0.0/24",
            "Routes":[{"NextHop":"10.99.0.1","DestinationPrefix":"0.0.0.0/0"}]}]}],
            "Policies":[{"Type":"NetAdapterName","Settings":{"NetworkAdapterName":"eth0"}}]}"#,
    );
    let old = network(&sock, "flannel.4096").expect("the old network");
    // A container's endpoint is still on it: HNS will not delete the network.
    let id = old["ID"].as_str().expect("id");
    hns_create(
        &sock,
        "endpoint",
        &format!(
            r#"{{"Name":"someones-pod","HostComputeNetwork":"{id}","IpConfigurations":[{{"IpAddress":"10.99.0.9","PrefixLength":24}}]}}"#
        ),
    );
    let sock_text = sock.to_string_lossy().into_owned();
    let p = lab.flanneld(w, &["--hns-socket", &sock_text]);
    let status = lab.procs[p].wait_exit(60);
    assert!(!status.success());
    let log = lab.procs[p].log();
    assert!(
        log.contains("cannot replace HNS network flannel.4096 of the wrong shape")
            && log.contains("remove its endpoints first"),
        "{log}"
    );
    assert_eq!(
        network(&sock, "flannel.4096").expect("the network")["ID"],
        old["ID"],
        "the old network was touched"
    );
    assert!(lab.subnet_env(w).is_none(), "subnet.env without a network");
    let keys = lab.lease_keys();
    assert!(
        keys.is_empty(),
        "a lease left for a node without a network: {keys:?}"
    );
}

#[test]
fn a_lease_outside_a_changed_network_is_given_up_for_one_inside_saying_so() {
    let mut lab = Lab::new("chnet");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let a = lab.node(0);
    let p = lab.flanneld(a, &[]);
    lab.wait_ready(p);
    let old = lab.lease_of(a);
    // The cluster's network changes while the node is down; its lease is still in etcd.
    lab.procs[p].kill9();
    put_config(
        &lab,
        r#"{"Network":"10.99.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let p = lab.flanneld(a, &[]);
    lab.wait_ready(p);
    let new = lab.lease_of(a);
    let network: ipnet::Ipv4Net = "10.99.0.0/16".parse().expect("net");
    assert!(network.contains(&new), "kept {new} outside {network}");
    let env = lab.subnet_env(a).expect("subnet.env");
    assert!(
        env.starts_with(&format!(
            "FLANNEL_NETWORK=10.99.0.0/16\nFLANNEL_SUBNET={}/24\n",
            std::net::Ipv4Addr::from(u32::from(new.network()) + 1)
        )),
        "{env}"
    );
    let log = lab.procs[p].log();
    assert!(
        log.contains(&format!(
            "found lease {old} for this node ({}) but it is not compatible with the current config (Network 10.99.0.0/16, SubnetLen 24); deleting it",
            lab.node_ip(0)
        )),
        "{log}"
    );
    assert_eq!(
        lab.lease_keys(),
        [format!("/coreos.com/network/subnets/{}-24", new.network())],
        "the old lease is still in etcd"
    );
}

#[test]
fn a_last_runs_subnet_outside_the_network_is_ignored_saying_so() {
    let mut lab = Lab::new("chenv");
    put_config(
        &lab,
        r#"{"Network":"10.99.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let a = lab.node(0);
    lab.put_subnet_env(
        a,
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n",
    );
    let p = lab.flanneld(a, &[]);
    lab.wait_ready(p);
    assert_eq!(lab.lease_of(a).to_string(), "10.99.1.0/24");
    let log = lab.procs[p].log();
    assert!(
        log.contains("subnet 10.244.1.0/24 of the last run is not compatible with the current config (Network 10.99.0.0/16, SubnetLen 24); ignoring it"),
        "{log}"
    );
}
