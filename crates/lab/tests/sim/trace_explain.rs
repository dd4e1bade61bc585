//! hnsd's trace (`POST /trace`) on a node of the in-memory cluster: the first packet of a
//! connection through the switch, each layer named back to the HNS object and the Kubernetes
//! Service that made its rule.

use std::net::IpAddr;

use hcn::error::HnsError;
use hns_client::{TraceProtocol, TraceRequest};
use hns_compiler::explain::trace;
use lab::sim::cluster::addr::{self, INTERNET};
use lab::{Cluster, PodOptions, Service};
use serde_json::Value;
use vfp::Timestamp;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an address")
}

/// One sim node with pods a and b on flannel host-gw and Service default/web
/// (10.96.0.10:80 -> b:8080), as kube-proxy programs it.
/// Returns the cluster and the addresses of a and b.
fn node(profile: hns::Profile) -> (Cluster, IpAddr, IpAddr) {
    let mut c = Cluster::new(1, profile).unwrap();
    c.flannel_host_gw().unwrap();
    let a = c.add_pod(0, "a", PodOptions::default()).unwrap();
    let b = c.add_pod(0, "b", PodOptions::default()).unwrap();
    let web = Service::tcp("default/web", ip("10.96.0.10"), 80, 8080, vec![b]);
    c.add_service(&web).unwrap();
    let (a, b) = (c.ip_of(a).unwrap(), c.ip_of(b).unwrap());
    (c, a, b)
}

fn run(c: &mut Cluster, from: &str, to: &str, p: TraceProtocol) -> Result<Value, HnsError> {
    let req = TraceRequest::new(from, to, p)?;
    let n = &c.nodes[0];
    let flows = n.compiler().switch().flows().len();
    let got = n.read(|state| {
        trace(
            state,
            &mut n.compiler(),
            "node1",
            &req,
            Timestamp::from_secs(1),
        )
    });
    assert_eq!(
        n.compiler().switch().flows().len(),
        flows,
        "a trace installs no flow"
    );
    // The answer as it goes on the wire.
    got.map(|a| serde_json::to_value(a).expect("a trace answer is JSON"))
}

#[test]
fn pod_to_cluster_ip_names_the_load_balancer_its_service_and_the_backend() {
    let (mut c, a, b) = node(hns::Profile::Ws2022);
    let v = run(&mut c, "a", "10.96.0.10:80", TraceProtocol::Tcp).unwrap();
    let t = &v["Trace"];
    assert_eq!(t["From"]["Kind"], "Endpoint", "{v:#}");
    let slb = t["Steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Layer"] == "slb")
        .unwrap_or_else(|| panic!("no SLB step: {v:#}"));
    assert_eq!(slb["Origin"]["Kind"], "LoadBalancer");
    assert_eq!(slb["Origin"]["Kubernetes"]["Name"], "web");
    assert_eq!(slb["Backend"], format!("{b}:8080"));
    assert_eq!(t["Disposition"]["Verdict"], "Deliver", "{v:#}");
    assert!(v["Text"].as_str().unwrap().contains("Service default/web"));
    // The same from the pod's address.
    let by_ip = run(&mut c, &a.to_string(), "10.96.0.10:80", TraceProtocol::Tcp);
    let by_ip = by_ip.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(by_ip["Trace"]["From"]["Kind"], "Endpoint", "{by_ip:#}");
}

#[test]
fn icmp_to_the_outside_names_the_limitation_only_where_the_profile_has_it() {
    let (mut c, _, _) = node(hns::Profile::Ws2022);
    let v = run(&mut c, "a", &INTERNET.to_string(), TraceProtocol::Icmp).unwrap();
    assert_eq!(
        v["Trace"]["Limitation"]["Name"], "IcmpThroughOutboundNat",
        "{v:#}"
    );
    assert!(
        v["Disposition"]
            .as_str()
            .unwrap()
            .contains("not transposed")
    );
    let (mut c, _, _) = node(hns::Profile::Unrestricted);
    let v = run(&mut c, "a", &INTERNET.to_string(), TraceProtocol::Icmp).unwrap();
    assert_eq!(v["Trace"]["Limitation"], Value::Null, "{v:#}");
    assert_eq!(v["Trace"]["Disposition"]["Verdict"], "Uplink", "{v:#}");
}

#[test]
fn from_names_nothing_or_a_host_beyond_the_uplink() {
    let (mut c, _, b) = node(hns::Profile::Ws2022);
    let to_b = format!("{b}:8080");
    let e = run(&mut c, "nobody", "10.96.0.10:80", TraceProtocol::Tcp).unwrap_err();
    assert_eq!(e.code.http_status(), 404, "{e}");
    let v = run(&mut c, &INTERNET.to_string(), &to_b, TraceProtocol::Tcp).unwrap();
    assert_eq!(v["Trace"]["From"]["Kind"], "External", "{v:#}");
    let node = addr::node(0).to_string();
    let v = run(&mut c, &node, &to_b, TraceProtocol::Tcp).unwrap();
    assert_eq!(v["Trace"]["From"]["Kind"], "Node", "{v:#}");
    assert_eq!(v["Trace"]["Disposition"]["Verdict"], "Deliver", "{v:#}");
}
