//! The answer of `POST /trace`: what the switch of a node did with the first packet of a
//! connection, layer by layer, each rule named by the HNS object (and the Kubernetes object)
//! that made it. hnsd builds it; `winnet trace` prints it. The JSON is HNS-style PascalCase.
//!
//! MACs are text as the switch writes them (`00:15:5d:10:00:02`), not [`hcn::MacAddress`]
//! (HNS's `00-15-5D-10-00-02`): they are the switch's, not an HNS object's.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use hcn::Guid;
use serde::{Deserialize, Serialize};

use super::TraceRequest;

/// hnsd's answer to a trace: the structured trace, and the disposition and the switch's own
/// account in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TraceAnswer {
    /// The trace, step by step.
    pub trace: PacketTrace,
    /// What became of the packet, in words (as [`TraceDisposition::text`]).
    pub disposition: String,
    /// The switch's own text of the trace (vfp's `Trace` as it prints).
    pub text: String,
}

/// What the switch of a node did with one packet: who sent it and how it entered, each layer
/// it crossed, where it was forwarded and what became of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PacketTrace {
    /// The node's name.
    pub node: String,
    /// The Windows build hnsd reproduces (`ws2022`, `unrestricted`, ...).
    pub profile: String,
    /// The request, as read.
    pub request: TraceRequest,
    /// Who sent the packet.
    pub from: TraceSender,
    /// The sender's next hop, for a sender with an IP stack (an endpoint, the node).
    pub next_hop: Option<NextHop>,
    /// The port the packet entered by.
    pub ingress: PortRef,
    /// The packet as it entered, if it was IP.
    pub packet: Option<TracedHeaders>,
    /// Set when a connection in the flow table decided the packet (its fast path).
    pub flow_table: Option<FlowTableHit>,
    /// The layers crossed on the slow path.
    pub steps: Vec<LayerStep>,
    /// The forwarding decision between the ingress and the egress port, if one was made.
    pub forward: Option<Forwarding>,
    /// The packet as it leaves, if it leaves.
    pub output: Option<TracedHeaders>,
    /// What became of the packet.
    pub disposition: TraceDisposition,
    /// The Windows limitation the packet met, if any, under this profile.
    pub limitation: Option<LimitationRef>,
    /// What else the reader should know (unknown MACs, a cached connection, a hop through the
    /// host's IP stack).
    pub notes: Vec<String>,
}

/// Who sent the traced packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TraceSender {
    /// A local endpoint, the node, or a host beyond the uplink.
    pub kind: SenderKind,
    /// How the answer names it ("endpoint pa_cbr0 (ID)", "the node (IP)", "IP, beyond the
    /// uplink").
    pub name: String,
    /// The endpoint, when one sends (a pod, or a host vNIC such as flannel's `cbr0_ep`).
    pub endpoint: Option<Guid>,
    /// The source address of the packet.
    pub address: IpAddr,
    /// The source MAC of the packet as it enters the switch.
    pub mac: String,
}

/// What kind of sender a trace starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SenderKind {
    /// A pod endpoint on this node: its packet enters by the endpoint's port.
    Endpoint,
    /// The node itself: its packet enters by the host vNIC its routes pick.
    Node,
    /// A host beyond the uplink: its packet arrives on the uplink.
    External,
}

impl fmt::Display for SenderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SenderKind::Endpoint => "Endpoint",
            SenderKind::Node => "Node",
            SenderKind::External => "External",
        })
    }
}

/// The sender's next hop and the MAC it addresses the frame to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NextHop {
    /// The next hop's address (the destination itself when it is on-link).
    pub address: IpAddr,
    /// The MAC the frame is addressed to.
    pub mac: String,
    /// How that MAC was found, in words ("the switch answers ARP for it", ...).
    pub how: String,
}

/// A port of the switch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PortRef {
    /// The switch's number for it.
    pub port: u16,
    /// Its name (the endpoint's, or `vEthernet (...)`).
    pub name: String,
}

