//! NetworkPolicy in the cluster: the Pods and Namespaces (with their labels) and the
//! topology's NetworkPolicies written as manifests, as `kubectl get -o json` prints them, and
//! `winnet policy` on every node as a policy agent runs there: the topology's style against
//! the node's hnsd on a Windows node, `--mode nftables` in a Linux node's namespace. Each agent
//! answers `/healthz` in its node's namespace ([`AGENT_HEALTHZ`]); `up` waits for each first
//! sync.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Namespace, Pod, PodIP, PodSpec as K8sPodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::super::leases;
use super::super::topology::Os;
use super::super::{NodeState, PodState};
use super::Builder;
use super::cluster_dns::KUBE_SYSTEM;

/// Where each node's agent serves `/healthz` and `/metrics`, in the node's namespace.
pub const AGENT_HEALTHZ: &str = "127.0.0.1:10258";
/// The manifest of the cluster's Pods and Namespaces.
const WORKLOADS_FILE: &str = "workloads.json";

impl Builder {
    /// Writes the Pods and Namespaces, then the topology's NetworkPolicies, one file each.
    pub(super) fn policy_objects(&mut self) -> anyhow::Result<()> {
        let dir = self.dir.join("manifests");
        std::fs::create_dir_all(&dir)?;
        write_json(
            &dir.join(WORKLOADS_FILE),
            &workload_objects(&self.t, &self.state.nodes)?,
        )?;
        for v in &self.t.network_policies {
            let p = lab::workloads::network_policy(v)?;
            write_json(&policy_file(&dir, &p)?, &serde_json::to_value(&p)?)?;
        }
        Ok(())
    }

    /// `winnet policy` on node `i`.
    pub(super) fn policy_agent(&mut self, i: usize) -> anyhow::Result<()> {
        let n = self.state.nodes[i].clone();
        let manifests = self.dir.join("manifests").to_string_lossy().into_owned();
        let mut args = vec![
            self.winnet.clone(),
            "policy".into(),
            "--node".into(),
            n.name.clone(),
            "--manifests".into(),
            manifests,
            "--healthz-bind-address".into(),
            AGENT_HEALTHZ.into(),
        ];
        match n.os {
            Os::Windows => args.extend([
                "--style".into(),
                self.t.network_policy_style.name().into(),
                "--network-name".into(),
                leases::network_name(self.t.mode),
                "--hns-socket".into(),
                self.socket(i).to_string_lossy().into_owned(),
                // Calico's host -> pod allow at 900: the node's own probes and traffic.
                "--host-address".into(),
                format!("{}/32", n.ip),
            ]),
            Os::Linux => args.extend(["--mode".into(), "nftables".into()]),
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn(
            &format!("{} policy", n.name),
            &n.netns,
            &refs,
            &format!("{}-policy", n.name),
        )
    }

    /// Waits until every node's agent has synced once (its `/healthz` answers 200). An agent
    /// of style npm on a build without SetPolicy refuses to start, as Azure NPM cannot run
    /// there: said, not waited for, so that the lab shows the limitation.
    pub(super) fn wait_policy_agents(&self, progress: &mut dyn FnMut(&str)) -> anyhow::Result<()> {
        progress("waiting for every node's NetworkPolicy agent to sync");
        let deadline = Instant::now() + Duration::from_secs(30);
        for n in &self.state.nodes {
            let name = format!("{} policy", n.name);
            let log = self.dir.join(format!("{}-policy.log", n.name));
            let proc = self.state.procs.iter().find(|p| p.name == name);
            let refused = || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                text.contains("needs SetPolicy")
                    .then(|| text.lines().last().unwrap_or_default().to_string())
            };
            match wait_synced(n, proc, deadline) {
                Ok(()) => {}
                Err(e) => match refused() {
                    Some(why) => progress(&format!("{name}: not running: {why}")),
                    None => return Err(e.context(format!("see {}", log.display()))),
                },
            }
        }
        Ok(())
    }
}

