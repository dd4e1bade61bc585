//! A node's pods from the Kubernetes objects (the same source as its Services: a folder of
//! manifests, or a kube API): those scheduled on it (`spec.nodeName`) on the pod network (not
//! `hostNetwork`), with their address (`status.podIP`, else the first of `status.podIPs`) and
//! their containers' exec probes.

use std::net::IpAddr;

use doctor::snapshot::{ExecProbe, Pod};
use k8s_openapi::api::core::v1::{Container, Pod as KubePod};

/// The pods of `node` in `objects`; `None` when the source holds no Pod at all (a folder of
/// kube-proxy's manifests has none): then the pods are not known, and the pod checks are
/// skipped rather than passed.
pub fn of_node(objects: &kubesrc::Objects, node: &str) -> Option<Vec<Pod>> {
    if objects.pods.is_empty() {
        return None;
    }
    let mut pods: Vec<Pod> = objects
        .pods
        .values()
        .map(|s| &s.object)
        .filter(|p| on_pod_network_of(p, node))
        .map(pod)
        .collect();
    pods.sort_by_key(Pod::key);
    Some(pods)
}

fn on_pod_network_of(p: &KubePod, node: &str) -> bool {
    let Some(spec) = &p.spec else { return false };
    spec.node_name.as_deref() == Some(node) && spec.host_network != Some(true)
}

fn pod(p: &KubePod) -> Pod {
    let status = p.status.as_ref();
    let ip = status
        .and_then(|s| s.pod_ip.as_deref())
        .into_iter()
        .chain(
            status
                .and_then(|s| s.pod_ips.as_ref())
                .into_iter()
                .flatten()
                .map(|i| i.ip.as_str()),
        )
        .find_map(|s| s.parse::<IpAddr>().ok());
    let exec_probes = p
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .flat_map(probes)
        .collect();
    Pod {
        namespace: p
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: p.metadata.name.clone().unwrap_or_default(),
        ip,
        // The runtime's namespace is not in the Pod object; a node outside the local cluster
        // is not examined from the inside.
        netns: None,
        exec_probes,
    }
}

fn probes(c: &Container) -> Vec<ExecProbe> {
    [
        ("liveness", &c.liveness_probe),
        ("readiness", &c.readiness_probe),
        ("startup", &c.startup_probe),
    ]
    .into_iter()
    .filter_map(|(kind, probe)| {
        let command = probe.as_ref()?.exec.as_ref()?.command.clone()?;
        Some(ExecProbe {
            container: c.name.clone(),
            probe: kind.to_string(),
            command,
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(text: &str) -> kubesrc::Objects {
        let mut o = kubesrc::Objects::default();
        kubesrc::manifests::load_text(text, "pods.yaml", &mut o);
        assert!(o.problems.is_empty(), "{:?}", o.problems);
        o
    }

    #[test]
    fn the_nodes_pods_on_the_pod_network_with_their_probes() {
        let o = objects(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: shop}
spec:
  nodeName: win-1
  containers:
    - name: web
      image: web
      livenessProbe: {exec: {command: [ping, -n, "1", 8.8.8.8]}}
      readinessProbe: {httpGet: {port: 80}}
status: {podIP: 10.244.1.5, podIPs: [{ip: 10.244.1.5}, {ip: "fd00::5"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: agent}
spec: {nodeName: win-1, hostNetwork: true, containers: [{name: a}]}
status: {podIP: 192.168.77.11}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2}
spec: {nodeName: win-2, containers: [{name: web}]}
status: {podIP: 10.244.2.5}
---
apiVersion: v1
kind: Pod
metadata: {name: pending}
spec: {nodeName: win-1, containers: [{name: p}]}
"#,
        );
        let pods = of_node(&o, "win-1").expect("the folder holds pods");
        let keys: Vec<String> = pods.iter().map(Pod::key).collect();
        assert_eq!(keys, ["default/pending", "shop/web-1"]);
        assert_eq!(pods[0].ip, None);
        assert_eq!(pods[1].ip, Some("10.244.1.5".parse().expect("ip")));
        assert_eq!(
            pods[1].exec_probes,
            vec![ExecProbe {
                container: "web".into(),
                probe: "liveness".into(),
                command: ["ping", "-n", "1", "8.8.8.8"].map(String::from).to_vec(),
            }]
        );
        assert_eq!(of_node(&o, "win-3"), Some(Vec::new()));
    }

    #[test]
    fn a_source_without_pods_leaves_them_unknown() {
        let o = objects("apiVersion: v1\nkind: Node\nmetadata: {name: win-1}\n");
        assert_eq!(of_node(&o, "win-1"), None);
    }
}
