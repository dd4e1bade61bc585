//! `winnet flanneld` end to end with etcd, as root, over real namespaces (see `flannel_lab`):
//! Linux nodes get the kernel's VXLAN device; Windows nodes run hnsd with its data plane and
//! flanneld builds their HNS network through it.

mod flannel_lab;

use std::net::{TcpListener, TcpStream};
use std::process::Command;

use flannel_lab::*;

#[test]
fn linux_vxlan_nodes_lease_from_etcd_and_reach_each_others_pods() {
    let mut lab = Lab::new("lx");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}"#,
    );
    let a = lab.node(0);
    let b = lab.node(1);
    let pa = lab.flanneld(a, &["--ip-masq"]);
    let pb = lab.flanneld(b, &["--subnet-lease-ttl", "4"]);
    lab.wait_ready(pa);
    lab.wait_ready(pb);
    let (sa, sb) = (lab.lease_of(a), lab.lease_of(b));
    assert_ne!(sa, sb);
    let env = std::fs::read_to_string(lab.subnet_file(a)).expect("env");
    assert!(
        env.starts_with("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET="),
        "{env}"
    );
    assert!(
        env.contains("FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"),
        "{env}"
    );
    // flannel's etcd schema.
    let key = format!(
        "/coreos.com/network/subnets/{}-{}",
        sb.network(),
        sb.prefix_len()
    );
    let value = lab.etcdctl(&["get", &key, "--print-value-only"]);
    assert!(
        value.contains(&format!("\"PublicIP\":\"{}\"", lab.node_ip(1))),
        "{value}"
    );
    assert!(
        value.contains("\"BackendType\":\"vxlan\"") && value.contains("\"VNI\":4096"),
        "{value}"
    );
    assert!(
        lab.nodes[a]
            .exec(&["nft", "list", "table", "ip", "winnet-flannel"])
            .contains("masquerade")
    );

    let ipa = lab.linux_pod(a, sa);
    let ipb = lab.linux_pod(b, sb);
    // Routes to the other subnet appear on each node once it has the other's lease.
    for (n, other) in [(a, sb), (b, sa)] {
        wait_for("the route to the other node's subnet", 30, || {
            lab.nodes[n]
                .ip(&["route", "show", &other.to_string()])
                .contains("flannel.4096")
        });
    }
    let server = lab.pods[1].run(move || TcpListener::bind((ipb, 7000)).expect("listen"));
    let mut client = lab.pods[0].run(move || TcpStream::connect((ipb, 7000)).expect("connect"));
    let (mut conn, peer) = server.accept().expect("accept");
    assert_eq!(
        peer.ip(),
        std::net::IpAddr::V4(ipa),
        "pod to pod is not masqueraded"
    );
    echo(&mut client, &mut conn, b"before");

    // Restart: kill -9, start again; the kernel state is untouched and the stream lives.
    let before = kernel_state(&lab.nodes[a]);
    let rev = lab.etcd_revision();
    lab.procs[pa].kill9();
    let pa2 = lab.flanneld(a, &["--ip-masq"]);
    lab.wait_ready(pa2);
    lab.wait_synced(pa2);
    assert_eq!(lab.lease_of(a), sa, "the restarted node keeps its lease");
    lab.assert_vtep_mac_kept(a, rev);
    assert_eq!(
        kernel_state(&lab.nodes[a]),
        before,
        "restart changed the kernel's state"
    );
    echo(&mut client, &mut conn, b"after");

    // Node b leaves: its flanneld stops renewing, the 4 s lease expires, and a loses its routes.
    lab.procs[pb].kill9();
    wait_for("b's lease to expire", 30, || {
        lab.etcdctl(&["get", &key, "--print-value-only"])
            .trim()
            .is_empty()
    });
    wait_for("a to drop b's route, neighbour and FDB entry", 30, || {
        let (routes, neigh, fdb, _) = kernel_state(&lab.nodes[a]);
        !routes.contains(&sb.to_string())
            && !neigh.contains(&sb.network().to_string())
            && !fdb.contains(&lab.node_ip(1).to_string())
    });
}