/// Waits until node `n`'s agent answers `/healthz` with 200, or has exited.
fn wait_synced(
    n: &NodeState,
    proc: Option<&super::super::procs::Proc>,
    deadline: Instant,
) -> anyhow::Result<()> {
    let url = format!("http://{AGENT_HEALTHZ}/healthz");
    loop {
        let code = super::super::sh_in(
            &n.netns,
            &[
                "curl",
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "1",
                &url,
            ],
        );
        if code.as_deref().is_ok_and(|c| c == "200") {
            return Ok(());
        }
        if !proc.is_some_and(|p| p.alive()) {
            bail!("the NetworkPolicy agent on {} is not running", n.name);
        }
        if Instant::now() > deadline {
            bail!(
                "the NetworkPolicy agent on {} has not synced in 30 s ({})",
                n.name,
                match code {
                    Ok(c) => format!("/healthz answers {c}"),
                    Err(e) => format!("{e:#}"),
                }
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The file NetworkPolicy `p` is written to: `networkpolicy.<namespace>.<name>.json` (both
/// are DNS names, checked when read, so the name stays one file in `dir`).
pub fn policy_file(
    dir: &Path,
    p: &k8s_openapi::api::networking::v1::NetworkPolicy,
) -> anyhow::Result<PathBuf> {
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    let name = p
        .metadata
        .name
        .as_deref()
        .context("metadata.name is missing")?;
    for (field, v) in [("metadata.namespace", ns), ("metadata.name", name)] {
        let ok = !v.is_empty()
            && v.len() <= 253
            && v.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
            && !v.starts_with('.');
        if !ok {
            bail!("{field}: {v:?} is not a Kubernetes name (a-z, 0-9, '-', '.')");
        }
    }
    Ok(dir.join(format!("networkpolicy.{ns}.{name}.json")))
}

fn write_json(path: &Path, v: &Value) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(v)?)
        .with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename {}", tmp.display()))
}

/// The Namespaces (`default` and the topology's, with their labels) and every pod of `nodes`
/// as a running Pod: its node, address, labels and named container ports.
pub fn workload_objects(t: &super::super::Topology, nodes: &[NodeState]) -> anyhow::Result<Value> {
    let mut items = vec![serde_json::to_value(namespace(
        "default",
        &Default::default(),
    ))?];
    for n in &t.namespaces {
        if n.name != "default" {
            items.push(serde_json::to_value(namespace(&n.name, &n.labels))?);
        }
    }
    let mut dns_namespace = false;
    for n in nodes {
        for p in &n.pods {
            let mut object = pod(&n.name, p);
            // The cluster DNS's pods are kube-system's, as kube-dns's EndpointSlice names them
            // (a NetworkPolicy selecting them, or doctor, reads them there).
            if p.name.starts_with(lab::topology::DNS_POD_PREFIX) {
                object.metadata.namespace = Some(KUBE_SYSTEM.into());
                object.metadata.labels =
                    Some([("k8s-app".to_string(), "kube-dns".to_string())].into());
                dns_namespace = true;
            }
            items.push(serde_json::to_value(object)?);
        }
    }
    if dns_namespace {
        items.push(serde_json::to_value(namespace(
            KUBE_SYSTEM,
            &Default::default(),
        ))?);
    }
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": items}))
}

fn namespace(name: &str, labels: &lab::workloads::Labels) -> Namespace {
    let mut labels = labels.clone();
    labels.insert("kubernetes.io/metadata.name".into(), name.into());
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

fn pod(node: &str, p: &PodState) -> Pod {
    let ports = p
        .ports
        .iter()
        .map(|s| ContainerPort {
            name: Some(s.name()),
            container_port: i32::from(s.port),
            protocol: Some(s.protocol.k8s().into()),
            ..ContainerPort::default()
        })
        .collect();
    let ips = std::iter::once(p.ip.to_string())
        .chain(p.ip6.map(|v6| v6.to_string()))
        .map(|ip| PodIP { ip })
        .collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(p.name.clone()),
            namespace: Some(p.namespace.clone()),
            labels: (!p.labels.is_empty()).then(|| p.labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(K8sPodSpec {
            node_name: Some(node.into()),
            containers: vec![Container {
                name: "serve".into(),
                ports: Some(ports),
                ..Container::default()
            }],
            ..K8sPodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(p.ip.to_string()),
            pod_ips: Some(ips),
            ..PodStatus::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_reads_the_pods_and_namespaces_as_written() {
        let t = super::super::super::Topology::parse(
            "mode: l2bridge\nprofile: ws2025\nnamespaces: [{name: x, labels: {ns: x}}]\n\
             nodes: [{name: win-1, os: windows, pods: [{name: a, namespace: x, labels: {pod: a}, serve: [tcp/80, udp/81]}]}]\n",
            "t",
        )
        .expect("topology");
        let spec = &t.nodes[0].pods[0];
        let node = NodeState {
            name: "win-1".into(),
            os: Os::Windows,
            netns: "wn-win-1".into(),
            ip: [192, 168, 77, 11].into(),
            mac: String::new(),
            subnet: None,
            source_vip: None,
            pods: vec![PodState::new(
                spec,
                "wn-win-1-x_a".into(),
                [10, 244, 1, 10].into(),
                None,
            )],
        };
        let dir = tempfile::tempdir().expect("dir");
        let v = workload_objects(&t, &[node]).expect("objects");
        std::fs::write(dir.path().join(WORKLOADS_FILE), v.to_string()).expect("write");
        let objects = kubesrc::manifests::load(dir.path());
        let c = policy::Cluster::from_objects(&objects);
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert_eq!(c.pods.len(), 1);
        assert_eq!(
            c.namespace_labels("x").get("ns").map(String::as_str),
            Some("x")
        );
        let pod = &c.pods[0];
        assert_eq!((pod.namespace.as_str(), pod.name.as_str()), ("x", "a"));
        assert_eq!(pod.node.as_deref(), Some("win-1"));
    }
}
