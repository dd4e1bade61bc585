//! Kubernetes pods vs HNS endpoints: a remote endpoint holding a local pod's IP
//! (kubernetes#138000), two endpoints with one IP, an endpoint with no pod, a pod with no
//! endpoint.

use std::collections::HashSet;

use crate::finding::{Finding, ObjectRef, ProblemKind};
use crate::node::{Node, delete_endpoint, endpoint_ref};

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    let mut reported = HashSet::new();
    for r in &n.remote_endpoints {
        for ip in r.ips() {
            let local = n
                .pod_endpoints
                .iter()
                .find(|(e, _)| e.ips().any(|a| a == ip));
            let pod = n.pod_with_ip(ip);
            if local.is_none() && pod.is_none() {
                continue;
            }
            reported.insert(ip);
            let mut objects = vec![endpoint_ref(r)];
            if let Some((e, _)) = local {
                objects.push(endpoint_ref(e));
            }
            if let Some(p) = pod {
                objects.push(ObjectRef::new("Pod", p.key(), ip.to_string()));
            }
            let mut f = n.finding(
                ProblemKind::RemoteEndpointIsLocalPod,
                format!("remote endpoint {} holds {ip}, the address of a pod on this node", r.id),
                objects,
                format!(
                    "load balancers that list the remote endpoint send {ip}'s share of Service traffic to another node (the address was reused); traffic to the pod through Services times out, DNS included when the pod is a DNS server"
                ),
                "delete the remote endpoint; kube-proxy makes a new one only for addresses on other nodes (kubernetes#138000 does this on every sync)".into(),
            );
            f.repair = Some(delete_endpoint(r));
            out.push(f);
        }
    }
    for (ip, eps) in &n.by_ip {
        if eps.len() < 2 || reported.contains(ip) {
            continue;
        }
        out.push(n.finding(
            ProblemKind::DuplicateEndpointIp,
            format!("{} endpoints hold {ip}", eps.len()),
            eps.iter().map(|e| endpoint_ref(e)).collect(),
            format!("the switch delivers {ip} to one of them only: the other's pod, or the Services behind it, stop answering"),
            "delete the endpoint that no pod uses (hnsdiag delete endpoints ID / winnet hns delete endpoint ID), then find why its IP was given out twice (IPAM state, a pod deleted without CNI DEL)".into(),
        ));
    }
    if !n.snap.kube.pods_known {
        return;
    }
    for (e, netns) in &n.pod_endpoints {
        if e.ips().any(|ip| n.pod_with_ip(ip).is_some()) {
            continue;
        }
        out.push(n.finding(
            ProblemKind::EndpointWithoutPod,
            format!("endpoint {} ({}) belongs to no pod of this node", e.id, e.name),
            vec![endpoint_ref(e), ObjectRef::new("Netns", netns.clone(), "")],
            "none directly; its address is held, so IPAM can hand it to a new pod only after a collision, and Services may still send to it".into(),
            "run CNI DEL for the pod it was made for (or winnet hns delete endpoint ID), which frees the address".into(),
        ));
    }
    for p in &n.snap.kube.pods {
        let Some(ip) = p.ip else { continue };
        if n.pod_endpoints
            .iter()
            .any(|(e, _)| e.ips().any(|a| a == ip))
        {
            continue;
        }
        out.push(n.finding(
            ProblemKind::PodWithoutEndpoint,
            format!("pod {} ({ip}) has no HNS endpoint on this node", p.key()),
            vec![ObjectRef::new("Pod", p.key(), ip.to_string())],
            format!("every flow to and from {ip}: the switch has no port for it"),
            "recreate the pod's sandbox (kubelet runs CNI ADD again), or run CNI CHECK to see what the plugin says".into(),
        ));
    }
}