#[test]
fn etcd_unreachable_at_start_is_retried_with_a_clear_message_and_nothing_made() {
    let mut lab = Lab::new("noetcd");
    let a = lab.node(0);
    let p = lab.flanneld(a, &["--etcd-endpoints", "http://10.250.0.1:2379"]);
    wait_for("the retry message", 30, || {
        let log = lab.procs[p].log();
        log.contains("cannot reach etcd at http://10.250.0.1:2379") && log.contains("retrying")
    });
    assert!(
        !lab.subnet_file(a).exists(),
        "subnet.env written without a lease"
    );
    assert!(
        !lab.nodes[a].ip(&["link", "show"]).contains("flannel."),
        "a device made without a lease"
    );
}

#[test]
fn windows_net_conf_refusals_are_flannels() {
    let mut lab = Lab::new("wref");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":1}}"#,
    );
    let a = lab.node(0);
    let sock = lab.dir.path().join("none.sock");
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.nodes[a].0,
            WINNET,
            "flanneld",
            "--iface",
            "eth0",
        ])
        .args([
            "--etcd-endpoints",
            &lab.etcd_url(),
            "--node-os",
            "windows",
            "--hns-socket",
        ])
        .arg(&sock)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("VNI [1] must be greater than or equal to 4096 on Windows"),
        "{err}"
    );
}