/// A packet's headers at one point of the trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TracedHeaders {
    /// Source MAC.
    pub src_mac: String,
    /// Destination MAC.
    pub dst_mac: String,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// `tcp`, `udp`, `icmp`, `icmpv6`, or the IP protocol number.
    pub protocol: String,
    /// Source port (an ICMP echo's identifier).
    pub src_port: u16,
    /// Destination port (an ICMP echo's identifier).
    pub dst_port: u16,
    /// The VXLAN encapsulation around the packet, if any.
    pub encap: Option<TracedEncap>,
    /// The headers as the switch prints them.
    pub text: String,
}

/// The outer headers of a VXLAN-encapsulated packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TracedEncap {
    /// The VXLAN network identifier (HNS's VSID).
    pub vni: u32,
    /// This host's provider address.
    pub src: IpAddr,
    /// The remote host's provider address.
    pub dst: IpAddr,
    /// The underlay source MAC.
    pub src_mac: String,
    /// The underlay destination MAC.
    pub dst_mac: String,
    /// The UDP destination port (4789 unless the network's `VxlanPort` says otherwise).
    pub udp_port: u16,
}

/// A connection in the flow table that decided the packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct FlowTableHit {
    /// Which side of the connection the packet is on (`Forward` or `Reverse`).
    pub side: String,
    /// The connection's first packet as it entered.
    pub original: TracedHeaders,
    /// The connection's first packet as it left.
    #[serde(rename = "Final")]
    pub fin: TracedHeaders,
}

/// One layer of one port crossed by the packet, and what it decided.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LayerStep {
    /// The port.
    pub port: u16,
    /// The port's name.
    pub port_name: String,
    /// The direction the packet crossed the port.
    pub direction: StepDirection,
    /// The layer (`acl`, `slb`, `nat`, `route`, `mac`, ...).
    pub layer: String,
    /// The headers entering the layer.
    pub before: TracedHeaders,
    /// The headers leaving it.
    pub after: TracedHeaders,
    /// What the layer changed, field by field ("dst 10.96.0.10:80 -> 10.244.1.11:8080").
    pub rewrite: Vec<String>,
    /// The rule that matched; `None` when the layer's default applied.
    pub rule: Option<RuleRef>,
    /// What was done, in words ("allow", "no rule matched: default allow", ...).
    pub action: String,
    /// Who made the rule; `None` when the layer's default applied.
    pub origin: Option<RuleOrigin>,
    /// The backend a load-balancing rule chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<SocketAddr>,
}

/// The direction a packet crosses a port, as the switch sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepDirection {
    /// Into the switch from the port's device (the device sends).
    Out,
    /// From the switch to the port's device (the device receives).
    In,
}

impl fmt::Display for StepDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StepDirection::Out => "out",
            StepDirection::In => "in",
        })
    }
}

/// A rule of a layer: where it sits among its owner's rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RuleRef {
    /// Its index among its owner's rules.
    pub index: u32,
    /// The group it is in.
    pub group: String,
    /// Its priority.
    pub priority: u16,
}

/// Who made a rule: its owner as the switch knows it, the HNS object that is, the Kubernetes
/// object behind that, and the limitation the rule enforces, if it is one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RuleOrigin {
    /// The owner's kind ("LoadBalancer", "Endpoint/ACL", "Network/RemoteSubnetRoute", ...).
    pub kind: String,
    /// The owner's ID: the object's ID, `<ID>/<n>` for one of its policies,
    /// `<Limitation>/<ID>` for a limitation enforced on it.
    pub id: String,
    /// The higher-level name the compiler gave the rule ("Service default/web:http", ...).
    pub source: Option<String>,
    /// The HNS object the owner ID names, if it still exists.
    pub object: Option<ObjectRef>,
    /// The Kubernetes object behind a load balancer (kube-proxy's `LinuxService`).
    pub kubernetes: Option<KubernetesRef>,
    /// The limitation the rule enforces.
    pub limitation: Option<LimitationRef>,
    /// The rule's own name, where its policy has one: an ACL's `Id` (Azure NPM's
    /// `azure-acl-<namespace>-<policy>`, Calico's `policy-...`), VFP's friendly name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// An HNS object named by a rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ObjectRef {
    /// What kind of object.
    pub kind: ObjectKind,
    /// Its ID.
    pub id: Guid,
    /// Its name; `None` for objects without one (load balancers, routes) or with an empty one.
    pub name: Option<String>,
}

