//! `winnet trace` against a real node (issue 8): hnsd with its data plane in a namespace,
//! pods whose vNICs are TAPs, and the real `winnet` binary asking hnsd's `POST /trace` what
//! the switch does with a connection's first packet. What the trace says is checked against
//! what real traffic does. Run as root (CI is).

mod lab;

use std::process::Output;

use hcn::{Guid, LoadBalancer};
use lab::cluster::{Cluster, Mode, OUTSIDE, decode};
use lab::seen_from;
use serde_json::{Value, json};

const NODE_IP: &str = "192.168.77.11";
const CLUSTER_IP: &str = "10.96.0.10";

/// One Windows node of the lab's cluster (flannel host-gw's `cbr0` with `cbr0_ep` on the
/// host, an external host beyond the node's gateway), and the real `winnet trace` against it.
struct Node {
    c: Cluster,
}

impl Node {
    fn new(tag: &str, profile: &str) -> Node {
        Node {
            c: Cluster::new(tag, 1, Mode::L2Bridge, profile),
        }
    }

    fn client(&self) -> hns_client::Client {
        self.c.client(0)
    }

    /// A pod with address 10.244.1.`host`, its endpoint named `<name>_cbr0` as win-bridge
    /// names it: its namespace and its endpoint's ID.
    fn pod(&mut self, name: &str, host: u8) -> (String, Guid) {
        self.c.pod_with_id(0, name, host)
    }

    /// Runs the real `winnet trace` on this node with `args`.
    fn trace(&self, args: &[&str]) -> Output {
        let h = &self.c.lab.hnsds[0];
        std::process::Command::new(env!("CARGO_BIN_EXE_winnet"))
            .args(["trace", "--node", h.node().expect("a node's hnsd")])
            .arg("--hns-socket")
            .arg(h.socket())
            .args(args)
            .env_remove("HNS_SOCKET")
            .output()
            .expect("run winnet trace")
    }

    /// `winnet trace` that must succeed: its standard output.
    fn trace_ok(&self, args: &[&str]) -> String {
        let out = self.trace(args);
        assert!(
            out.status.success(),
            "winnet trace {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.c.lab.logs()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn trace_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.trace_ok(&all);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("--json is not JSON ({e}): {out}"))
    }
}

/// The step of layer `layer` on the ingress side.
fn step<'a>(answer: &'a Value, layer: &str) -> &'a Value {
    answer["Trace"]["Steps"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["Layer"] == layer)
        .unwrap_or_else(|| panic!("no {layer} step in {answer:#}"))
}

#[test]
fn a_trace_to_a_cluster_ip_names_the_load_balancer_the_service_and_the_backend() {
    let mut n = Node::new("ta", "ws2022");
    let (a, _) = n.pod("pa", 10);
    let (b, b_ep) = n.pod("pb", 11);
    let lb: LoadBalancer = decode(json!({
        "HostComputeEndpoints": [b_ep.to_string()],
        "FrontendVIPs": [CLUSTER_IP],
        "PortMappings": [{"Protocol": 6, "InternalPort": 8080, "ExternalPort": 80}],
        "LinuxService": "default/web:http",
        "SchemaVersion": {"Major": 2, "Minor": 0}
    }));
    let lb =
        n.c.rt
            .block_on(n.client().create_load_balancer(&lb))
            .expect("create the load balancer");
    let lb_id = lb.id.to_string();

    let answer = n.trace_json(&["--from", "pa", "--to", "10.96.0.10:80"]);
    let t = &answer["Trace"];
    assert_eq!(t["From"]["Kind"], "Endpoint", "{answer:#}");
    assert_eq!(t["From"]["Address"], "10.244.1.10");
    assert_eq!(t["Ingress"]["Name"], "pa_cbr0");
    let slb = step(&answer, "slb");
    assert_eq!(slb["PortName"], "pa_cbr0");
    assert_eq!(slb["Origin"]["Kind"], "LoadBalancer");
    assert_eq!(slb["Origin"]["Id"], lb_id);
    assert_eq!(slb["Origin"]["Kubernetes"]["Kind"], "Service");
    assert_eq!(slb["Origin"]["Kubernetes"]["Namespace"], "default");
    assert_eq!(slb["Origin"]["Kubernetes"]["Name"], "web");
    assert_eq!(slb["Origin"]["Kubernetes"]["Port"], "http");
    assert_eq!(slb["Backend"], "10.244.1.11:8080");
    assert_eq!(slb["After"]["Dst"], "10.244.1.11");
    assert_eq!(slb["After"]["DstPort"], 8080);
    assert_eq!(t["Disposition"]["Verdict"], "Deliver", "{answer:#}");
    assert_eq!(t["Disposition"]["PortName"], "pb_cbr0");
    assert_eq!(t["Limitation"], Value::Null);
    assert!(
        answer["Text"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("LoadBalancer {lb_id} (Service default/web:http)")),
        "{answer:#}"
    );

    // A trace changes nothing: asked again, the same answer (the same SNAT port too).
    assert_eq!(
        n.trace_json(&["--from", "pa", "--to", "10.96.0.10:80"])["Trace"],
        answer["Trace"]
    );

    // What the trace says is what happens.
    n.c.lab.http_server(&b, 8080);
    let body =
        n.c.lab
            .curl(&a, "http://10.96.0.10:80/")
            .unwrap_or_else(|e| panic!("{e}\n{}", n.c.lab.logs()));
    assert!(seen_from(&body).is_some(), "{body}");

    // The detailed text, like ovn-trace: the layer, the rule, the objects, the rewrite.
    let text = n.trace_ok(&["--from", "pa", "--to", "10.96.0.10:80"]);
    for want in [
        "layer slb",
        &format!("made by HNS LoadBalancer {lb_id}"),
        "for Kubernetes Service default/web port http",
        "backend: 10.244.1.11:8080",
        "dst 10.96.0.10:80 -> 10.244.1.11:8080",
        "disposition: delivered to port",
        "(pb_cbr0)",
    ] {
        assert!(text.contains(want), "no \"{want}\" in:\n{text}");
    }
    // One line per layer.
    let summary = n.trace_ok(&["--from", "pa", "--to", "10.96.0.10:80", "--summary"]);
    let slb_line = summary
        .lines()
        .find(|l| l.starts_with("pa_cbr0 out slb:"))
        .unwrap_or_else(|| panic!("no SLB line in:\n{summary}"));
    assert!(
        slb_line.contains(&lb_id) && slb_line.ends_with("-> 10.244.1.11:8080"),
        "{slb_line}"
    );
    assert!(summary.trim_end().ends_with("(pb_cbr0)"), "{summary}");
}

