//! The Kubernetes objects as manifests (`kubectl get -o json` shapes: Services and their
//! EndpointSlices, typed with k8s-openapi), the external load balancer's route, the ingress IP
//! on a preserve-destination Service's backends, and `winnet proxy` on each node as kube-proxy
//! is started there: the Windows proxier on Windows nodes (overlay: `--source-vip` from
//! host-local), the nftables mode on Linux nodes.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ipnet::{IpNet, Ipv4Net};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec as K8sServiceSpec,
    ServiceStatus,
};

use super::super::leases;
use super::super::topology::{
    CLUSTER_CIDR, EXTERNAL_NAME_SERVICE, EXTERNAL_ZONE, HEADLESS_SERVICE, HTTP_PORT, Mode,
    NAMESPACE, Os, ServiceSpec, Topology, cluster_ip, cluster_ip_v6,
};
use super::super::{NS_PREFIX, NodeState, PodState, netlink_in, sh_in};
use super::{Builder, route_via};
use lab::objects::{self, List};
use proxy::nftables::TABLE;

impl Builder {
    /// Writes the Services and their EndpointSlices as `kubectl get -o json` would print them.
    pub(super) fn services(&mut self) -> anyhow::Result<()> {
        let dir = self.dir.join("manifests");
        std::fs::create_dir_all(&dir)?;
        let pods = self.named_pods();
        for (k, s) in self.t.services.iter().enumerate() {
            if let Some(lb) = s.load_balancer_ip {
                self.route_load_balancer(lb)?;
            }
            std::fs::write(
                dir.join(format!("{}.json", s.name)),
                serde_json::to_vec_pretty(&service_objects(
                    k,
                    s,
                    self.t.health_check_port(s),
                    &pods,
                )?)?,
            )?;
        }
        Ok(())
    }

    /// Writes the objects only DNS reads ([`dns_objects`]).
    pub(super) fn dns_objects(&mut self) -> anyhow::Result<()> {
        let dir = self.dir.join("manifests");
        std::fs::create_dir_all(&dir)?;
        if let Some(v) = dns_objects(&self.t, &self.named_pods()) {
            std::fs::write(dir.join("dns-objects.json"), serde_json::to_vec_pretty(&v)?)?;
        }
        Ok(())
    }

    /// Every pod with its node's name.
    fn named_pods(&self) -> Vec<(String, PodState)> {
        self.state
            .nodes
            .iter()
            .flat_map(|n| n.pods.iter().map(move |p| (n.name.clone(), p.clone())))
            .collect()
    }

    /// The external load balancer hands its address to the first Windows node.
    fn route_load_balancer(&self, lb: Ipv4Addr) -> anyhow::Result<()> {
        if let Some(first) = self.state.nodes.iter().find(|n| n.os == Os::Windows) {
            let ext = format!("{NS_PREFIX}external");
            route_via(&ext, IpNet::V4(Ipv4Net::from(lb)), first.ip)?;
        }
        Ok(())
    }

    /// kube-proxy on Linux node `i`, as a Linux node runs it: `--proxy-mode nftables` on the
    /// same manifests, so that its pods reach Services through its own DNAT (and a DSR reply
    /// from a Windows node's backend comes straight back to them).
    pub(super) fn linux_proxy(&mut self, i: usize) -> anyhow::Result<()> {
        let n = self.state.nodes[i].clone();
        let manifests = self.dir.join("manifests").to_string_lossy().into_owned();
        let w = self.winnet.clone();
        let args = [
            w.as_str(),
            "proxy",
            "--proxy-mode",
            "nftables",
            "--hostname-override",
            &n.name,
            "--cluster-cidr",
            CLUSTER_CIDR,
            "--manifests",
            &manifests,
        ];
        self.spawn(
            &format!("{} proxy", n.name),
            &n.netns,
            &args,
            &format!("{}-proxy", n.name),
        )
    }

    /// The backends of a preserve-destination Service hold its ingress address on their
    /// loopback, as any DSR real server must (LVS-DR's rule): the packet reaches them with the
    /// ingress IP as its destination. A workload does this itself (in Kubernetes, an init
    /// container with NET_ADMIN); the local cluster does it for the pods it runs.
    pub(super) fn preserve_destination_addresses(&self) -> anyhow::Result<()> {
        for s in self.t.services.iter().filter(|s| s.preserve_destination) {
            let Some(lb) = s.load_balancer_ip else {
                continue;
            };
            let vip = IpNet::V4(Ipv4Net::from(lb));
            for (_, p) in self.named_pods() {
                if !p.name.starts_with(&s.selector) {
                    continue;
                }
                netlink_in(&p.netns, |nl| {
                    let lo = nl.existing_link("lo")?;
                    nl.add_address(lo.index, vip)
                })?;
            }
        }
        Ok(())
    }