#[test]
fn a_windows_vxlan_node_gets_its_overlay_network_and_a_remote_subnet_route_per_lease() {
    let mut lab = Lab::new("wvx");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}"#,
    );
    let (w, l) = (lab.node(0), lab.node(1));
    let sock = lab.hnsd(w);
    let sock_text = sock.to_string_lossy().into_owned();
    let pw = lab.flanneld(w, &["--hns-socket", &sock_text]);
    let pl = lab.flanneld(l, &["--subnet-lease-ttl", "4"]);
    lab.wait_ready(pw);
    lab.wait_ready(pl);
    let (sw, sl) = (lab.lease_of(w), lab.lease_of(l));
    let env = std::fs::read_to_string(lab.subnet_file(w)).expect("env");
    assert!(
        env.contains("FLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n"),
        "{env}"
    );
    let net = network(&sock, "flannel.4096").expect("the Overlay network flannel.4096");
    assert_eq!(net["Type"], "Overlay");
    let subnet = &net["Ipams"][0]["Subnets"][0];
    assert_eq!(subnet["IpAddressPrefix"], sw.to_string());
    assert_eq!(subnet["Policies"][0]["Settings"]["IsolationId"], 4096);
    assert_eq!(policies_of(&net, "HostRoute").len(), 1);
    assert_eq!(
        policies_of(&net, "NetAdapterName")[0]["Settings"]["NetworkAdapterName"],
        "eth0"
    );
    let dr_mac = policies_of(&net, "DrMacAddress")[0]["Settings"]["Address"]
        .as_str()
        .expect("DR MAC")
        .to_ascii_lowercase()
        .replace('-', ":");
    // The Windows lease carries the DR MAC as its VtepMAC; the Linux node programs it.
    wait_for(
        "the Linux node's FDB entry for the Windows DR MAC",
        30,
        || {
            lab.nodes[l]
                .exec(&["bridge", "fdb", "show", "dev", "flannel.4096"])
                .contains(&dr_mac)
        },
    );
    let linux_mac = lab.nodes[l]
        .exec(&["cat", "/sys/class/net/flannel.4096/address"])
        .trim()
        .to_string();
    let rsr = || {
        network(&sock, "flannel.4096")
            .map(|n| {
                policies_of(&n, "RemoteSubnetRoute")
                    .into_iter()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    wait_for("the RemoteSubnetRoute for the Linux node", 30, || {
        rsr().len() == 1
    });
    let r = &rsr()[0]["Settings"];
    assert_eq!(r["DestinationPrefix"], sl.to_string());
    assert_eq!(r["ProviderAddress"], lab.node_ip(1).to_string());
    assert_eq!(r["IsolationId"], 4096);
    assert_eq!(
        r["DistributedRouterMacAddress"]
            .as_str()
            .map(|m| m.to_ascii_lowercase().replace('-', ":")),
        Some(linux_mac)
    );

    // Restart is a no-op on HNS and the kernel.
    let dump = || hns_json(&sock, &["dump"]);
    let routes = |lab: &Lab| lab.nodes[w].ip(&["route", "show"]);
    let (before, before_routes) = (dump(), routes(&lab));
    let rev = lab.etcd_revision();
    lab.procs[pw].kill9();
    let pw2 = lab.flanneld(w, &["--hns-socket", &sock_text]);
    lab.wait_ready(pw2);
    lab.wait_synced(pw2);
    lab.assert_vtep_mac_kept(w, rev);
    assert_eq!(dump(), before, "restart changed HNS");
    assert_eq!(
        routes(&lab),
        before_routes,
        "restart changed the kernel's routes"
    );

    // The Linux node leaves; its RemoteSubnetRoute goes.
    lab.procs[pl].kill9();
    wait_for("the RemoteSubnetRoute to go with the lease", 40, || {
        rsr().is_empty()
    });
}

/// A vxlan lease without its VtepMAC yet is a node between leasing and making its network
/// (flannel's Windows backend leases before its network exists, on every start): the way to
/// it stays as it is on the other nodes, Linux (route, neighbour, FDB entry) and Windows
/// (`RemoteSubnetRoute`), until its MAC comes; nothing is cut for a node that only restarts.
#[test]
fn a_lease_without_its_vtep_mac_yet_leaves_the_way_to_its_node_alone() {
    let mut lab = Lab::new("nomac");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789}}"#,
    );
    let (w, l) = (lab.node(0), lab.node(1));
    let sock = lab.hnsd(w);
    let sock_text = sock.to_string_lossy().into_owned();
    let pw = lab.flanneld(w, &["--hns-socket", &sock_text]);
    let pl = lab.flanneld(l, &[]);
    lab.wait_ready(pw);
    lab.wait_ready(pl);
    // A third node as etcd shows it, and a fourth that comes after it.
    let (third, fourth) = ("10.244.200.0/24", "10.244.201.0/24");
    let (third_mac, fourth_mac) = ("0e:2a:0a:f4:c8:01", "0e:2a:0a:f4:c9:01");
    let put = |subnet: &str, node: u8, mac: Option<&str>| {
        let data = match mac {
            Some(m) => format!(r#"{{"VNI":4096,"VtepMAC":"{m}"}}"#),
            None => r#"{"VNI":4096}"#.to_string(),
        };
        let key = format!("/coreos.com/network/subnets/{}", subnet.replace('/', "-"));
        let value = format!(
            r#"{{"PublicIP":"{}","BackendType":"vxlan","BackendData":{data}}}"#,
            lab.node_ip(node)
        );
        lab.etcdctl(&["put", &key, &value]);
    };
    let rsr_to = |subnet: &str| {
        network(&sock, "flannel.4096").is_some_and(|n| {
            policies_of(&n, "RemoteSubnetRoute")
                .iter()
                .any(|p| p["Settings"]["DestinationPrefix"] == subnet)
        })
    };
    let linux_way_to = |subnet: &str, mac: &str| {
        let (routes, neigh, fdb, _) = kernel_state(&lab.nodes[l]);
        let net = subnet.split('/').next().unwrap_or_default();
        routes
            .lines()
            .any(|r| r.starts_with(subnet) && r.contains("flannel.4096"))
            && neigh
                .lines()
                .any(|n| n.starts_with(&format!("{net} ")) && n.contains(mac))
            && fdb.lines().any(|f| f.starts_with(mac))
    };
    put(third, 2, Some(third_mac));
    wait_for("both nodes' way to the third node", 30, || {
        linux_way_to(third, third_mac) && rsr_to(third)
    });
    let hns_before = network(&sock, "flannel.4096");
    // The third node starts again: its lease without the VtepMAC first, as flannel's Windows
    // backend leases. Then the fourth node: once both nodes have its way, they have read the
    // third's lease without a MAC.
    put(third, 2, None);
    put(fourth, 3, Some(fourth_mac));
    wait_for("both nodes' way to the fourth node", 30, || {
        linux_way_to(fourth, fourth_mac) && rsr_to(fourth)
    });
    assert!(
        linux_way_to(third, third_mac),
        "the Linux node dropped its way to a node whose lease has no VtepMAC yet:\n{:?}",
        kernel_state(&lab.nodes[l])
    );
    assert!(
        rsr_to(third),
        "the Windows node dropped its RemoteSubnetRoute to a node whose lease has no VtepMAC yet:\n{:#?}\nbefore:\n{hns_before:#?}",
        network(&sock, "flannel.4096")
    );
}