#[test]
fn bad_arguments_name_the_flag_and_the_fix() {
    let mut n = Node::new("tb", "ws2022");
    n.pod("pa", 10);
    let err = |args: &[&str]| {
        let out = n.trace(args);
        assert!(!out.status.success(), "winnet trace {args:?} must fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = err(&["--from", "pa", "--to", "10.96.0.10"]);
    assert!(e.contains("--to") && e.contains("IP:PORT"), "{e}");
    let e = err(&["--from", "pa", "--to", "10.200.0.1:7", "--proto", "icmp"]);
    assert!(e.contains("--to") && e.contains("address alone"), "{e}");
    let e = err(&["--from", "pa", "--to", "10.96.0.10:80", "--proto", "sctp"]);
    assert!(
        e.contains("--proto") && e.contains("tcp, udp or icmp"),
        "{e}"
    );
    let e = err(&["--from", "nobody", "--to", "10.96.0.10:80"]);
    assert!(
        e.contains("no endpoint is named \"nobody\"") && e.contains("winnet hns list endpoints"),
        "{e}"
    );
}

/// `winnet trace --from pa --to OUTSIDE --proto icmp` on a node with `profile`, and whether a
/// real ping got through.
fn icmp_outside(tag: &str, profile: &str) -> (Value, String, bool) {
    let mut n = Node::new(tag, profile);
    let (a, _) = n.pod("pa", 10);
    let args = ["--from", "pa", "--to", OUTSIDE, "--proto", "icmp"];
    let answer = n.trace_json(&args);
    let text = n.trace_ok(&args);
    let pinged = (0..3).any(|_| n.c.lab.ping(&a, OUTSIDE));
    (answer, text, pinged)
}

#[test]
fn icmp_to_the_outside_names_the_limitation_under_ws2022_only() {
    let (answer, text, pinged) = icmp_outside("tc", "ws2022");
    let t = &answer["Trace"];
    assert_eq!(
        t["Limitation"]["Name"], "IcmpThroughOutboundNat",
        "{answer:#}"
    );
    assert_eq!(t["Disposition"]["Verdict"], "Drop");
    let why = answer["Disposition"].as_str().unwrap_or_default();
    assert!(
        why.contains("not transposed")
            && why.contains("ICMP through OutboundNAT")
            && why.contains("ws2022"),
        "{why}"
    );
    let nat = step(&answer, "nat");
    assert_eq!(
        nat["Origin"]["Limitation"]["Name"],
        "IcmpThroughOutboundNat"
    );
    assert!(
        text.contains("limitation IcmpThroughOutboundNat: not transposed"),
        "{text}"
    );
    assert!(!pinged, "ws2022 does not carry the ping, as the trace says");

    // Unrestricted: transposed (SNAT to the node) and handed to the host through cbr0_ep, the
    // pods' gateway, whose IP stack routes it on.
    let (answer, text, pinged) = icmp_outside("td", "unrestricted");
    let t = &answer["Trace"];
    assert_eq!(t["Limitation"], Value::Null, "{answer:#}");
    assert_eq!(t["Disposition"]["Verdict"], "Deliver", "{answer:#}");
    assert_eq!(t["Disposition"]["PortName"], "cbr0_ep");
    let nat = step(&answer, "nat");
    assert_eq!(nat["After"]["Src"], NODE_IP, "SNAT to the node: {nat:#}");
    assert!(
        nat["Rewrite"][0]
            .as_str()
            .is_some_and(|r| r.starts_with("src 10.244.1.10")),
        "{nat:#}"
    );
    assert!(!text.contains("limitation"), "{text}");
    assert!(
        text.contains("the host's IP stack routes the packet on"),
        "{text}"
    );
    assert!(pinged, "unrestricted carries the ping, as the trace says");
}
