//! `winnet flanneld --kube-subnet-mgr` end to end, as root, against a Kubernetes API test
//! server (`flannel_lab::kube_api`, in the fabric namespace): the Node's podCIDR is the lease,
//! flanneld publishes its backend in the Node's annotations with a merge patch, and follows the
//! other Nodes (a Node added brings its route or RemoteSubnetRoute, a Node deleted takes it).

mod flannel_lab;

use flannel_lab::kube_api::{KubeApi, host_gw_annotations, node};
use flannel_lab::*;
use serde_json::json;

const HOST_GW: &str = r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#;
const VXLAN: &str = r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096}}"#;

/// flanneld on `node` as Node `name`, leasing from `api`, with `extra` flags.
fn kube_flanneld(
    lab: &mut Lab,
    api: &KubeApi,
    node: usize,
    name: &str,
    conf: &str,
    extra: &[&str],
) -> usize {
    let kc = api.kubeconfig(lab).to_string_lossy().into_owned();
    let nc = lab.net_conf_file(conf).to_string_lossy().into_owned();
    let mut args = vec![
        "--kube-subnet-mgr",
        "--kubeconfig-file",
        &kc,
        "--node-name",
        name,
        "--net-config-path",
        &nc,
    ];
    args.extend_from_slice(extra);
    lab.flanneld(node, &args)
}

fn route(lab: &Lab, node: usize, subnet: &str) -> String {
    lab.nodes[node].ip(&["route", "show", subnet])
}

#[test]
fn the_pod_cidr_is_the_lease_the_backend_is_published_and_other_nodes_are_followed() {
    let mut lab = Lab::bare("kgw");
    let api = KubeApi::start(&lab);
    let a = lab.node(0);
    api.put_node(node("wnt-a", Some("10.244.1.0/24"), json!({})));
    api.put_node(node(
        "wnt-b",
        Some("10.244.2.0/24"),
        host_gw_annotations(lab.node_ip(1)),
    ));
    let p = kube_flanneld(&mut lab, &api, a, "wnt-a", HOST_GW, &[]);
    lab.wait_ready(p);
    let env = lab.subnet_env(a).expect("subnet.env");
    assert!(
        env.contains("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n"),
        "{env}"
    );

    // The four annotations, written with a merge patch that touches nothing else.
    let annotations = &api.get("wnt-a").expect("Node wnt-a")["metadata"]["annotations"];
    assert_eq!(
        annotations,
        &host_gw_annotations(lab.node_ip(0)),
        "flanneld's annotations"
    );
    let patches = api.patches();
    assert!(!patches.is_empty());
    for (kind, body) in &patches {
        assert_eq!(kind, "application/merge-patch+json");
        let keys: Vec<_> = body
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["metadata"], "{body}");
    }

    let via = |i: u8| format!("via {}", lab.node_ip(i));
    wait_for("the route to Node wnt-b's podCIDR", 30, || {
        route(&lab, a, "10.244.2.0/24").contains(&via(1))
    });
    api.put_node(node(
        "wnt-c",
        Some("10.244.3.0/24"),
        host_gw_annotations(lab.node_ip(2)),
    ));
    wait_for("the route to the added Node wnt-c", 30, || {
        route(&lab, a, "10.244.3.0/24").contains(&via(2))
    });
    // A Node whose annotations are not flannel's shape is skipped, saying which and why.
    let mut bad = host_gw_annotations(lab.node_ip(3));
    bad["flannel.alpha.coreos.com/public-ip"] = json!("not-an-ip");
    api.put_node(node("wnt-bad", Some("10.244.4.0/24"), bad));
    wait_for("the warning about Node wnt-bad", 30, || {
        lab.procs[p]
            .log()
            .contains(r#"skipping Node wnt-bad: public-ip "not-an-ip" is not an IPv4 address"#)
    });
    assert!(route(&lab, a, "10.244.4.0/24").trim().is_empty());
    api.delete_node("wnt-c");
    wait_for("the deleted Node's route to go", 30, || {
        route(&lab, a, "10.244.3.0/24").trim().is_empty()
    });
    assert!(
        route(&lab, a, "10.244.2.0/24").contains(&via(1)),
        "wnt-b's route went too"
    );
}

#[test]
fn a_node_without_a_pod_cidr_waits_for_one_saying_so() {
    let mut lab = Lab::bare("kwait");
    let api = KubeApi::start(&lab);
    let a = lab.node(0);
    api.put_node(node("wnt-a", None, json!({})));
    let p = kube_flanneld(&mut lab, &api, a, "wnt-a", HOST_GW, &[]);
    wait_for("the message about the missing podCIDR", 30, || {
        let log = lab.procs[p].log();
        log.contains("Node wnt-a has no IPv4 spec.podCIDR yet") && log.contains("waiting for it")
    });
    assert!(lab.subnet_env(a).is_none(), "subnet.env without a lease");
    assert!(api.patches().is_empty(), "annotated without a lease");
    // The controller manager assigns one: flanneld goes on by itself.
    api.put_node(node("wnt-a", Some("10.244.7.0/24"), json!({})));
    lab.wait_ready(p);
    let env = lab.subnet_env(a).expect("subnet.env");
    assert!(env.contains("FLANNEL_SUBNET=10.244.7.1/24\n"), "{env}");
}

