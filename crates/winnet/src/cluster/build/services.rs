//! The Kubernetes objects as manifests (`kubectl get -o yaml` shapes: Services and their
//! EndpointSlices), the external load balancer's route, and `winnet proxy` on each Windows
//! node as kube-proxy is started there (overlay: `--source-vip` from host-local).

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::super::leases;
use super::super::topology::{
    CLUSTER_CIDR, EXTERNAL_NAME_SERVICE, EXTERNAL_ZONE, HEADLESS_SERVICE, HTTP_PORT, Mode,
    NAMESPACE, Os, SERVICE_CIDR, ServiceSpec, Topology, cluster_ip,
};
use super::super::{NS_PREFIX, PodState, sh};
use super::Builder;

impl Builder {
    /// Writes the Services and their EndpointSlices as `kubectl get -o yaml` would print them.
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
                serde_json::to_vec_pretty(&service_objects(k, s, &pods)?)?,
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
            sh(&[
                "ip",
                "-n",
                &ext,
                "route",
                "replace",
                &format!("{lb}/32"),
                "via",
                &first.ip.to_string(),
            ])?;
        }
        Ok(())
    }

    /// Linux node `i` has no kube-proxy of ours: it sends Service traffic to the first Windows
    /// node, whose switch load-balances what arrives on its uplink (translating the source to
    /// the node or its source VIP, so replies come back the same way).
    pub(super) fn services_via_windows(&self, i: usize) -> anyhow::Result<()> {
        let Some(win) = self.state.nodes.iter().find(|n| n.os == Os::Windows) else {
            return Ok(());
        };
        let ns = &self.state.nodes[i].netns;
        sh(&[
            "ip",
            "-n",
            ns,
            "route",
            "replace",
            SERVICE_CIDR,
            "via",
            &win.ip.to_string(),
        ])?;
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
        if self.t.mode == Mode::Overlay {
            let vip = n
                .source_vip
                .with_context(|| format!("{}: no source VIP reserved", n.name))?;
            args.extend([
                "--source-vip".into(),
                vip.to_string(),
                "--feature-gates".into(),
                "WinOverlay=true".into(),
            ]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn(
            &format!("{} proxy", n.name),
            &n.netns,
            &refs,
            &format!("{}-proxy", n.name),
        )
    }

    /// Waits until every Windows node's hnsd holds a load balancer per Service frontend.
    pub(super) fn wait_programmed(&self, progress: &mut dyn FnMut(&str)) -> anyhow::Result<()> {
        if self.t.services.is_empty() {
            return Ok(());
        }
        progress("waiting for kube-proxy to program the load balancers");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        for (i, n) in self.state.nodes.iter().enumerate() {
            if n.os != Os::Windows {
                continue;
            }
            let client = hns_client::Client::new(self.socket(i));
            loop {
                let count = rt.block_on(client.list_load_balancers())?.len();
                if count >= self.t.services.len() {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "kube-proxy on {} programmed {count} load balancers in 30 s; see {}",
                        n.name,
                        self.dir.join(format!("{}-proxy.log", n.name)).display()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

/// Service number `k` of the topology (`s`) and its EndpointSlice over the `pods` (node name,
/// pod) it selects, as `kubectl get -o yaml` prints them.
pub fn service_objects(
    k: usize,
    s: &ServiceSpec,
    pods: &[(String, PodState)],
) -> anyhow::Result<Value> {
    let ip = cluster_ip(k).with_context(|| format!("services[{}]: no ClusterIP left", s.name))?;
    let mut spec = json!({
        "type": if s.load_balancer_ip.is_some() { "LoadBalancer" } else if s.node_port.is_some() { "NodePort" } else { "ClusterIP" },
        "clusterIP": ip.to_string(), "clusterIPs": [ip.to_string()],
        "ports": [{"name": "http", "protocol": "TCP", "port": s.port, "targetPort": s.target_port}],
        "selector": {"app": s.selector},
    });
    if let Some(np) = s.node_port {
        spec["ports"][0]["nodePort"] = json!(np);
    }
    let mut svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": s.name, "namespace": "default"},
        "spec": spec,
    });
    if let Some(lb) = s.load_balancer_ip {
        svc["status"] = json!({"loadBalancer": {"ingress": [{"ip": lb.to_string()}]}});
    }
    let endpoints: Vec<Value> = pods
        .iter()
        .filter(|(_, p)| p.name.starts_with(&s.selector))
        .map(|(node, p)| {
            json!({
                "addresses": [p.ip.to_string()],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": node,
                "targetRef": {"kind": "Pod", "name": p.name, "namespace": "default"},
            })
        })
        .collect();
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{}-1", s.name), "namespace": "default",
            "labels": {"kubernetes.io/service-name": s.name}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": s.target_port}],
    });
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": [svc, slice]}))
}

/// The objects only DNS reads (kube-proxy skips them), over the `pods` (node name, pod): the
/// headless Service [`HEADLESS_SERVICE`] over the first Service's pods, each endpoint carrying
/// its pod's name as hostname (as a StatefulSet's pods with that subdomain get), and the
/// ExternalName Service [`EXTERNAL_NAME_SERVICE`] for `www.<external zone>`; `None` without
/// a Service.
pub fn dns_objects(t: &Topology, pods: &[(String, PodState)]) -> Option<Value> {
    let selector = t.services.first()?.selector.clone();
    let endpoints: Vec<Value> = pods
        .iter()
        .filter(|(_, p)| p.name.starts_with(&selector))
        .map(|(node, p)| {
            json!({
                "addresses": [p.ip.to_string()],
                "hostname": p.name,
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": node,
                "targetRef": {"kind": "Pod", "name": p.name, "namespace": NAMESPACE},
            })
        })
        .collect();
    let headless = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": HEADLESS_SERVICE, "namespace": NAMESPACE},
        "spec": {"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"],
            "ports": [{"name": "http", "protocol": "TCP", "port": HTTP_PORT, "targetPort": HTTP_PORT}],
            "selector": {"app": selector}},
    });
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{HEADLESS_SERVICE}-1"), "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": HEADLESS_SERVICE}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "protocol": "TCP", "port": HTTP_PORT}],
    });
    let external = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": EXTERNAL_NAME_SERVICE, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": format!("www.{EXTERNAL_ZONE}")},
    });
    Some(json!({"apiVersion": "v1", "kind": "List", "items": [headless, slice, external]}))
}
