//! The cluster DNS as kubeadm deploys CoreDNS: pods (`coredns-1` on the first Windows node,
//! `coredns-2` on the second), made by the node's CNI plugin like any pod, each running
//! `winnet dns` on its pod address (hnsd's DNS client stub holds 127.0.0.53:53 in every pod of
//! a Windows node) over the cluster's manifests, forwarding other names to the external host's
//! Knot DNS; the `kube-dns` Service at [`DNS_SERVICE_IP`] (UDP and TCP 53, ports `dns` and
//! `dns-tcp`) with its EndpointSlice, load-balanced by `winnet proxy` like any Service; and
//! the wait, from the pods, until that Service answers.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};

use super::super::PodState;
use super::super::topology::{
    CLUSTER_DOMAIN, DNS_POD_PREFIX, DNS_PODS, DNS_SERVICE, DNS_SERVICE_IP, EXTERNAL_IP, Os,
};
use super::Builder;

/// How long the cluster DNS may take to answer through its Service from every node.
const READY_WAIT: Duration = Duration::from_secs(30);

/// A DNS pod as made: its node's index and the pod.
pub(super) struct DnsPod {
    node: usize,
    pod: PodState,
}

/// The `kube-dns` Service and its EndpointSlice over `pods` (node name, pod), as `kubectl get
/// -o yaml` prints them.
pub fn kube_dns_objects(pods: &[(String, PodState)]) -> Value {
    let ports = |target: bool| {
        let port = |name: &str, proto: &str| {
            let mut p = json!({"name": name, "protocol": proto, "port": 53});
            if target {
                p["targetPort"] = json!(53);
            }
            p
        };
        json!([port("dns", "UDP"), port("dns-tcp", "TCP")])
    };
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": DNS_SERVICE, "namespace": "kube-system",
            "labels": {"k8s-app": "kube-dns"}},
        "spec": {"type": "ClusterIP", "clusterIP": DNS_SERVICE_IP.to_string(),
            "clusterIPs": [DNS_SERVICE_IP.to_string()], "ports": ports(true),
            "selector": {"k8s-app": "kube-dns"}},
    });
    let endpoints: Vec<Value> = pods
        .iter()
        .map(|(node, p)| {
            json!({
                "addresses": [p.ip.to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": node,
                "targetRef": {"kind": "Pod", "name": p.name, "namespace": "kube-system"},
            })
        })
        .collect();
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{DNS_SERVICE}-1"), "namespace": "kube-system",
            "labels": {"kubernetes.io/service-name": DNS_SERVICE}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports(false),
    });
    json!({"apiVersion": "v1", "kind": "List", "items": [svc, slice]})
}

impl Builder {
    /// The DNS pods' namespaces, one on each of the first [`DNS_PODS`] Windows nodes.
    pub(super) fn dns_pods(&mut self, plugins: &Path) -> anyhow::Result<Vec<DnsPod>> {
        let wins: Vec<usize> = (0..self.state.nodes.len())
            .filter(|&i| self.state.nodes[i].os == Os::Windows)
            .take(DNS_PODS)
            .collect();
        let mut out = Vec::new();
        for (k, node) in wins.into_iter().enumerate() {
            let pod = self.add_pod(node, &format!("{DNS_POD_PREFIX}{}", k + 1), plugins)?;
            out.push(DnsPod { node, pod });
        }
        Ok(out)
    }

    /// Writes `kube-dns` into the manifests and starts `winnet dns` in each DNS pod.
    pub(super) fn kube_dns(&mut self, pods: &[DnsPod]) -> anyhow::Result<()> {
        let dir = self.dir.join("manifests");
        std::fs::create_dir_all(&dir)?;
        let named: Vec<(String, PodState)> = pods
            .iter()
            .map(|d| (self.state.nodes[d.node].name.clone(), d.pod.clone()))
            .collect();
        std::fs::write(
            dir.join(format!("{DNS_SERVICE}.json")),
            serde_json::to_vec_pretty(&kube_dns_objects(&named))?,
        )?;
        let manifests = dir.to_string_lossy().into_owned();
        for (node, p) in named {
            let listen = format!("{}:53", p.ip);
            let upstream = format!("{EXTERNAL_IP}:53");
            let w = self.winnet.clone();
            let args = [
                w.as_str(),
                "dns",
                "--zone",
                CLUSTER_DOMAIN,
                "--listen",
                &listen,
                "--manifests",
                &manifests,
                "--upstream",
                &upstream,
            ];
            self.spawn(
                &format!("{node}-{} dns", p.name),
                &p.netns,
                &args,
                &format!("{node}-{}-dns", p.name),
            )?;
        }
        Ok(())
    }

    /// Waits until `kube-dns` answers a query for its own name through the Service address
    /// from a pod on every node (Windows nodes: through the switch's load balancer; the
    /// Linux node: through the first Windows node's).
    pub(super) fn wait_dns(&self, progress: &mut dyn FnMut(&str)) -> anyhow::Result<()> {
        progress("waiting for the cluster DNS to answer at its Service address");
        let name = format!("{DNS_SERVICE}.kube-system.svc.{CLUSTER_DOMAIN}");
        let server = format!("@{DNS_SERVICE_IP}");
        let deadline = Instant::now() + READY_WAIT;
        for n in &self.state.nodes {
            let Some(p) = n.pods.iter().find(|p| !p.name.starts_with(DNS_POD_PREFIX)) else {
                continue;
            };
            loop {
                let out = super::super::sh(&[
                    "ip", "netns", "exec", &p.netns, "dig", "+short", "+time=1", "+tries=1",
                    &server, &name,
                ]);
                let answer = out.as_deref().unwrap_or("").trim().to_string();
                if answer == DNS_SERVICE_IP.to_string() {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "the cluster DNS did not answer {name} at {DNS_SERVICE_IP} from {} ({}) in {} s \
                         (last: {}); see the *-dns.log files in {}",
                        p.name,
                        n.name,
                        READY_WAIT.as_secs(),
                        out.map_or_else(|e| e.to_string(), |_| answer.clone()),
                        self.dir.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_dns_has_named_udp_and_tcp_ports_and_every_dns_pod_as_endpoint() {
        let pod = |n: &str, ip: [u8; 4]| PodState {
            name: n.into(),
            netns: format!("wn-{n}"),
            ip: ip.into(),
        };
        let v = kube_dns_objects(&[
            ("win-1".into(), pod("coredns-1", [10, 244, 1, 11])),
            ("win-2".into(), pod("coredns-2", [10, 244, 2, 11])),
        ]);
        let svc = &v["items"][0];
        assert_eq!(svc["spec"]["clusterIP"], "10.96.0.10");
        let ports: Vec<(String, String)> = svc["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| (p["name"].to_string(), p["protocol"].to_string()))
            .collect();
        assert_eq!(
            ports,
            [
                ("\"dns\"".into(), "\"UDP\"".into()),
                ("\"dns-tcp\"".into(), "\"TCP\"".into())
            ]
        );
        let slice = &v["items"][1];
        assert_eq!(
            slice["metadata"]["labels"]["kubernetes.io/service-name"],
            "kube-dns"
        );
        assert_eq!(slice["endpoints"][1]["addresses"][0], "10.244.2.11");
        assert_eq!(slice["endpoints"][1]["nodeName"], "win-2");
        assert_eq!(slice["ports"][1]["port"], 53);
    }
}