#[test]
fn a_windows_host_gw_node_gets_cbr0_its_bridge_endpoint_and_routes() {
    let mut lab = Lab::new("whg");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let (w, l) = (lab.node(0), lab.node(1));
    let sock = lab.hnsd(w);
    let sock_text = sock.to_string_lossy().into_owned();
    let pw = lab.flanneld(w, &["--hns-socket", &sock_text]);
    let pl = lab.flanneld(l, &[]);
    lab.wait_ready(pw);
    lab.wait_ready(pl);
    let (sw, sl) = (lab.lease_of(w), lab.lease_of(l));
    let net = network(&sock, "cbr0").expect("the L2Bridge network cbr0");
    assert_eq!(net["Type"], "L2Bridge");
    let eps = hns_json(&sock, &["list", "endpoints"]);
    let ep = eps
        .as_array()
        .and_then(|e| e.iter().find(|e| e["Name"] == "cbr0_ep"))
        .expect("cbr0_ep");
    let o = sw.network().octets();
    assert_eq!(
        ep["IpConfigurations"][0]["IpAddress"],
        format!("{}.{}.{}.2", o[0], o[1], o[2])
    );
    let ns = hns_json(&sock, &["list", "namespaces"]);
    let host = ns
        .as_array()
        .and_then(|n| n.iter().find(|n| n["Type"] == "Host"))
        .expect("the host namespace");
    assert!(
        host.to_string().contains(ep["ID"].as_str().expect("id")),
        "cbr0_ep not attached to the host: {host}"
    );
    wait_for("the Windows node's route to the Linux subnet", 30, || {
        lab.nodes[w]
            .ip(&["route", "show", &sl.to_string()])
            .contains(&format!("via {}", lab.node_ip(1)))
    });
    wait_for("the Linux node's route to the Windows subnet", 30, || {
        lab.nodes[l]
            .ip(&["route", "show", &sw.to_string()])
            .contains(&format!("via {}", lab.node_ip(0)))
    });
}