/// The kinds of HNS object a rule can be made by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ObjectKind {
    /// A HostComputeEndpoint.
    Endpoint,
    /// A HostComputeNetwork.
    Network,
    /// A HostComputeLoadBalancer.
    LoadBalancer,
    /// An SDN route.
    Route,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Endpoint => "Endpoint",
            ObjectKind::Network => "Network",
            ObjectKind::LoadBalancer => "LoadBalancer",
            ObjectKind::Route => "Route",
        })
    }
}

/// A Kubernetes object a rule was made for: a Service port, as kube-proxy names it in a load
/// balancer's `LinuxService` (`namespace/name:port`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KubernetesRef {
    /// The object's kind (`Service`).
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The port's name (empty for an unnamed port).
    pub port: String,
    /// The reference in words ("Service default/web:http").
    pub text: String,
}

/// A limitation of the Windows build hnsd reproduces, and what it means under its profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LimitationRef {
    /// Its name (`IcmpThroughOutboundNat`, ...).
    pub name: String,
    /// What it does to the packet, in words.
    pub message: String,
}

/// The forwarding decision: the egress port and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Forwarding {
    /// The egress port's number.
    pub port: u16,
    /// Its name.
    pub name: String,
    /// Why (`DestinationMac`, `Routed`, `Decapsulation`, `Encapsulated`, `Default`).
    pub reason: String,
}

/// What became of the packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TraceDisposition {
    /// Delivered, sent to the uplink, answered, flooded or dropped.
    pub verdict: Verdict,
    /// The port it left by (or was flooded from); `None` for a drop.
    pub port: Option<u16>,
    /// That port's name.
    pub port_name: Option<String>,
    /// Why it was dropped, in words; `None` unless dropped.
    pub reason: Option<String>,
    /// The disposition in words, with the rule or limitation behind a drop.
    pub text: String,
}

