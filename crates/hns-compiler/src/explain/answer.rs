//! The answer of a trace: the sender, the next hop, each layer with its rule and the HNS and
//! Kubernetes objects behind it, the rewrites, the forwarding and the disposition, as a
//! [`TraceAnswer`].

use std::net::{IpAddr, SocketAddr};

use hcn::Guid;
use hns::Profile;
use hns::state::State;
use hns::trace::TraceRequest;
use hns_client::trace::answer::{
    FlowTableHit, Forwarding, KubernetesRef, LayerStep, LimitationRef, ObjectKind, ObjectRef,
    PacketTrace, PortRef, RuleOrigin, RuleRef, StepDirection, TraceAnswer, TraceDisposition,
    TraceSender, TracedEncap, TracedHeaders, Verdict,
};
use vfp::trace::{LayerDecision, TraceStep};
use vfp::{Action, Direction, Disposition, DropReason, Headers, Origin, PacketHeaders, PortId};

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
    ) -> TraceAnswer {
        if t.cached.is_some() {
            notes.push(
                "every source port tried names a connection the flow table has: this is its fast path, not the layers"
                    .into(),
            );
        }
        notes.extend(sender.mac_note.clone());
        notes.extend(self.host_routes_on(t));
        let disposition = self.disposition_text(t);
        let trace = PacketTrace {
            node: node.to_string(),
            profile: self.profile.as_str().to_string(),
            request: req.clone(),
            from: TraceSender {
                kind: sender.kind,
                name: sender.name.clone(),
                endpoint: sender.endpoint,
                address: sender.address,
                mac: sender.mac.to_string(),
            },
            next_hop: hop.map(|h| hns_client::trace::answer::NextHop {
                address: h.address,
                mac: h.mac.to_string(),
                how: h.describe(),
            }),
            ingress: self.port_ref(t.ingress),
            packet: t.input.as_ref().map(headers),
            flow_table: t.cached.as_ref().map(|c| FlowTableHit {
                side: format!("{:?}", c.side),
                original: headers(&c.orig),
                fin: headers(&c.fin),
            }),
            steps: t.steps.iter().map(|s| self.step(s)).collect(),
            forward: t.forward.map(|f| Forwarding {
                port: f.to,
                name: self.port_name(f.to),
                reason: format!("{:?}", f.reason),
            }),
            output: t.output.as_ref().map(headers),
            disposition: self.disposition(t, &disposition),
            limitation: limitation::of_trace(t).map(|l| self.limitation_ref(l)),
            notes,
        };
        TraceAnswer {
            trace,
            disposition,
            text: t.to_string(),
        }
    }

    /// A packet delivered to a host vNIC but not addressed to the host goes on through the
    /// host's IP stack, which routes it (and sends it into the switch again): say so, and how
    /// to trace that hop.
    fn host_routes_on(&self, t: &vfp::Trace) -> Option<String> {
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

    fn port_name(&self, port: PortId) -> String {
        self.compiler
            .switch()
            .port(port)
            .map_or_else(|| format!("port {port}"), |p| p.name().to_string())
    }

    fn port_ref(&self, port: PortId) -> PortRef {
        PortRef {
            port,
            name: self.port_name(port),
        }
    }

    fn limitation_ref(&self, l: hns::Limitation) -> LimitationRef {
        LimitationRef {
            name: l.as_str().to_string(),
            message: l.message(self.profile),
        }
    }

    fn step(&self, s: &TraceStep) -> LayerStep {
        let (rule, action, origin, backend) = match &s.decision {
            LayerDecision::Rule {
                origin,
                group,
                index,
                priority,
                action,
            } => (
                Some(RuleRef {
                    index: *index,
                    group: group.clone(),
                    priority: *priority,
                }),
                action.to_string(),
                Some(self.origin(origin)),
                matches!(action, Action::LoadBalance(_)).then(|| sock(&s.after.inner)),
            ),
            LayerDecision::Default(d) => (None, self.default_said(s, *d), None, None),
        };
        LayerStep {
            port: s.port,
            port_name: s.port_name.clone(),
            direction: match s.direction {
                Direction::Out => StepDirection::Out,
                Direction::In => StepDirection::In,
            },
            layer: s.layer.clone(),
            before: headers(&s.before),
            after: headers(&s.after),
            rewrite: rewrites(&s.before, &s.after),
            rule,
            action,
            origin,
            backend,
        }
    }

    /// What a layer's default did, and for the ACL layer why: the port has no ACL, or none
    /// matched and the build allows the rest, or the endpoint is default-deny.
    fn default_said(&self, s: &TraceStep, d: vfp::layer::DefaultAction) -> String {
        if s.layer != vfp::layer::ACL {
            return format!("no rule matched: default {d:?}").to_lowercase();
        }
        let rules = self
            .compiler
            .switch()
            .port(s.port)
            .and_then(|p| p.layer(vfp::layer::ACL))
            .map_or(0, vfp::Layer::rule_count);
        match d {
            vfp::layer::DefaultAction::Block => format!(
                "no ACL matched: endpoint {} is default-deny ({}: {})",
                s.port_name,
                hns::Limitation::AclDefaultDeny,
                hns::Limitation::AclDefaultDeny.message(self.profile)
            ),
            vfp::layer::DefaultAction::Allow if rules == 0 => {
                format!("no ACL on endpoint {}: default allow", s.port_name)
            }
            vfp::layer::DefaultAction::Allow => format!(
                "no ACL matched: default allow (on {} what no ACL of endpoint {} names passes)",
                self.profile, s.port_name
            ),
        }
    }

    /// The rule's owner, the HNS object it names (with its name), the Kubernetes object behind
    /// it and, for a limitation, which one.
    fn origin(&self, o: &Origin) -> RuleOrigin {
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
        let kubernetes = object.as_ref().and_then(|obj| {
            (obj.kind == ObjectKind::LoadBalancer)
                .then(|| self.state.load_balancer(obj.id))
                .flatten()
                .and_then(|lb| service_ref(&lb.linux_service))
        });
        RuleOrigin {
            kind: o.owner.kind.clone(),
            id: o.owner.id.clone(),
            source: o.source.clone(),
            object,
            kubernetes,
            limitation: limitation.map(|l| self.limitation_ref(l)),
            name: o.name.clone(),
        }
    }

    /// The HNS object with this ID: its kind and name.
    fn object(&self, id: Guid) -> Option<ObjectRef> {
        let s = self.state;
        let (kind, name) = if let Some(e) = s.endpoint(id) {
            (ObjectKind::Endpoint, e.name.as_str())
        } else if let Some(n) = s.network(id) {
            (ObjectKind::Network, n.name.as_str())
        } else if s.load_balancer(id).is_some() {
            (ObjectKind::LoadBalancer, "")
        } else if s.route(id).is_some() {
            (ObjectKind::Route, "")
        } else {
            return None;
        };
        Some(ObjectRef {
            kind,
            id,
            name: (!name.is_empty()).then(|| name.to_string()),
        })
    }

    fn disposition_text(&self, t: &vfp::Trace) -> String {
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

    fn disposition(&self, t: &vfp::Trace, text: &str) -> TraceDisposition {
        let (verdict, port, reason) = match t.disposition {
            Disposition::Deliver(p) => (Verdict::Deliver, Some(p), None),
            Disposition::Uplink(p) => (Verdict::Uplink, Some(p), None),
            Disposition::Reply(p) => (Verdict::Reply, Some(p), None),
            Disposition::Flood { from } => (Verdict::Flood, Some(from), None),
            Disposition::Drop(r) => (Verdict::Drop, None, Some(r)),
        };
        TraceDisposition {
            verdict,
            port,
            port_name: port.map(|p| self.port_name(p)),
            reason: reason.map(|r| r.to_string()),
            text: text.to_string(),
        }
    }
}

/// The origin of the rule that blocked the packet.
fn blocking_origin(t: &vfp::Trace) -> Option<String> {
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
fn service_ref(s: &str) -> Option<KubernetesRef> {
    if s.is_empty() {
        return None;
    }
    let (name, port) = s.split_once(':').unwrap_or((s, ""));
    let (namespace, name) = name.split_once('/').unwrap_or(("", name));
    Some(KubernetesRef {
        kind: "Service".into(),
        namespace: namespace.into(),
        name: name.into(),
        port: port.into(),
        text: format!("Service {s}"),
    })
}

fn headers(h: &PacketHeaders) -> TracedHeaders {
    let i = &h.inner;
    TracedHeaders {
        src_mac: i.src_mac.to_string(),
        dst_mac: i.dst_mac.to_string(),
        src: i.src_ip,
        dst: i.dst_ip,
        protocol: protocol_name(i.proto),
        src_port: i.src_port,
        dst_port: i.dst_port,
        encap: h.outer.as_ref().map(|o| TracedEncap {
            vni: o.vni,
            src: o.src_ip,
            dst: o.dst_ip,
            src_mac: o.src_mac.to_string(),
            dst_mac: o.dst_mac.to_string(),
            udp_port: o.udp_port,
        }),
        text: h.to_string(),
    }
}

fn protocol_name(p: u8) -> String {
    match p {
        vfp::wire::proto::TCP => "tcp".into(),
        vfp::wire::proto::UDP => "udp".into(),
        vfp::wire::proto::ICMP => "icmp".into(),
        vfp::wire::proto::ICMPV6 => "icmpv6".into(),
        other => other.to_string(),
    }
}

fn sock(h: &Headers) -> SocketAddr {
    SocketAddr::new(h.dst_ip, h.dst_port)
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
        let v = serde_json::to_value(service_ref("default/web:http")).unwrap();
        assert_eq!(
            (
                v["Namespace"].as_str(),
                v["Name"].as_str(),
                v["Port"].as_str()
            ),
            (Some("default"), Some("web"), Some("http"))
        );
        assert_eq!(service_ref(""), None);
    }
}
