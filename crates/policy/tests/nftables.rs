//! `--mode nftables` with real packets (root): a node namespace forwarding between two pod
//! namespaces (pod a in Kubernetes namespace x, pod b in y, b serving TCP 80 and 81); the
//! agent's table installed in the node's namespace by the agent's own code, then TCP connects
//! from a to b judged as Kubernetes judges them; removing the table lets everything through
//! again and touches nothing else. Everything made is removed, also on failure.

use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use host::netns::Netns;
use policy::Cluster;

const A: &str = "10.9.1.2";
const B: &str = "10.9.2.2";

/// The namespaces and b's server; removed on drop.
struct Lab {
    node: Netns,
    a: Netns,
    b: Netns,
    server: Option<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        for ns in [&self.a, &self.b, &self.node] {
            let _ = ns.delete();
        }
    }
}

fn ip(ns: &str, args: &str) {
    let mut cmd = Command::new("ip");
    cmd.args(["-n", ns]).args(args.split_whitespace());
    testkit::cmd::ok(&mut cmd);
}

fn lab() -> Lab {
    testkit::require_root("the test makes network namespaces and nftables tables");
    let tag = std::process::id();
    let names = [
        format!("wnp-node-{tag}"),
        format!("wnp-a-{tag}"),
        format!("wnp-b-{tag}"),
    ];
    for n in &names {
        let _ = Netns::named(n).delete();
    }
    let mut lab = Lab {
        node: Netns::create(&names[0]).expect("node namespace"),
        a: Netns::named(&names[1]),
        b: Netns::named(&names[2]),
        server: None,
    };
    lab.a = Netns::create(&names[1]).expect("pod a's namespace");
    lab.b = Netns::create(&names[2]).expect("pod b's namespace");
    let node = &names[0];
    for (pod, ns, subnet) in [("a", &names[1], "10.9.1"), ("b", &names[2], "10.9.2")] {
        ip(
            node,
            &format!("link add veth-{pod} type veth peer name eth0 netns {ns}"),
        );
        ip(node, &format!("addr add {subnet}.1/24 dev veth-{pod}"));
        ip(node, &format!("link set veth-{pod} up"));
        ip(ns, &format!("addr add {subnet}.2/24 dev eth0"));
        ip(ns, "link set eth0 up");
        ip(ns, "link set lo up");
        ip(ns, &format!("route add default via {subnet}.1"));
    }
    testkit::cmd::ok(Command::new("ip").args([
        "netns",
        "exec",
        node,
        "sysctl",
        "-qw",
        "net.ipv4.ip_forward=1",
    ]));
    let server = "import socket,select\nls=[]\nfor p in (80,81):\n s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(('0.0.0.0',p)); s.listen(64); ls.append(s)\nwhile True:\n r,_,_=select.select(ls,[],[])\n for s in r:\n  c,_=s.accept(); c.close()\n";
    lab.server = Some(
        Command::new("ip")
            .args(["netns", "exec", &names[2], "python3", "-c", server])
            .stdin(Stdio::null())
            .spawn()
            .expect("b's server"),
    );
    testkit::wait::until(
        "b's server to accept from a",
        Duration::from_secs(10),
        || connects(&lab, 80).then_some(()),
    );
    lab
}

/// Whether a TCP connect from a to b:`port` succeeds (a blocked one gives up after a second).
fn connects(lab: &Lab, port: u16) -> bool {
    let to: SocketAddr = format!("{B}:{port}").parse().unwrap();
    lab.a
        .run(|| Ok(TcpStream::connect_timeout(&to, Duration::from_secs(1)).is_ok()))
        .expect("run in a's namespace")
}

fn cluster(policies: &str) -> Cluster {
    let objects = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: x, labels: {{team: x}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: y, labels: {{team: y}}}}
---
apiVersion: v1
kind: Pod
metadata: {{namespace: x, name: a, labels: {{pod: a}}}}
spec: {{nodeName: linux-1, containers: [{{name: c}}]}}
status: {{podIP: {A}}}
---
apiVersion: v1
kind: Pod
metadata: {{namespace: y, name: b, labels: {{pod: b}}}}
spec: {{nodeName: linux-1, containers: [{{name: c, ports: [{{name: web, containerPort: 80}}]}}]}}
status: {{podIP: {B}}}
{policies}"#
    );
    let mut o = kubesrc::Objects::default();
    kubesrc::manifests::load_text(&objects, "test", &mut o);
    let c = Cluster::from_objects(&o);
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    c
}

fn install(lab: &Lab, c: &Cluster, installed: &mut Option<String>) {
    lab.node
        .run(|| Ok(policy::nftables::sync(c, "linux-1", installed)))
        .expect("run in the node's namespace")
        .unwrap_or_else(|e| panic!("{e}\n{}", policy::nftables::ruleset(c, "linux-1")));
}

const FROM_X_ON_WEB: &str = r#"
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: y, name: from-x-on-web}
spec:
  podSelector: {matchLabels: {pod: b}}
  ingress:
  - from: [{namespaceSelector: {matchLabels: {team: x}}}]
    ports: [{port: web}]
"#;

const A_NO_EGRESS_BUT_81: &str = r#"
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: x, name: only-81}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 10.9.0.0/16, except: [10.9.1.0/24]}}]
    ports: [{protocol: TCP, port: 81}]
"#;

#[test]
fn policies_decide_real_connections_and_the_table_goes_whole() {
    let lab = lab();
    let mut installed = None;
    // No policy: an empty table, everything connects.
    install(&lab, &cluster(""), &mut installed);
    assert!(connects(&lab, 80) && connects(&lab, 81));
    // b admits namespace x on its named port web (80) only.
    install(&lab, &cluster(FROM_X_ON_WEB), &mut installed);
    assert!(connects(&lab, 80), "x -> b:web is allowed");
    assert!(!connects(&lab, 81), "b:81 is not");
    // a may send only to port 81 of 10.9.0.0/16 outside its own /24: with b's ingress
    // policy too, nothing from a to b is allowed.
    install(
        &lab,
        &cluster(&format!("{FROM_X_ON_WEB}{A_NO_EGRESS_BUT_81}")),
        &mut installed,
    );
    assert!(!connects(&lab, 80), "a's egress forbids 80");
    assert!(!connects(&lab, 81), "b's ingress forbids 81");
    // a's egress alone: 81 passes, 80 does not.
    install(&lab, &cluster(A_NO_EGRESS_BUT_81), &mut installed);
    assert!(connects(&lab, 81) && !connects(&lab, 80));
    // The table goes whole; the node's other tables are untouched.
    lab.node
        .run(|| {
            testkit::cmd::sh(&["nft", "add", "table", "inet", "someone-else"]);
            Ok(policy::nftables::remove())
        })
        .unwrap()
        .unwrap();
    let tables = lab
        .node
        .run(|| Ok(testkit::cmd::sh(&["nft", "list", "tables"])))
        .unwrap();
    assert_eq!(tables.trim(), "table inet someone-else");
    assert!(connects(&lab, 80) && connects(&lab, 81));
}
