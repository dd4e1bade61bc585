//! Real pod traffic across a Windows node, as root over real namespaces with etcd: a Windows
//! node (hnsd with its data plane, flanneld building the HNS network) whose pod is made by the
//! flannel CNI plugin reading flanneld's subnet.env, and a Linux node's pod; they talk over
//! TCP in vxlan and in host-gw. The stream survives `kill -9` and a restart of both nodes'
//! flanneld, with HNS (`winnet hns dump`) and the Linux node's kernel state unchanged.

mod flannel_lab;

use std::net::{IpAddr, TcpListener, TcpStream};

use flannel::windows;
use flannel_lab::pods::Delegate;
use flannel_lab::*;

/// Windows node 0 and Linux node 1 under `net_conf`; a Windows pod and a Linux pod talk,
/// both flanneld are killed and restarted, the stream goes on and nothing was remade.
fn pods_across_a_windows_node(tag: &str, net_conf: &str, net_name: &str, delegate: Delegate) {
    let mut lab = Lab::new(tag);
    put_config(&lab, net_conf);
    let (w, l) = (lab.node(0), lab.node(1));
    let sock = lab.hnsd(w);
    // Forwarding off everywhere on the Windows node (hnsd turns it on globally when it binds
    // the NIC): Windows forwards only on the interfaces flannel turns it on for.
    lab.nodes[w].exec(&["sysctl", "-qw", "net.ipv4.conf.all.forwarding=0"]);
    let sock_text = sock.to_string_lossy().into_owned();
    let windows_args = ["--hns-socket", sock_text.as_str()];
    let pw = lab.flanneld(w, &windows_args);
    let pl = lab.flanneld(l, &[]);
    lab.wait_ready(pw);
    lab.wait_ready(pl);
    let sl = lab.lease_of(l);
    assert!(
        network(&sock, net_name).is_some(),
        "flanneld made no HNS network {net_name}"
    );

    if delegate == Delegate::WinBridge {
        // host-gw: flanneld turned forwarding on for the vNIC and for cbr0_ep's interface.
        let ep_ip = windows::host_of(lab.lease_of(w), 2).to_string();
        let vnic = lab.nodes[w].ip(&[
            "-o",
            "-4",
            "addr",
            "show",
            "to",
            &lab.node_ip(0).to_string(),
        ]);
        let ep = lab.nodes[w].ip(&["-o", "-4", "addr", "show", "to", &ep_ip]);
        for line in [vnic, ep] {
            let dev = line
                .split_whitespace()
                .nth(1)
                .expect("an interface")
                .to_string();
            let on =
                lab.nodes[w].exec(&["sysctl", "-n", &format!("net.ipv4.conf.{dev}.forwarding")]);
            assert_eq!(on.trim(), "1", "forwarding on {dev}");
        }
    }
    let conf = lab.flannel_cni_conf(w, net_name, delegate);
    if delegate == Delegate::WinBridge {
        // host-local (no rangeStart, as flannel's plugin writes the delegate's ipam) would hand
        // out .2 first, which flanneld gave cbr0_ep; nothing in flannel reserves it (reference
        // §3.2 leaves it open), so the node's operator does, in host-local's store.
        lab.reserve_in_host_local(net_name, windows::host_of(lab.lease_of(w), 2));
    }
    let (wpod, wip) = lab.windows_pod(&sock, &conf);
    assert!(lab.lease_of(w).contains(&wip), "{wip} is not in the lease");
    let lip = lab.linux_pod(l, sl);
    let lpod = lab.pods.len() - 1;
    let server = lab.pods[lpod].run(move || TcpListener::bind((lip, 7100)).expect("listen"));
    // The routes to the other node come with its lease: retry the connect until they are in.
    let mut client = None;
    wait_for("the Windows pod to reach the Linux pod", 30, || {
        client = lab.pods[wpod].run(move || {
            TcpStream::connect_timeout(&(lip, 7100).into(), std::time::Duration::from_secs(1)).ok()
        });
        client.is_some()
    });
    let mut client = client.expect("connected");
    let (mut conn, peer) = server.accept().expect("accept");
    assert_eq!(peer.ip(), IpAddr::V4(wip), "pod to pod is not NATed");
    echo(&mut client, &mut conn, b"before the restart");

    let dump = || hns_json(&sock, &["dump"]);
    let (hns_before, linux_before) = (dump(), linux_state(&lab.nodes[l]));
    let windows_routes = lab.nodes[w].ip(&["route", "show"]);
    let rev = lab.etcd_revision();
    lab.procs[pw].kill9();
    lab.procs[pl].kill9();
    let pw2 = lab.flanneld(w, &windows_args);
    let pl2 = lab.flanneld(l, &[]);
    for p in [pw2, pl2] {
        lab.wait_ready(p);
        lab.wait_synced(p);
    }
    if delegate == Delegate::WinOverlay {
        lab.assert_vtep_mac_kept(w, rev);
        lab.assert_vtep_mac_kept(l, rev);
    }
    assert_eq!(dump(), hns_before, "the restart changed HNS");
    assert_eq!(
        linux_state(&lab.nodes[l]),
        linux_before,
        "the restart changed the Linux node's kernel"
    );
    assert_eq!(
        lab.nodes[w].ip(&["route", "show"]),
        windows_routes,
        "the restart changed the Windows node's routes"
    );
    echo(&mut client, &mut conn, b"after the restart");
    // And the other way: the Linux pod opens a stream to the Windows pod.
    let back = lab.pods[wpod].run(move || TcpListener::bind((wip, 7101)).expect("listen"));
    let mut c2 = lab.pods[lpod].run(move || TcpStream::connect((wip, 7101)).expect("connect"));
    let (mut s2, _) = back.accept().expect("accept");
    echo(&mut c2, &mut s2, b"linux to windows");
}

/// The Linux node's routes, permanent neighbours, links and FDB.
fn linux_state(ns: &Ns) -> Vec<String> {
    let mut v = vec![
        ns.ip(&["route", "show"]),
        ns.ip(&["neigh", "show", "nud", "permanent"]),
        ns.ip(&["-d", "link", "show"]),
    ];
    if v[2].contains("flannel.4096") {
        v.push(ns.exec(&["bridge", "fdb", "show", "dev", "flannel.4096"]));
    }
    v
}

#[test]
fn a_windows_pod_and_a_linux_pod_talk_over_vxlan_across_flanneld_restarts() {
    pods_across_a_windows_node(
        "pvx",
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","VNI":4096,"Port":4789,"Name":"wntfl-vx"}}"#,
        "wntfl-vx",
        Delegate::WinOverlay,
    );
}

#[test]
fn a_windows_pod_and_a_linux_pod_talk_over_host_gw_across_flanneld_restarts() {
    pods_across_a_windows_node(
        "pgw",
        r#"{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw","Name":"wntfl-gw"}}"#,
        "wntfl-gw",
        Delegate::WinBridge,
    );
}