    /// kube-proxy on Windows node `i`.
    pub(super) fn proxy(&mut self, i: usize) -> anyhow::Result<()> {
        let n = self.state.nodes[i].clone();
        let sock = self.socket(i).to_string_lossy().into_owned();
        let manifests = self.dir.join("manifests").to_string_lossy().into_owned();
        let mut args: Vec<String> = vec![
            self.winnet.clone(),
            "proxy".into(),
            "--network-name".into(),
            leases::network_name(self.t.mode),
            "--hostname-override".into(),
            n.name.clone(),
            "--bind-address".into(),
            n.ip.to_string(),
            "--manifests".into(),
            manifests,
            "--hns-socket".into(),
            sock,
            "--cluster-cidr".into(),
            CLUSTER_CIDR.into(),
        ];
        if self.t.dual_stack {
            args.extend([
                "--bind-address".into(),
                super::super::topology::fabric_ip_v6(n.ip).to_string(),
            ]);
        }
        let mut gates = Vec::new();
        if self.t.mode == Mode::Overlay {
            let vip = n
                .source_vip
                .with_context(|| format!("{}: no source VIP reserved", n.name))?;
            args.extend(["--source-vip".into(), vip.to_string()]);
            gates.push("WinOverlay=true");
        }
        if self.t.dsr {
            args.push("--enable-dsr".into());
            gates.push("WinDSR=true");
        }
        if !gates.is_empty() {
            args.extend(["--feature-gates".into(), gates.join(",")]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn(
            &format!("{} proxy", n.name),
            &n.netns,
            &refs,
            &format!("{}-proxy", n.name),
        )
    }

    /// Waits until kube-proxy on every Windows node says, in its own metrics, that it has
    /// synced the Services and has none left to retry. A Service may have no load balancer on
    /// a node (internalTrafficPolicy Local without a local backend, no ready endpoint), so the
    /// load balancers in HNS cannot tell; and one HNS refuses (more backends than the build
    /// takes) stays pending, which ends the wait too: the matrix shows it. A Linux node's
    /// kube-proxy (nftables) is waited for until its table holds every Service's ClusterIP.
    pub(super) fn wait_programmed(&self, progress: &mut dyn FnMut(&str)) -> anyhow::Result<()> {
        if self.t.services.is_empty() {
            return Ok(());
        }
        progress("waiting for kube-proxy to program the load balancers");
        let deadline = Instant::now() + Duration::from_secs(30);
        for n in &self.state.nodes {
            if n.os == Os::Linux {
                self.wait_nftables(n, deadline)?;
                continue;
            }
            loop {
                let metrics = super::super::sh_in(
                    &n.netns,
                    &["curl", "-sS", "--max-time", "1", PROXY_METRICS],
                );
                let seen = metrics.as_deref().map(ProxyProgress::read);
                if let Ok(p) = &seen
                    && p.syncs > 0.0
                    && (p.pending == 0.0 || p.hns_failures > 0.0)
                {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "kube-proxy on {} did not program the Services in 30 s ({}); see {}",
                        n.name,
                        match seen {
                            Ok(p) => format!("{} syncs, {} Services pending", p.syncs, p.pending),
                            Err(e) => format!("no metrics: {e}"),
                        },
                        self.dir.join(format!("{}-proxy.log", n.name)).display()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

/// Where kube-proxy serves /metrics by default, inside its node's namespace.
const PROXY_METRICS: &str = "http://127.0.0.1:10249/metrics";

/// What kube-proxy's metrics say about its progress.
struct ProxyProgress {
    syncs: f64,
    pending: f64,
    hns_failures: f64,
}

impl ProxyProgress {
    /// Reads the text exposition (a metric not there yet reads 0).
    fn read(text: &str) -> ProxyProgress {
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
                .unwrap_or(0.0)
        };
        ProxyProgress {
            syncs: value("winnet_proxy_syncs_total"),
            pending: value("winnet_proxy_services_pending"),
            hns_failures: value("winnet_proxy_hns_call_failures_total"),
        }
    }
}

impl Builder {
    /// Waits until Linux node `n`'s kube-proxy installed its table with every Service.
    fn wait_nftables(&self, n: &NodeState, deadline: Instant) -> anyhow::Result<()> {
        let ips: Vec<String> = (0..self.t.services.len())
            .filter_map(cluster_ip)
            .map(|ip| format!("daddr {ip} "))
            .collect();
        loop {
            let listed =
                sh_in(&n.netns, &["nft", "list", "table", "ip", TABLE]).unwrap_or_default();
            if ips.iter().all(|ip| listed.contains(ip)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-proxy on {} did not install every Service's rules in 30 s; see {}",
                    n.name,
                    self.dir.join(format!("{}-proxy.log", n.name)).display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Service number `k` of the topology (`s`, with the health check node port the topology
/// gives or allocates it) and its EndpointSlice over the `pods` (node name, pod) it selects, as
/// `kubectl get -o json` prints them.
pub fn service_objects(
    k: usize,
    s: &ServiceSpec,
    health_check_node_port: Option<u16>,
    pods: &[(String, PodState)],
) -> anyhow::Result<List> {
    let ip = cluster_ip(k).with_context(|| format!("services[{}]: no ClusterIP left", s.name))?;
    let kind = if s.load_balancer_ip.is_some() {
        "LoadBalancer"
    } else if s.node_port.is_some() {
        "NodePort"
    } else {
        "ClusterIP"
    };
    let (cluster_ip, mut cluster_ips) = objects::cluster_ips(Some(ip));
    let mut ip_families = None;
    if s.dual_stack() {
        let ip6 = cluster_ip_v6(k)
            .with_context(|| format!("services[{}]: no IPv6 ClusterIP left", s.name))?;
        cluster_ips
            .get_or_insert_with(Vec::new)
            .push(ip6.to_string());
        ip_families = Some(vec!["IPv4".to_string(), "IPv6".to_string()]);
    }
    let mut metadata = objects::meta(&s.name, NAMESPACE);
    if s.preserve_destination {
        metadata.annotations = Some(objects::labels(&[("preserve-destination", "true")]));
    }
    let svc = Service {
        metadata,
        spec: Some(K8sServiceSpec {
            type_: Some(kind.into()),
            cluster_ip,
            cluster_ips,
            ports: Some(vec![ServicePort {
                node_port: s.node_port.map(i32::from),
                ..objects::service_port("http", "TCP", s.port, Some(s.target_port))
            }]),
            selector: Some(objects::labels(&[("app", &s.selector)])),
            session_affinity: s.session_affinity.then(|| "ClientIP".to_string()),
            external_traffic_policy: s.external_traffic_policy.then(|| "Local".to_string()),
            internal_traffic_policy: s.internal_traffic_policy.then(|| "Local".to_string()),
            ip_families,
            ip_family_policy: s.dual_stack().then(|| format!("{:?}", s.ip_family_policy)),
            health_check_node_port: health_check_node_port.map(i32::from),
            ..K8sServiceSpec::default()
        }),
        status: s.load_balancer_ip.map(|lb| ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    ip: Some(lb.to_string()),
                    ..LoadBalancerIngress::default()
                }]),
            }),
            ..ServiceStatus::default()
        }),
    };
    let endpoints = pods
        .iter()
        .filter(|(_, p)| p.name.starts_with(&s.selector))
        .map(|(node, p)| k8s_openapi::api::discovery::v1::Endpoint {
            conditions: Some(objects::conditions(s.endpoints)),
            ..objects::pod_endpoint(node, &p.name, std::net::IpAddr::V4(p.ip), NAMESPACE, false)
        })
        .collect();
    let slice = objects::endpoint_slice(
        &s.name,
        NAMESPACE,
        endpoints,
        vec![objects::endpoint_port("http", "TCP", s.target_port)],
    );
    let mut items = vec![svc.into(), slice.into()];
    if s.dual_stack() {
        // The EndpointSlice controller keeps one slice per family: `<service>-2` holds the
        // IPv6 addresses of the pods that have one.
        let endpoints = pods
            .iter()
            .filter(|(_, p)| p.name.starts_with(&s.selector))
            .filter_map(|(node, p)| {
                let ip6 = std::net::IpAddr::V6(p.ip6?);
                Some(objects::pod_endpoint(node, &p.name, ip6, NAMESPACE, false))
            })
            .collect();
        let mut v6 = objects::endpoint_slice(
            &s.name,
            NAMESPACE,
            endpoints,
            vec![objects::endpoint_port("http", "TCP", s.target_port)],
        );
        v6.address_type = "IPv6".into();
        v6.metadata.name = Some(format!("{}-2", s.name));
        items.push(v6.into());
    }
    Ok(List::new(items))
}

/// The objects only DNS reads (kube-proxy skips them), over the `pods` (node name, pod): the
/// headless Service [`HEADLESS_SERVICE`] over the first Service's pods, each endpoint carrying
/// its pod's name as hostname (as a StatefulSet's pods with that subdomain get), and the
/// ExternalName Service [`EXTERNAL_NAME_SERVICE`] for `www.<external zone>`; `None` without
/// a Service.
pub fn dns_objects(t: &Topology, pods: &[(String, PodState)]) -> Option<List> {
    let selector = t.services.first()?.selector.clone();
    let endpoints = pods
        .iter()
        .filter(|(_, p)| p.name.starts_with(&selector))
        .map(|(node, p)| {
            objects::pod_endpoint(node, &p.name, std::net::IpAddr::V4(p.ip), NAMESPACE, true)
        })
        .collect();
    let (cluster_ip, cluster_ips) = objects::cluster_ips(None);
    let headless = Service {
        metadata: objects::meta(HEADLESS_SERVICE, NAMESPACE),
        spec: Some(K8sServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip,
            cluster_ips,
            ports: Some(vec![objects::service_port(
                "http",
                "TCP",
                HTTP_PORT,
                Some(HTTP_PORT),
            )]),
            selector: Some(objects::labels(&[("app", &selector)])),
            ..K8sServiceSpec::default()
        }),
        status: None,
    };
    let slice = objects::endpoint_slice(
        HEADLESS_SERVICE,
        NAMESPACE,
        endpoints,
        vec![objects::endpoint_port("http", "TCP", HTTP_PORT)],
    );
    let external = Service {
        metadata: objects::meta(EXTERNAL_NAME_SERVICE, NAMESPACE),
        spec: Some(K8sServiceSpec {
            type_: Some("ExternalName".into()),
            external_name: Some(format!("www.{EXTERNAL_ZONE}")),
            ..K8sServiceSpec::default()
        }),
        status: None,
    };
    Some(List::new(vec![
        headless.into(),
        slice.into(),
        external.into(),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::topology::EndpointState;
    use serde_json::json;

    fn pods() -> Vec<(String, PodState)> {
        let pod = PodState::plain_at;
        vec![
            ("win-1".into(), pod("web-1", [10, 244, 1, 10])),
            ("lin-1".into(), pod("web-2", [10, 244, 3, 10])),
            ("win-1".into(), pod("client-1", [10, 244, 1, 11])),
        ]
    }

    fn endpoint(ip: &str, node: &str, name: &str) -> serde_json::Value {
        json!({
            "addresses": [ip],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "nodeName": node,
            "targetRef": {"kind": "Pod", "name": name, "namespace": "default"},
        })
    }

    fn web(node_port: Option<u16>, lb: Option<Ipv4Addr>) -> ServiceSpec {
        ServiceSpec {
            name: "web".into(),
            selector: "web".into(),
            port: 80,
            target_port: 8080,
            node_port,
            load_balancer_ip: lb,
            session_affinity: false,
            external_traffic_policy: false,
            internal_traffic_policy: false,
            endpoints: EndpointState::Ready,
            ip_family_policy: Default::default(),
            health_check_node_port: None,
            preserve_destination: false,
        }
    }

    /// Reads `list` as kube-proxy and the cluster DNS do; the counts of Services and slices.
    fn read_back(list: &List) -> (usize, usize) {
        let mut read = kubesrc::Objects::default();
        let text = serde_json::to_string(list).expect("serializes");
        kubesrc::manifests::load_text(&text, "manifest", &mut read);
        assert_eq!(read.problems, Vec::<String>::new());
        (read.services.len(), read.slices.len())
    }

    /// The documents the `json!` builder wrote before the objects were typed: what kube-proxy
    /// and the cluster DNS have always read.
    #[test]
    fn a_load_balancer_service_is_the_document_it_always_was() {
        let lb = Ipv4Addr::new(192, 168, 77, 200);
        let list = service_objects(2, &web(Some(30080), Some(lb)), None, &pods()).expect("objects");
        let ip = cluster_ip(2).expect("a ClusterIP").to_string();
        let expected = json!({"apiVersion": "v1", "kind": "List", "items": [
            {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"type": "LoadBalancer", "clusterIP": ip, "clusterIPs": [ip],
                    "ports": [{"name": "http", "protocol": "TCP", "port": 80,
                        "targetPort": 8080, "nodePort": 30080}],
                    "selector": {"app": "web"}},
                "status": {"loadBalancer": {"ingress": [{"ip": "192.168.77.200"}]}},
            },
            {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "web-1", "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "endpoints": [
                    endpoint("10.244.1.10", "win-1", "web-1"),
                    endpoint("10.244.3.10", "lin-1", "web-2"),
                ],
                "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            },
        ]});
        assert_eq!(serde_json::to_value(&list).expect("serializes"), expected);
        assert_eq!(read_back(&list), (1, 1));
    }

    /// The topology's traffic policy and endpoint state reach the documents kube-proxy reads.
    #[test]
    fn internal_traffic_policy_and_endpoint_conditions_are_written() {
        let s = ServiceSpec {
            internal_traffic_policy: true,
            endpoints: EndpointState::Terminating,
            ..web(None, None)
        };
        let v = serde_json::to_value(service_objects(0, &s, None, &pods()).expect("objects"))
            .expect("serializes");
        assert_eq!(v["items"][0]["spec"]["internalTrafficPolicy"], "Local");
        let eps = v["items"][1]["endpoints"].as_array().expect("endpoints");
        assert_eq!(eps.len(), 2);
        for e in eps {
            assert_eq!(
                e["conditions"],
                json!({"ready": false, "serving": true, "terminating": true})
            );
        }
        let stopped = ServiceSpec {
            endpoints: EndpointState::NotServing,
            ..web(None, None)
        };
        let v = serde_json::to_value(service_objects(0, &stopped, None, &pods()).expect("objects"))
            .expect("serializes");
        assert!(v["items"][0]["spec"].get("internalTrafficPolicy").is_none());
        assert_eq!(
            v["items"][1]["endpoints"][0]["conditions"],
            json!({"ready": false, "serving": false, "terminating": true})
        );
        let mut read = kubesrc::Objects::default();
        kubesrc::manifests::load_text(&v.to_string(), "manifest", &mut read);
        assert_eq!(read.problems, Vec::<String>::new());
    }

    #[test]
    fn services_are_typed_by_what_they_expose() {
        let kind = |s: &ServiceSpec| {
            let v = serde_json::to_value(service_objects(0, s, None, &[]).expect("objects"))
                .expect("serializes");
            v["items"][0]["spec"]["type"].clone()
        };
        assert_eq!(kind(&web(None, None)), "ClusterIP");
        assert_eq!(kind(&web(Some(30080), None)), "NodePort");
        let plain =
            serde_json::to_value(service_objects(0, &web(None, None), None, &[]).expect("o"))
                .expect("serializes");
        assert!(plain["items"][0].get("status").is_none());
        assert!(
            plain["items"][0]["spec"]["ports"][0]
                .get("nodePort")
                .is_none()
        );
        assert_eq!(plain["items"][1]["endpoints"], json!([]));
    }

    #[test]
    fn the_dns_only_objects_are_the_documents_they_always_were() {
        let t: Topology = serde_json::from_value(json!({
            "mode": "overlay", "profile": "ws2022",
            "nodes": [{"name": "win-1", "os": "windows", "pods": ["web-1", "client-1"]}],
            "services": [{"name": "web", "selector": "web", "port": 80, "targetPort": 8080,
                "nodePort": null, "loadBalancerIP": null}],
        }))
        .expect("a topology");
        let list = dns_objects(&t, &pods()).expect("objects with a Service");
        let with_hostname = |ip: &str, node: &str, name: &str| {
            let mut e = endpoint(ip, node, name);
            e["hostname"] = json!(name);
            e
        };
        let expected = json!({"apiVersion": "v1", "kind": "List", "items": [
            {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "peers", "namespace": "default"},
                "spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
                    "ports": [{"name": "http", "protocol": "TCP", "port": 8080,
                        "targetPort": 8080}],
                    "selector": {"app": "web"}},
            },
            {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "peers-1", "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "peers"}},
                "addressType": "IPv4",
                "endpoints": [
                    with_hostname("10.244.1.10", "win-1", "web-1"),
                    with_hostname("10.244.3.10", "lin-1", "web-2"),
                ],
                "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
            },
            {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "outside", "namespace": "default"},
                "spec": {"type": "ExternalName", "externalName": "www.example.test"},
            },
        ]});
        assert_eq!(serde_json::to_value(&list).expect("serializes"), expected);
        assert_eq!(read_back(&list), (2, 1));
        let none = Topology {
            services: Vec::new(),
            ..t
        };
        assert!(dns_objects(&none, &pods()).is_none());
    }
}