#[test]
fn a_pod_cidr_another_node_holds_is_refused_and_nothing_is_made() {
    let mut lab = Lab::bare("kdup");
    let api = KubeApi::start(&lab);
    let a = lab.node(0);
    api.put_node(node("wnt-a", Some("10.244.1.0/24"), json!({})));
    api.put_node(node(
        "wnt-b",
        Some("10.244.1.0/24"),
        host_gw_annotations(lab.node_ip(1)),
    ));
    let p = kube_flanneld(&mut lab, &api, a, "wnt-a", HOST_GW, &[]);
    let status = lab.procs[p].wait_exit(30);
    assert!(!status.success());
    let log = lab.procs[p].log();
    assert!(
        log.contains("podCIDR 10.244.1.0/24 of Node wnt-a is also Node wnt-b's"),
        "{log}"
    );
    assert!(
        lab.subnet_env(a).is_none(),
        "subnet.env for a refused lease"
    );
    assert!(api.patches().is_empty(), "annotated with a refused lease");
    assert_eq!(
        api.get("wnt-b").expect("wnt-b")["metadata"]["annotations"],
        host_gw_annotations(lab.node_ip(1)),
        "the other Node was touched"
    );
}

#[test]
fn a_pod_cidr_outside_the_network_is_refused_as_flannel_does_and_nothing_is_made() {
    let mut lab = Lab::bare("kout");
    let api = KubeApi::start(&lab);
    let a = lab.node(0);
    api.put_node(node("wnt-a", Some("10.99.1.0/24"), json!({})));
    let p = kube_flanneld(&mut lab, &api, a, "wnt-a", HOST_GW, &[]);
    let status = lab.procs[p].wait_exit(30);
    assert!(!status.success());
    let log = lab.procs[p].log();
    assert!(
        log.contains(r#"subnet "10.244.0.0/16" specified in the flannel net config doesn't contain "10.99.1.0/24" PodCIDR of the "wnt-a" node"#),
        "{log}"
    );
    assert!(
        lab.subnet_env(a).is_none(),
        "subnet.env for a refused lease"
    );
    assert!(api.patches().is_empty(), "annotated with a refused lease");
}

#[test]
fn a_windows_vxlan_node_keeps_a_remote_subnet_route_per_node() {
    let mut lab = Lab::bare("kvx");
    let api = KubeApi::start(&lab);
    let w = lab.node(0);
    let sock = lab.hnsd(w);
    let vxlan = |ip: std::net::Ipv4Addr, mac: &str| {
        json!({
            "flannel.alpha.coreos.com/backend-type": "vxlan",
            "flannel.alpha.coreos.com/backend-data": format!(r#"{{"VNI":4096,"VtepMAC":"{mac}"}}"#),
            "flannel.alpha.coreos.com/public-ip": ip.to_string(),
            "flannel.alpha.coreos.com/kube-subnet-manager": "true",
        })
    };
    api.put_node(node("wnt-w", Some("10.244.1.0/24"), json!({})));
    api.put_node(node(
        "wnt-l",
        Some("10.244.2.0/24"),
        vxlan(lab.node_ip(1), "0e:00:00:00:00:02"),
    ));
    let sock_text = sock.to_string_lossy().into_owned();
    let p = kube_flanneld(
        &mut lab,
        &api,
        w,
        "wnt-w",
        VXLAN,
        &["--hns-socket", &sock_text],
    );
    lab.wait_ready(p);
    let net = network(&sock, "flannel.4096").expect("the Overlay network");
    assert_eq!(net["Type"], "Overlay");
    assert_eq!(
        net["Ipams"][0]["Subnets"][0]["IpAddressPrefix"],
        "10.244.1.0/24"
    );
    // The DR MAC HNS chose is the VtepMAC in the Node's backend-data.
    let dr_mac = policies_of(&net, "DrMacAddress")[0]["Settings"]["Address"]
        .as_str()
        .expect("DR MAC")
        .to_ascii_lowercase()
        .replace('-', ":");
    let published = api.get("wnt-w").expect("wnt-w")["metadata"]["annotations"].clone();
    assert_eq!(published, vxlan(lab.node_ip(0), &dr_mac));

    let rsr = || {
        network(&sock, "flannel.4096")
            .map(|n| {
                policies_of(&n, "RemoteSubnetRoute")
                    .into_iter()
                    .map(|p| {
                        p["Settings"]["DestinationPrefix"]
                            .as_str()
                            .map(String::from)
                    })
                    .collect::<Option<Vec<_>>>()
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    };
    wait_for("the RemoteSubnetRoute of Node wnt-l", 30, || {
        rsr() == ["10.244.2.0/24"]
    });
    api.put_node(node(
        "wnt-m",
        Some("10.244.3.0/24"),
        vxlan(lab.node_ip(2), "0e:00:00:00:00:03"),
    ));
    wait_for("the added Node's RemoteSubnetRoute", 30, || {
        let mut r = rsr();
        r.sort();
        r == ["10.244.2.0/24", "10.244.3.0/24"]
    });
    api.delete_node("wnt-l");
    wait_for("the deleted Node's RemoteSubnetRoute to go", 30, || {
        rsr() == ["10.244.3.0/24"]
    });
}
