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
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::super::PodState;
use super::super::topology::{
    CLUSTER_DOMAIN, DNS_POD_PREFIX, DNS_PODS, DNS_SERVICE, DNS_SERVICE_IP, EXTERNAL_IP, Os,
};
use super::Builder;
use lab::objects::{self, List};

/// How long the cluster DNS may take to answer through its Service from every node.
const READY_WAIT: Duration = Duration::from_secs(30);

/// A DNS pod as made: its node's index and the pod.
pub(super) struct DnsPod {
    node: usize,
    pod: PodState,
}

/// The namespace of the cluster DNS.
pub(super) const KUBE_SYSTEM: &str = "kube-system";

/// The `kube-dns` Service and its EndpointSlice over `pods` (node name, pod), as `kubectl get
/// -o json` prints them.
pub fn kube_dns_objects(pods: &[(String, PodState)]) -> List {
    let selector = objects::labels(&[("k8s-app", "kube-dns")]);
    let (cluster_ip, cluster_ips) = objects::cluster_ips(Some(DNS_SERVICE_IP));
    let svc = Service {
        metadata: ObjectMeta {
            labels: Some(selector.clone()),
            ..objects::meta(DNS_SERVICE, KUBE_SYSTEM)
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip,
            cluster_ips,
            ports: Some(vec![
                objects::service_port("dns", "UDP", 53, Some(53)),
                objects::service_port("dns-tcp", "TCP", 53, Some(53)),
            ]),
            selector: Some(selector),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    let endpoints = pods
        .iter()
        .map(|(node, p)| {
            objects::pod_endpoint(
                node,
                &p.name,
                std::net::IpAddr::V4(p.ip),
                KUBE_SYSTEM,
                false,
            )
        })
        .collect();
    let slice = objects::endpoint_slice(
        DNS_SERVICE,
        KUBE_SYSTEM,
        endpoints,
        vec![
            objects::endpoint_port("dns", "UDP", 53),
            objects::endpoint_port("dns-tcp", "TCP", 53),
        ],
    );
    List::new(vec![svc.into(), slice.into()])
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
            let spec = lab::workloads::PodSpec::plain(&format!("{DNS_POD_PREFIX}{}", k + 1));
            let pod = self.add_pod(node, &spec, plugins)?;
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
    /// Linux node: through its own kube-proxy's nftables DNAT).
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
                let out = super::super::sh_in(
                    &p.netns,
                    &["dig", "+short", "+time=1", "+tries=1", &server, &name],
                );
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
    use serde_json::json;

    /// The document the `json!` builder wrote before the objects were typed: what kube-proxy
    /// and the cluster DNS have always read.
    #[test]
    fn kube_dns_is_the_document_it_always_was_and_kubesrc_reads_it() {
        let pod = PodState::plain_at;
        let list = kube_dns_objects(&[
            ("win-1".into(), pod("coredns-1", [10, 244, 1, 11])),
            ("win-2".into(), pod("coredns-2", [10, 244, 2, 11])),
        ]);
        let endpoint = |ip: &str, node: &str, name: &str| {
            json!({
                "addresses": [ip],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": node,
                "targetRef": {"kind": "Pod", "name": name, "namespace": "kube-system"},
            })
        };
        let expected = json!({"apiVersion": "v1", "kind": "List", "items": [
            {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kube-dns", "namespace": "kube-system",
                    "labels": {"k8s-app": "kube-dns"}},
                "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10",
                    "clusterIPs": ["10.96.0.10"],
                    "ports": [
                        {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 53},
                        {"name": "dns-tcp", "protocol": "TCP", "port": 53, "targetPort": 53},
                    ],
                    "selector": {"k8s-app": "kube-dns"}},
            },
            {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kube-dns-1", "namespace": "kube-system",
                    "labels": {"kubernetes.io/service-name": "kube-dns"}},
                "addressType": "IPv4",
                "endpoints": [
                    endpoint("10.244.1.11", "win-1", "coredns-1"),
                    endpoint("10.244.2.11", "win-2", "coredns-2"),
                ],
                "ports": [
                    {"name": "dns", "protocol": "UDP", "port": 53},
                    {"name": "dns-tcp", "protocol": "TCP", "port": 53},
                ],
            },
        ]});
        assert_eq!(serde_json::to_value(&list).expect("serializes"), expected);

        let mut read = kubesrc::Objects::default();
        let text = serde_json::to_string(&list).expect("serializes");
        kubesrc::manifests::load_text(&text, "kube-dns.json", &mut read);
        assert_eq!(read.problems, Vec::<String>::new());
        assert_eq!((read.services.len(), read.slices.len()), (1, 1));
    }
}
