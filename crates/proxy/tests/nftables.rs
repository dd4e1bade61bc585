//! The nftables proxier's ruleset is one the kernel takes: `nft --check` on the rules of every
//! kind of Service (ClusterIP, NodePort and LoadBalancer with either traffic policy, ClientIP
//! affinity, no endpoints, IPv6). Root only (nft speaks netlink); nothing is installed.

use std::io::Write;
use std::process::{Command, Stdio};

use proxy::nftables::{LinuxNode, ruleset::ruleset};
use proxy::source::{Snapshot, manifests};

const OBJECTS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: LoadBalancer
  clusterIP: 10.96.1.1
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]
  sessionAffinity: ClientIP
status: {loadBalancer: {ingress: [{ip: 192.168.77.200}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
  - {addresses: [10.244.1.10], nodeName: win-1}
  - {addresses: [10.244.3.10], nodeName: linux-1}
ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: local, namespace: default}
spec:
  type: LoadBalancer
  clusterIP: 10.96.1.3
  externalTrafficPolicy: Local
  healthCheckNodePort: 32081
  ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30081}]
status: {loadBalancer: {ingress: [{ip: 192.168.77.201}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: local-1, namespace: default, labels: {kubernetes.io/service-name: local}}
addressType: IPv4
endpoints: [{addresses: [10.244.1.10], nodeName: win-1}]
ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: gone, namespace: default}
spec:
  type: NodePort
  clusterIP: 10.96.1.9
  ports: [{name: dns, protocol: UDP, port: 53, targetPort: 53, nodePort: 30053}]
---
apiVersion: v1
kind: Service
metadata: {name: six, namespace: default}
spec:
  clusterIP: fd00:96::1
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: six-1, namespace: default, labels: {kubernetes.io/service-name: six}}
addressType: IPv6
endpoints: [{addresses: ["fd00:10:244:1::10"], nodeName: linux-1}]
ports: [{name: http, port: 8080}]
"#;

#[test]
fn the_kernel_takes_the_ruleset_of_every_kind_of_service() {
    testkit::require_root("the test asks nft to check the rules");
    let mut snap = Snapshot::default();
    manifests::load_text(OBJECTS, "objects", &mut snap);
    assert_eq!(snap.problems, Vec::<String>::new());
    let node = LinuxNode {
        hostname: "linux-1".into(),
        cluster_cidrs: vec![
            "10.244.0.0/16".parse().expect("cidr"),
            "fd00:10:244::/56".parse().expect("cidr"),
        ],
    };
    let rules = ruleset(&snap, &node);
    for want in [
        "ip daddr 192.168.77.201 tcp dport 80 goto external-default/local/tcp/http",
        "reject comment \"default/gone/udp/dns has no endpoints\"",
        "meta l4proto tcp dnat to [fd00:10:244:1::10]:8080",
    ] {
        assert!(rules.contains(want), "{want} in:\n{rules}");
    }
    let mut nft = Command::new("nft")
        .args(["--check", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nft (Debian's nftables) runs");
    nft.stdin
        .take()
        .expect("stdin")
        .write_all(rules.as_bytes())
        .expect("write");
    let out = nft.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft refused the rules: {}\n{rules}",
        String::from_utf8_lossy(&out.stderr)
    );
}