/// The switch's final verdict on a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Verdict {
    /// Delivered to a local port.
    Deliver,
    /// Sent to the uplink.
    Uplink,
    /// Answered by the switch itself (ARP, neighbour discovery).
    Reply,
    /// Flooded to every port of its segment.
    Flood,
    /// Dropped.
    Drop,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Deliver => "Deliver",
            Verdict::Uplink => "Uplink",
            Verdict::Reply => "Reply",
            Verdict::Flood => "Flood",
            Verdict::Drop => "Drop",
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn headers(src: &str, dst: &str, encap: Value) -> Value {
        json!({"SrcMac": "0e:2a:0a:f4:01:0a", "DstMac": "00:15:5d:d0:56:e6", "Src": src,
            "Dst": dst, "Protocol": "tcp", "SrcPort": 40000, "DstPort": 80, "Encap": encap,
            "Text": format!("{src} > {dst}")})
    }

    /// An answer as hnsd writes it: a pod to a ClusterIP whose backend is on another node.
    fn answer() -> Value {
        let lb = "47B2A8E2-7EDC-45E1-AA9A-ABB5D7156857";
        let encap = json!({"Vni": 4096, "Src": "192.168.1.11", "Dst": "192.168.1.12",
            "SrcMac": "00:15:5d:01:00:11", "DstMac": "00:15:5d:01:00:12", "UdpPort": 4789});
        let text = "sent to the uplink (port 1) (Ethernet)";
        json!({
            "Trace": {
                "Node": "win1", "Profile": "ws2022",
                "Request": {"From": "a", "To": "10.96.0.20:80", "Protocol": "tcp"},
                "From": {"Kind": "Endpoint", "Name": "endpoint a_cbr0 (B28AA370-0250-4DD0-8551-B4C8C822F0A3)",
                    "Endpoint": "B28AA370-0250-4DD0-8551-B4C8C822F0A3", "Address": "10.244.1.10",
                    "Mac": "0e:2a:0a:f4:01:0a"},
                "NextHop": {"Address": "10.244.1.1", "Mac": "00:15:5d:d0:56:e6",
                    "How": "the switch answers ARP for it"},
                "Ingress": {"Port": 2, "Name": "a_cbr0"},
                "Packet": headers("10.244.1.10", "10.96.0.20", Value::Null),
                "FlowTable": null,
                "Steps": [
                    {"Port": 2, "PortName": "a_cbr0", "Direction": "out", "Layer": "slb",
                        "Before": headers("10.244.1.10", "10.96.0.20", Value::Null),
                        "After": headers("10.244.1.2", "10.244.2.10", Value::Null),
                        "Rewrite": ["dst 10.96.0.20:80 -> 10.244.2.10:8080"],
                        "Rule": {"Index": 0, "Group": "default", "Priority": 10},
                        "Action": "load balance over 1 backends (None), snat from pool 1",
                        "Origin": {"Kind": "LoadBalancer", "Id": lb, "Source": "Service default/api",
                            "Object": {"Kind": "LoadBalancer", "Id": lb, "Name": null},
                            "Kubernetes": {"Kind": "Service", "Namespace": "default", "Name": "api",
                                "Port": "", "Text": "Service default/api"},
                            "Limitation": null},
                        "Backend": "10.244.2.10:8080"},
                    {"Port": 2, "PortName": "a_cbr0", "Direction": "out", "Layer": "nat",
                        "Before": headers("10.244.1.2", "10.244.2.10", Value::Null),
                        "After": headers("10.244.1.2", "10.244.2.10", Value::Null),
                        "Rewrite": [], "Rule": null, "Action": "no rule matched: default allow",
                        "Origin": null}
                ],
                "Forward": {"Port": 1, "Name": "Ethernet", "Reason": "Encapsulated"},
                "Output": headers("10.244.1.2", "10.244.2.10", encap),
                "Disposition": {"Verdict": "Uplink", "Port": 1, "PortName": "Ethernet",
                    "Reason": null, "Text": text},
                "Limitation": null,
                "Notes": []
            },
            "Disposition": text,
            "Text": "port 2 a_cbr0 ..."
        })
    }

    #[test]
    fn an_answer_reads_back_as_hnsd_wrote_it() {
        let wire = answer();
        let typed: TraceAnswer = serde_json::from_value(wire.clone()).unwrap();
        let step = &typed.trace.steps[0];
        assert_eq!(typed.trace.from.kind, SenderKind::Endpoint);
        assert_eq!(step.direction, StepDirection::Out);
        assert_eq!(step.backend, Some("10.244.2.10:8080".parse().unwrap()));
        let object = step
            .origin
            .as_ref()
            .and_then(|o| o.object.as_ref())
            .unwrap();
        assert_eq!(object.kind, ObjectKind::LoadBalancer);
        assert_eq!(typed.trace.steps[1].backend, None);
        assert_eq!(typed.trace.disposition.verdict, Verdict::Uplink);
        assert_eq!(typed.trace.request.destination(), "10.96.0.20:80");
        // Same keys in the same order, and no `Backend` where no backend was chosen.
        assert_eq!(
            serde_json::to_string(&typed).unwrap(),
            serde_json::to_string(&wire).unwrap()
        );
    }
}
