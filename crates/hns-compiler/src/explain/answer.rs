//! The answer of a trace: the sender, the next hop, each layer with its rule and the HNS and
//! Kubernetes objects behind it, the rewrites, the forwarding and the disposition.

use std::net::IpAddr;

use hcn::Guid;
use hns::Profile;
use hns::state::State;
use hns::trace::TraceRequest;
use serde_json::{Value, json};
use vfp::trace::{LayerDecision, TraceStep};
use vfp::{Action, Disposition, DropReason, Headers, Origin, PacketHeaders, PortId};

use super::sender::{Sender, is_node_address};
use super::stack::NextHop;
use crate::{Compiler, limitation};

/// What the answer is made from.
pub(super) struct View<'a> {
    pub(super) state: &'a State,
    pub(super) compiler: &'a Compiler,
    pub(super) profile: Profile,
}

impl View<'_> {
    pub(super) fn answer(
        &self,
        node: &str,
        req: &TraceRequest,
        sender: &Sender,
        hop: Option<&NextHop>,
        t: &vfp::Trace,
        mut notes: Vec<String>,
    ) -> Value {
        if t.cached.is_some() {
            notes.push(
                "every source port tried names a connection the flow table has: this is its fast path, not the layers"
                    .into(),
            );
        }
        notes.extend(sender.mac_note.clone());
        notes.extend(self.host_routes_on(t));
        let limitation = limitation::of_trace(t)
            .map(|l| json!({"Name": l.as_str(), "Message": l.message(self.profile)}));
        let disposition = self.disposition_text(t);
        let trace = json!({
            "Node": node,
            "Profile": self.profile.as_str(),
            "Request": req.to_json(),
            "From": {
                "Kind": sender.kind,
                "Name": sender.name,
                "Endpoint": sender.endpoint.map(|g| g.to_string()),
                "Address": sender.address.to_string(),
                "Mac": sender.mac.to_string(),
            },
            "NextHop": hop.map(|h| json!({
                "Address": h.address.to_string(),
                "Mac": h.mac.to_string(),
                "How": h.describe(),
            })),
            "Ingress": self.port_json(t.ingress),
            "Packet": t.input.as_ref().map(headers_json),
            "FlowTable": t.cached.as_ref().map(|c| json!({
                "Side": format!("{:?}", c.side),
                "Original": headers_json(&c.orig),
                "Final": headers_json(&c.fin),
            })),
            "Steps": t.steps.iter().map(|s| self.step_json(s)).collect::<Vec<_>>(),
            "Forward": t.forward.map(|f| {
                let mut v = self.port_json(f.to);
                v["Reason"] = json!(format!("{:?}", f.reason));
                v
            }),
            "Output": t.output.as_ref().map(headers_json),
            "Disposition": self.disposition_json(t, &disposition),
            "Limitation": limitation,
            "Notes": notes,
        });
        json!({
            "Trace": trace,
            "Disposition": disposition,
            "Text": t.to_string(),
        })
    }

    /// A packet delivered to a host vNIC but not addressed to the host goes on through the
    /// host's IP stack, which routes it (and sends it into the switch again): say so, and how
    /// to trace that hop.
    pub(super) fn host_routes_on(&self, t: &vfp::Trace) -> Option<String> {
        let Disposition::Deliver(p) = t.disposition else {
            return None;
        };
        let host = self.compiler.switch().port(p)?.kind() == vfp::PortKind::HostVnic;
        let out = &t.output.as_ref()?.inner;
        if !host || is_node_address(self.compiler, out.dst_ip) {
            return None;
        }
        Some(format!(
            "{} is a host vNIC and {} is not the host's: the host's IP stack routes the packet on; trace that hop with --from {}",
            self.port_name(p),
            out.dst_ip,
            out.src_ip
        ))
    }

    pub(super) fn port_name(&self, port: PortId) -> String {
        self.compiler
            .switch()
            .port(port)
            .map_or_else(|| format!("port {port}"), |p| p.name().to_string())
    }

    pub(super) fn port_json(&self, port: PortId) -> Value {
        json!({"Port": port, "Name": self.port_name(port)})
    }

    pub(super) fn step_json(&self, s: &TraceStep) -> Value {
        let mut v = json!({
            "Port": s.port,
            "PortName": s.port_name,
            "Direction": s.direction.to_string(),
            "Layer": s.layer,
            "Before": headers_json(&s.before),
            "After": headers_json(&s.after),
            "Rewrite": rewrites(&s.before, &s.after),
        });
        match &s.decision {
            LayerDecision::Rule {
                origin,
                group,
                index,
                priority,
                action,
            } => {
                v["Rule"] = json!({"Index": index, "Group": group, "Priority": priority});
                v["Action"] = json!(action.to_string());
                v["Origin"] = self.origin_json(origin);
                if let Action::LoadBalance(_) = action {
                    v["Backend"] = json!(sock(&s.after.inner));
                }
            }
            LayerDecision::Default(d) => {
                v["Rule"] = Value::Null;
                v["Action"] = json!(format!("no rule matched: default {d:?}").to_lowercase());
                v["Origin"] = Value::Null;
            }
        }
        v
    }

    /// The rule's owner, the HNS object it names (with its name), the Kubernetes object behind
    /// it and, for a limitation, which one.
    pub(super) fn origin_json(&self, o: &Origin) -> Value {
        let limitation = limitation::of_origin(o);
        // Owner ids are the object's ID, "<ID>/<n>" for one of its policies, and
        // "<Limitation>/<ID>" for a limitation enforced on an object.
        let object_id = match limitation {
            Some(_) => o.owner.id.split_once('/').map_or("", |(_, id)| id),
            None => o.owner.id.split('/').next().unwrap_or_default(),
        };
        let object = object_id
            .parse::<Guid>()
            .ok()
            .and_then(|id| self.object(id));
        let kubernetes = object.as_ref().and_then(|(kind, id, _)| {
            (*kind == "LoadBalancer")
                .then(|| self.state.load_balancer(*id))
                .flatten()
                .and_then(|lb| service_json(&lb.linux_service))
        });
        json!({
            "Kind": o.owner.kind,
            "Id": o.owner.id,
            "Source": o.source,
            "Object": object.map(|(kind, id, name)| json!({
                "Kind": kind,
                "Id": id.to_string(),
                "Name": (!name.is_empty()).then_some(name),
            })),
            "Kubernetes": kubernetes,
            "Limitation": limitation.map(|l| json!({
                "Name": l.as_str(), "Message": l.message(self.profile),
            })),
        })
    }

    /// The HNS object with this ID: its kind and name.
    pub(super) fn object(&self, id: Guid) -> Option<(&'static str, Guid, String)> {
        let s = self.state;
        if let Some(e) = s.endpoint(id) {
            return Some(("Endpoint", id, e.name.clone()));
        }
        if let Some(n) = s.network(id) {
            return Some(("Network", id, n.name.clone()));
        }
        if s.load_balancer(id).is_some() {
            return Some(("LoadBalancer", id, String::new()));
        }
        if s.route(id).is_some() {
            return Some(("Route", id, String::new()));
        }
        None
    }

    pub(super) fn disposition_text(&self, t: &vfp::Trace) -> String {
        let text = match t.disposition {
            Disposition::Deliver(p) | Disposition::Uplink(p) | Disposition::Reply(p) => {
                format!("{} ({})", t.disposition, self.port_name(p))
            }
            d => d.to_string(),
        };
        match (t.disposition, limitation::of_trace(t)) {
            (Disposition::Drop(DropReason::Unsupported), Some(l)) => {
                format!("{text}: {}", l.message(self.profile))
            }
            (Disposition::Drop(DropReason::BlockedByRule), _) => match blocking_origin(t) {
                Some(o) => format!("{text}: {o}"),
                None => text,
            },
            _ => text,
        }
    }

    pub(super) fn disposition_json(&self, t: &vfp::Trace, text: &str) -> Value {
        let (verdict, port, reason) = match t.disposition {
            Disposition::Deliver(p) => ("Deliver", Some(p), None),
            Disposition::Uplink(p) => ("Uplink", Some(p), None),
            Disposition::Reply(p) => ("Reply", Some(p), None),
            Disposition::Flood { from } => ("Flood", Some(from), None),
            Disposition::Drop(r) => ("Drop", None, Some(r)),
        };
        json!({
            "Verdict": verdict,
            "Port": port,
            "PortName": port.map(|p| self.port_name(p)),
            "Reason": reason.map(|r| r.to_string()),
            "Text": text,
        })
    }
}

