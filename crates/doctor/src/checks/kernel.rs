//! HNS endpoints vs the kernel: an endpoint without its TAP, a TAP without its endpoint, a
//! namespace left behind, a pod's resolv.conf that differs from its endpoint's DNS.

use crate::finding::{Finding, ObjectRef, ProblemKind, Repair};
use crate::node::{NETNS_PREFIX, Node, endpoint_ref};
use crate::snapshot::NetnsView;

/// The interface name of a pod endpoint's TAP.
fn tap_name(e: &hcn::Endpoint) -> &str {
    if e.linux_interface_name.is_empty() {
        "eth0"
    } else {
        &e.linux_interface_name
    }
}

/// `aa:bb:cc:dd:ee:ff` of an endpoint's MAC, as the kernel prints it.
fn mac_text(e: &hcn::Endpoint) -> Option<String> {
    e.mac_address
        .map(|m| m.to_string().replace('-', ":").to_ascii_lowercase())
}

fn netns_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

pub fn check(n: &Node, out: &mut Vec<Finding>) {
    let Some(k) = &n.snap.kernel else { return };
    let view = |path: &str| k.pods.iter().find(|v| v.path == path);
    for (e, path) in &n.pod_endpoints {
        let Some(v) = view(path) else { continue };
        let name = tap_name(e);
        let mac = mac_text(e);
        let found = v.links.iter().find(|l| l.name == name);
        let ok = found.is_some_and(|l| mac.is_none() || l.mac == mac);
        if !ok {
            let what = match found {
                None if !v.exists => format!("its namespace {path} is gone"),
                None => format!("{path} has no interface {name}"),
                Some(l) => format!(
                    "{path}'s {name} has MAC {}, the endpoint {}",
                    l.mac.clone().unwrap_or_default(),
                    mac.clone().unwrap_or_default()
                ),
            };
            out.push(n.finding(
                ProblemKind::EndpointWithoutTap,
                format!("endpoint {} has no TAP: {what}", e.id),
                vec![endpoint_ref(e), ObjectRef::new("Netns", path.clone(), name.to_string())],
                "every flow of the pod: the switch port has no device, so frames to it are dropped and the pod sends nothing".into(),
                "restart hnsd (it recreates the TAP of every endpoint), or recreate the pod's sandbox".into(),
            ));
        }
        check_dns(n, e, v, out);
    }
    for v in &k.pods {
        let owners: Vec<&hcn::Endpoint> = n
            .pod_endpoints
            .iter()
            .filter(|(_, p)| *p == v.path)
            .map(|(e, _)| *e)
            .collect();
        for l in &v.links {
            if l.kind.as_deref() != Some("tun") {
                continue;
            }
            let owned = owners.iter().any(|e| tap_name(e) == l.name);
            if owned {
                continue;
            }
            out.push(n.finding(
                ProblemKind::TapWithoutEndpoint,
                format!("TAP {} in {} belongs to no endpoint", l.name, v.path),
                vec![ObjectRef::new("Tap", format!("{}:{}", v.path, l.name), l.mac.clone().unwrap_or_default())],
                "the pod behind it sends into a device no switch port reads: every flow of that interface".into(),
                "delete the pod's sandbox (CNI DEL) or the device; hnsd makes a TAP only for an endpoint".into(),
            ));
        }
    }
    let owned: std::collections::HashSet<String> = n
        .snap
        .hns
        .namespaces
        .iter()
        .map(|ns| format!("{NETNS_PREFIX}{}", ns.id).to_ascii_lowercase())
        .chain(k.owned_elsewhere.iter().map(|s| s.to_ascii_lowercase()))
        .collect();
    for name in &k.named_netns {
        let Some(id) = name.strip_prefix(NETNS_PREFIX) else {
            continue;
        };
        if id.len() != 36 || owned.contains(&name.to_ascii_lowercase()) {
            continue;
        }
        let mut f = n.finding(
            ProblemKind::LeakedNamespace,
            format!("network namespace {name} belongs to no HostComputeNamespace"),
            vec![ObjectRef::new("Netns", name.clone(), "")],
            "none directly; each one holds its devices and a few kilobytes of kernel state, and a runtime that reuses the ID finds it taken".into(),
            format!("delete it (ip netns delete {name}) once no process runs in it"),
        );
        f.repair = Some(Repair::DeleteNetns { name: name.clone() });
        out.push(f);
    }
}

/// The `nameserver` and `search` lines of a resolv.conf, in order.
fn dns_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("nameserver") || l.starts_with("search"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn check_dns(n: &Node, e: &hcn::Endpoint, v: &NetnsView, out: &mut Vec<Finding>) {
    let Some(expected) = &v.expected_resolv_conf else {
        return;
    };
    let actual = v.resolv_conf.as_deref().unwrap_or("");
    let (want, have) = (dns_lines(expected), dns_lines(actual));
    if want == have {
        return;
    }
    out.push(n.finding(
        ProblemKind::PodDnsDiffers,
        format!(
            "the pod of endpoint {} resolves with [{}], its endpoint says [{}]",
            e.id,
            have.join("; "),
            want.join("; ")
        ),
        vec![endpoint_ref(e), ObjectRef::new("Netns", v.path.clone(), "resolv.conf")],
        "name lookups of the pod: Service names go to the wrong server or with the wrong search list, so they fail or resolve elsewhere".into(),
        format!(
            "rewrite /etc/netns/{}/resolv.conf from the endpoint (restart hnsd, which writes it), or fix the endpoint's Dns (the CNI config's dns block)",
            netns_name(&v.path)
        ),
    ));
}