/// How many Watch streams etcd has been asked to open, from its Prometheus metrics.
fn etcd_watches_opened(lab: &Lab) -> u64 {
    let metrics = lab
        .fabric
        .exec(&["curl", "-sf", &format!("{}/metrics", lab.etcd_url())]);
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("grpc_server_started_total") && l.contains("grpc_method=\"Watch\"")
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[test]
fn one_etcd_watch_follows_every_lease_change() {
    let mut lab = Lab::new("watch");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let a = lab.node(0);
    let p = lab.flanneld(a, &[]);
    lab.wait_ready(p);
    lab.wait_synced(p);
    let opened = etcd_watches_opened(&lab);
    assert_eq!(opened, 1, "flanneld's first sync opens one watch");
    // Other nodes come and go; each change is followed through the same watch.
    for i in 0..5u8 {
        let subnet = format!("10.244.{}.0", 100 + i);
        let key = format!("/coreos.com/network/subnets/{subnet}-24");
        let value = format!(
            r#"{{"PublicIP":"{}","BackendType":"host-gw","BackendData":null}}"#,
            lab.node_ip(1 + i)
        );
        lab.etcdctl(&["put", &key, &value]);
        wait_for("the route to the new lease", 30, || {
            lab.nodes[a]
                .ip(&["route", "show", &format!("{subnet}/24")])
                .contains(&format!("via {}", lab.node_ip(1 + i)))
        });
        lab.etcdctl(&["del", &key]);
        wait_for("the route of the deleted lease to go", 30, || {
            lab.nodes[a]
                .ip(&["route", "show", &format!("{subnet}/24")])
                .trim()
                .is_empty()
        });
    }
    // A lease value that is not flannel's JSON is skipped, saying which key.
    let bad = "/coreos.com/network/subnets/10.244.200.0-24";
    lab.etcdctl(&["put", bad, "{not json"]);
    wait_for("the warning about the bad lease", 30, || {
        lab.procs[p]
            .log()
            .contains(&format!("skipping lease {bad}"))
    });
    assert!(
        lab.nodes[a]
            .ip(&["route", "show", "10.244.200.0/24"])
            .trim()
            .is_empty()
    );
    assert_eq!(
        etcd_watches_opened(&lab),
        opened,
        "flanneld opened another watch to follow lease changes"
    );
}

#[test]
fn flanneld_follows_leases_across_an_etcd_restart() {
    let mut lab = Lab::new("erst");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let a = lab.node(0);
    // A short TTL: renewals (every 2 s) go on across the restart.
    let p = lab.flanneld(a, &["--subnet-lease-ttl", "6"]);
    lab.wait_ready(p);
    lab.wait_synced(p);
    let mine = lab.lease_of(a);
    // etcd goes down (kill -9) and comes back on the same data: flanneld's watch ends, and
    // it watches again once etcd answers.
    lab.procs[0].kill9();
    lab.etcd();
    let restarted = std::time::Instant::now();
    let key = "/coreos.com/network/subnets/10.244.150.0-24";
    let value = format!(
        r#"{{"PublicIP":"{}","BackendType":"host-gw","BackendData":null}}"#,
        lab.node_ip(1)
    );
    lab.etcdctl(&["put", key, &value]);
    wait_for("the route to the lease put after the restart", 60, || {
        lab.nodes[a]
            .ip(&["route", "show", "10.244.150.0/24"])
            .contains(&format!("via {}", lab.node_ip(1)))
    });
    assert_eq!(lab.lease_of(a), mine);
    let ours = format!(
        "/coreos.com/network/subnets/{}-{}",
        mine.network(),
        mine.prefix_len()
    );
    assert!(
        !lab.etcdctl(&["get", &ours, "--print-value-only"])
            .trim()
            .is_empty(),
        "flanneld's own lease is gone after the etcd restart"
    );
    // Renewals over the restarted etcd keep the lease (and flanneld) alive past a whole TTL:
    // checked all along, not once after a sleep.
    let until = restarted + std::time::Duration::from_secs(8);
    while std::time::Instant::now() < until {
        let log = lab.procs[p].log();
        assert!(!log.contains("Error:"), "flanneld stopped:\n{log}");
        assert!(
            !lab.etcdctl(&["get", &ours, "--print-value-only"])
                .trim()
                .is_empty(),
            "the lease was not renewed after the etcd restart"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_lease_etcd_no_longer_has_stops_flanneld_saying_so() {
    let mut lab = Lab::new("lost");
    put_config(
        &lab,
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}"#,
    );
    let a = lab.node(0);
    let p = lab.flanneld(a, &["--subnet-lease-ttl", "3"]);
    lab.wait_ready(p);
    let list = lab.etcdctl(&["lease", "list"]);
    let ids: Vec<&str> = list.lines().skip(1).map(str::trim).collect();
    assert_eq!(ids.len(), 1, "flanneld holds one etcd lease: {list}");
    // Someone revokes it (or it expired while this node could not renew).
    lab.etcdctl(&["lease", "revoke", ids[0]]);
    let status = lab.procs[p].wait_exit(30);
    assert!(!status.success());
    let log = lab.procs[p].log();
    assert!(
        log.contains(&format!(
            "etcd no longer has the lease of {} (it expired or was revoked); restart flanneld",
            lab.lease_of(a)
        )),
        "{log}"
    );
}