/// The origin of the rule that blocked the packet.
pub(super) fn blocking_origin(t: &vfp::Trace) -> Option<String> {
    t.steps.iter().rev().find_map(|s| match &s.decision {
        LayerDecision::Rule {
            origin,
            action: Action::Block,
            ..
        } => Some(origin.to_string()),
        _ => None,
    })
}

/// kube-proxy's `LinuxService` ("namespace/name:port") as a Kubernetes object reference.
pub(super) fn service_json(s: &str) -> Option<Value> {
    if s.is_empty() {
        return None;
    }
    let (name, port) = s.split_once(':').unwrap_or((s, ""));
    let (namespace, name) = name.split_once('/').unwrap_or(("", name));
    Some(json!({
        "Kind": "Service",
        "Namespace": namespace,
        "Name": name,
        "Port": port,
        "Text": format!("Service {s}"),
    }))
}

pub(super) fn headers_json(h: &PacketHeaders) -> Value {
    let i = &h.inner;
    json!({
        "SrcMac": i.src_mac.to_string(),
        "DstMac": i.dst_mac.to_string(),
        "Src": i.src_ip.to_string(),
        "Dst": i.dst_ip.to_string(),
        "Protocol": protocol_name(i.proto),
        "SrcPort": i.src_port,
        "DstPort": i.dst_port,
        "Encap": h.outer.as_ref().map(|o| json!({
            "Vni": o.vni,
            "Src": o.src_ip.to_string(),
            "Dst": o.dst_ip.to_string(),
            "SrcMac": o.src_mac.to_string(),
            "DstMac": o.dst_mac.to_string(),
            "UdpPort": o.udp_port,
        })),
        "Text": h.to_string(),
    })
}

pub(super) fn protocol_name(p: u8) -> String {
    match p {
        vfp::wire::proto::TCP => "tcp".into(),
        vfp::wire::proto::UDP => "udp".into(),
        vfp::wire::proto::ICMP => "icmp".into(),
        vfp::wire::proto::ICMPV6 => "icmpv6".into(),
        other => other.to_string(),
    }
}

pub(super) fn sock(h: &Headers) -> String {
    std::net::SocketAddr::new(h.dst_ip, h.dst_port).to_string()
}

/// What a layer changed, field by field ("dst 10.96.0.10:80 -> 10.244.1.11:8080").
pub(super) fn rewrites(before: &PacketHeaders, after: &PacketHeaders) -> Vec<String> {
    let (b, a) = (&before.inner, &after.inner);
    let mut out = Vec::new();
    // An ICMP echo's identifier rides in both "ports"; it is told once.
    let ports = b.has_ports() && !b.is_icmp();
    let end = |ip: IpAddr, port: u16| match ports {
        true => std::net::SocketAddr::new(ip, port).to_string(),
        false => ip.to_string(),
    };
    if b.src_ip != a.src_ip || (ports && b.src_port != a.src_port) {
        let (from, to) = (end(b.src_ip, b.src_port), end(a.src_ip, a.src_port));
        out.push(format!("src {from} -> {to}"));
    }
    if b.dst_ip != a.dst_ip || (ports && b.dst_port != a.dst_port) {
        let (from, to) = (end(b.dst_ip, b.dst_port), end(a.dst_ip, a.dst_port));
        out.push(format!("dst {from} -> {to}"));
    }
    if b.is_icmp() && b.src_port != a.src_port {
        out.push(format!("echo id {} -> {}", b.src_port, a.src_port));
    }
    if b.src_mac != a.src_mac {
        out.push(format!("src mac {} -> {}", b.src_mac, a.src_mac));
    }
    if b.dst_mac != a.dst_mac {
        out.push(format!("dst mac {} -> {}", b.dst_mac, a.dst_mac));
    }
    match (&before.outer, &after.outer) {
        (None, Some(o)) => out.push(format!("encap {o}")),
        (Some(_), None) => out.push("decap".into()),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_name_each_changed_field_and_an_echo_id_once() {
        let h = |src: &str, sport, dst: &str, dport, proto| PacketHeaders {
            inner: Headers {
                src_ip: src.parse().unwrap(),
                dst_ip: dst.parse().unwrap(),
                src_port: sport,
                dst_port: dport,
                proto,
                ..Headers::empty()
            },
            outer: None,
        };
        let tcp = vfp::wire::proto::TCP;
        assert_eq!(
            rewrites(
                &h("10.0.0.1", 40000, "10.96.0.10", 80, tcp),
                &h("10.0.0.1", 40000, "10.244.1.11", 8080, tcp)
            ),
            vec!["dst 10.96.0.10:80 -> 10.244.1.11:8080"]
        );
        let icmp = vfp::wire::proto::ICMP;
        assert_eq!(
            rewrites(
                &h("10.0.0.1", 7, "10.200.0.1", 7, icmp),
                &h("192.168.1.11", 49152, "10.200.0.1", 49152, icmp)
            ),
            vec!["src 10.0.0.1 -> 192.168.1.11", "echo id 7 -> 49152"]
        );
    }

    #[test]
    fn a_service_reference_reads_kube_proxys_linux_service() {
        let v = service_json("default/web:http").unwrap();
        assert_eq!(
            (
                v["Namespace"].as_str(),
                v["Name"].as_str(),
                v["Port"].as_str()
            ),
            (Some("default"), Some("web"), Some("http"))
        );
        assert_eq!(service_json(""), None);
    }
}
