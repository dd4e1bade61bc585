//! `POST /trace` on the running data plane: the first packet of a connection, built as it
//! would reach the switch, run through `Switch::trace` (the data path with its side effects
//! off) under the data plane's lock, and told back in JSON that names the HNS object, and the
//! Kubernetes object, behind each rule.
//!
//! Where the packet enters: from a local endpoint, its port, with the MAC its pod would use
//! (its next hop's: the pod's routes say which, and the switch's answer to the pod's ARP, or
//! the port that has the address, says the MAC); from an address of the node, the host vNIC
//! the host's routes pick; from any other address, the uplink, addressed to the host's MAC.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Weak;
use std::time::Instant;

use hcn::error::{HResult, HnsError};
use hcn::{Endpoint, Guid};
use ipnet::IpNet;
use serde_json::{Value, json};
use vfp::packet::{self, L4, Packet, Parsed};
use vfp::trace::{LayerDecision, TraceStep};
use vfp::wire::{Icmpv6Repr, MacAddr, TcpFlags};
use vfp::{Action, Disposition, DropReason, Headers, Origin, PacketHeaders, PortId, Timestamp};

use crate::Shared;
use hns::compiler::{Compiler, limitation};
use hns::state::State;
use hns::trace::{NO_DATAPLANE, TraceProtocol, TraceRequest, TraceSource, Tracer};

/// First source port (or echo identifier) tried for the traced connection.
const FIRST_SOURCE_PORT: u16 = 40_000;
/// Source ports tried until one names no connection the flow table already has (a trace of a
/// cached connection would show the fast path, not the layers).
const SOURCE_PORT_TRIES: u16 = 64;
/// The MAC a frame is addressed to when the next hop's is unknown: a unicast the switch knows
/// no port by, so it goes where unknown destinations go, as the next hop's frames would.
const UNKNOWN_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0]);

/// The tracer the data plane registers with the service. The switch's clock is the pump's:
/// nanoseconds since the data plane started (this is called just before the pump starts).
pub(crate) fn tracer(shared: Weak<Shared>) -> Tracer {
    let epoch = Instant::now();
    Box::new(move |req| {
        let stopping = || HnsError::new(NO_DATAPLANE, "the data plane is stopping");
        let shared = shared
            .upgrade()
            .filter(|s| !s.stopping())
            .ok_or_else(stopping)?;
        let mut answer = Err(stopping());
        shared.with_state(|state, inner, _| {
            let now = Timestamp(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX));
            let node = inner.node_name.clone();
            answer = match inner.compiler.as_mut() {
                Some(c) => trace(state, c, &node, req, now),
                None => Err(HnsError::new(
                    NO_DATAPLANE,
                    "the data plane has not compiled the objects yet; try again in a moment",
                )),
            };
        });
        answer
    })
}

/// Traces `req` on the switch of `compiler` (compiled from `state`) at `now`, without changing
/// the flow table, counters or SNAT pools.
pub fn trace(
    state: &State,
    compiler: &mut Compiler,
    node: &str,
    req: &TraceRequest,
    now: Timestamp,
) -> Result<Value, HnsError> {
    let source = TraceSource::resolve(state, &req.from)?;
    let sender = Sender::find(state, compiler, source, req.to)?;
    let mut notes = Vec::new();
    let (dst_mac, next_hop) = match &sender.stack {
        Some(stack) => {
            let (iface, via) = stack.route(req.to).ok_or_else(|| {
                invalid(format!(
                    "From: {} has no route to {}; its routes: {}",
                    sender.name,
                    req.to,
                    stack.describe()
                ))
            })?;
            let hop = resolve_mac(compiler, iface, sender.address, via, now);
            if hop.how == How::Unknown {
                notes.push(format!(
                    "the MAC of next hop {via} is not known (no ARP entry yet): the frame is addressed to {UNKNOWN_MAC}, which the switch forwards as it would the next hop's"
                ));
            }
            (hop.mac, Some((iface.port, hop)))
        }
        None => (compiler.facts().host_mac, None),
    };
    let port = next_hop.as_ref().map_or(sender.port, |(p, _)| *p);
    let src_mac = match &sender.stack {
        Some(stack) => stack
            .ifaces
            .iter()
            .find(|i| i.port == port)
            .map_or(sender.mac, |i| i.mac),
        None => sender.mac,
    };
    let mut traced = None;
    for i in 0..SOURCE_PORT_TRIES {
        let frame = first_packet(req, sender.address, FIRST_SOURCE_PORT + i)
            .frame(src_mac, dst_mac)
            .map_err(|e| invalid(format!("To: cannot build a packet to {}: {e}", req.to)))?;
        let t = compiler.switch_mut().trace(port, &frame, now);
        let fresh = t.cached.is_none();
        traced = Some(t);
        if fresh {
            break;
        }
    }
    let Some(t) = traced else {
        return Err(HnsError::new(HResult::E_FAIL, "no packet was traced"));
    };
    let view = View {
        state,
        compiler,
        profile: state.profile(),
    };
    Ok(view.answer(
        node,
        req,
        &sender,
        next_hop.as_ref().map(|(_, h)| h),
        &t,
        notes,
    ))
}

/// The first packet of the connection: a TCP SYN, a UDP datagram or an echo request.
fn first_packet(req: &TraceRequest, src: IpAddr, sport: u16) -> Packet {
    let dport = req.port.unwrap_or(0);
    let l4 = match req.protocol {
        TraceProtocol::Tcp => L4::Tcp {
            src_port: sport,
            dst_port: dport,
            flags: TcpFlags::SYN,
            seq: 1,
            ack: 0,
            payload: Vec::new(),
        },
        TraceProtocol::Udp => L4::Udp {
            src_port: sport,
            dst_port: dport,
            payload: b"winnet trace".to_vec(),
        },
        TraceProtocol::Icmp => L4::Echo {
            request: true,
            ident: sport,
            seq: 1,
            data: b"winnet trace".to_vec(),
        },
    };
    Packet::new(src, req.to, l4)
}

fn invalid(detail: String) -> HnsError {
    HnsError::new(HResult::E_INVALIDARG, detail)
}

/// Who sends the traced packet.
struct Sender {
    /// "Endpoint", "Node" or "External".
    kind: &'static str,
    /// How the answer names it.
    name: String,
    endpoint: Option<Guid>,
    address: IpAddr,
    /// The port it enters by (for a sender with a stack, the one its route picks).
    port: PortId,
    mac: MacAddr,
    /// The sender's IP stack; `None` for a host beyond the uplink.
    stack: Option<Stack>,
    /// How the source MAC of a packet from beyond the uplink was found.
    mac_note: Option<String>,
}

impl Sender {
    fn find(
        state: &State,
        c: &Compiler,
        source: TraceSource,
        to: IpAddr,
    ) -> Result<Sender, HnsError> {
        match source {
            TraceSource::Endpoint(id) => {
                let ep = state.endpoint(id).ok_or_else(|| {
                    HnsError::new(
                        HResult::HCN_E_ENDPOINT_NOT_FOUND,
                        format!("From: endpoint {id} is gone"),
                    )
                })?;
                let address = ep
                    .ips()
                    .find(|a| a.is_ipv4() == to.is_ipv4())
                    .ok_or_else(|| {
                        invalid(format!(
                            "From: endpoint {} has no {} address to reach {to} from",
                            name_of(ep),
                            if to.is_ipv4() { "IPv4" } else { "IPv6" }
                        ))
                    })?;
                Sender::endpoint(state, c, ep, address)
            }
            TraceSource::Address(ip) => {
                if ip.is_ipv4() != to.is_ipv4() {
                    return Err(invalid(format!(
                        "From: {ip} and To: {to} are of different IP families; give two IPv4 or two IPv6 addresses"
                    )));
                }
                let local = state.endpoints().find(|e| {
                    e.ips().any(|a| a == ip)
                        && c.endpoint_port(e.id)
                            .and_then(|p| c.switch().port(p))
                            .is_some_and(|p| p.kind() == vfp::PortKind::PodVnic)
                });
                if let Some(ep) = local {
                    return Sender::endpoint(state, c, ep, ip);
                }
                if is_node_address(c, ip) {
                    return Ok(Sender::node(c, format!("the node ({ip})"), ip, None));
                }
                Sender::external(c, ip)
            }
        }
    }

    fn endpoint(
        state: &State,
        c: &Compiler,
        ep: &Endpoint,
        address: IpAddr,
    ) -> Result<Sender, HnsError> {
        let name = format!("endpoint {}", name_of(ep));
        if ep.is_remote() {
            return Err(HnsError::new(
                HResult::HCN_E_INVALID_REMOTE_ENDPOINT_OPERATION,
                format!(
                    "From: {name} is a remote endpoint (it lives on another node); trace from that node"
                ),
            ));
        }
        let port = c.endpoint_port(ep.id).and_then(|p| c.switch().port(p));
        let Some(port) = port else {
            return Err(invalid(format!(
                "From: {name} has no port on this node's switch (an endpoint without a MAC, or an address of the host); trace from its IP address instead"
            )));
        };
        if port.kind() == vfp::PortKind::HostVnic {
            // A host vNIC (flannel's cbr0_ep): its packets are the host's.
            return Ok(Sender::node(c, name, address, Some(ep.id)));
        }
        let mac = port.config().mac.unwrap_or(MacAddr::ZERO);
        let iface = Iface {
            port: port.id(),
            mac,
            prefixes: crate::devices::pod_addresses(state, ep),
        };
        Ok(Sender {
            kind: "Endpoint",
            name,
            endpoint: Some(ep.id),
            address,
            port: port.id(),
            mac,
            stack: Some(Stack {
                ifaces: vec![iface],
                routes: crate::devices::pod_routes(state, ep),
            }),
            mac_note: None,
        })
    }

    fn node(c: &Compiler, name: String, address: IpAddr, endpoint: Option<Guid>) -> Sender {
        let ifaces = c
            .host_interfaces()
            .into_iter()
            .map(|i| Iface {
                port: i.port,
                mac: i.mac,
                prefixes: i.addresses,
            })
            .collect();
        let routes = c
            .facts()
            .routes
            .iter()
            .map(|r| (r.destination, r.next_hop))
            .collect();
        Sender {
            kind: "Node",
            name,
            endpoint,
            address,
            port: c.management_port(),
            mac: c.facts().host_mac,
            stack: Some(Stack { ifaces, routes }),
            mac_note: None,
        }
    }

    /// A host beyond the uplink: its frames arrive from its own MAC when it is on the node's
    /// segment, else from the router's.
    fn external(c: &Compiler, ip: IpAddr) -> Result<Sender, HnsError> {
        let Some(uplink) = c.uplink_port() else {
            return Err(HnsError::new(
                HResult::ERROR_NOT_FOUND,
                format!(
                    "From: {ip} is neither a local endpoint's address nor the node's, and this node's switch has no uplink (no external network) for a packet from it to arrive on"
                ),
            ));
        };
        let facts = c.facts();
        let on_link = facts.addresses.iter().any(|n| n.trunc().contains(&ip));
        let (mac, mac_note) = if on_link {
            match facts.resolver.mac_of(ip) {
                Some(m) => (m, None),
                None => (
                    UNKNOWN_MAC,
                    Some(format!(
                        "{ip} is not in the host's neighbour table; its MAC is shown as {UNKNOWN_MAC}"
                    )),
                ),
            }
        } else {
            match facts
                .default_gateway(ip)
                .and_then(|g| facts.resolver.mac_of(g).map(|m| (g, m)))
            {
                Some((g, m)) => (
                    m,
                    Some(format!("from the router {g}, the node's default gateway")),
                ),
                None => (
                    UNKNOWN_MAC,
                    Some(format!(
                        "the router's MAC is not known; shown as {UNKNOWN_MAC}"
                    )),
                ),
            }
        };
        Ok(Sender {
            kind: "External",
            name: format!("{ip}, beyond the uplink"),
            endpoint: None,
            address: ip,
            port: uplink,
            mac,
            stack: None,
            mac_note,
        })
    }
}

fn name_of(ep: &Endpoint) -> String {
    if ep.name.is_empty() {
        ep.id.to_string()
    } else {
        format!("{} ({})", ep.name, ep.id)
    }
}

fn is_node_address(c: &Compiler, ip: IpAddr) -> bool {
    c.facts().ips().any(|a| a == ip)
        || c.host_interfaces()
            .iter()
            .any(|i| i.addresses.iter().any(|n| n.addr() == ip))
}

/// A sender's interface on the switch.
#[derive(Clone, Debug)]
struct Iface {
    port: PortId,
    mac: MacAddr,
    prefixes: Vec<IpNet>,
}

/// What routing needs of a sender's IP stack: its interfaces and its routes via gateways.
#[derive(Clone, Debug)]
struct Stack {
    ifaces: Vec<Iface>,
    routes: Vec<(IpNet, IpAddr)>,
}

impl Stack {
    /// The interface and next hop for `dst`: the longest prefix, connected before routed.
    fn route(&self, dst: IpAddr) -> Option<(&Iface, IpAddr)> {
        let mut best: Option<(u8, usize, IpAddr)> = None;
        let mut consider = |len: u8, iface: usize, hop: IpAddr| {
            if best.is_none_or(|(l, _, _)| len > l) {
                best = Some((len, iface, hop));
            }
        };
        for (i, iface) in self.ifaces.iter().enumerate() {
            for n in iface.prefixes.iter().filter(|n| n.trunc().contains(&dst)) {
                consider(n.prefix_len(), i, dst);
            }
        }
        for (d, via) in self.routes.iter().filter(|(d, _)| d.contains(&dst)) {
            let on_link = self
                .ifaces
                .iter()
                .position(|i| i.prefixes.iter().any(|n| n.trunc().contains(via)));
            if let Some(i) = on_link {
                consider(d.prefix_len(), i, *via);
            }
        }
        best.and_then(|(_, i, hop)| Some((self.ifaces.get(i)?, hop)))
    }

    fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .ifaces
            .iter()
            .flat_map(|i| {
                i.prefixes
                    .iter()
                    .map(|n| format!("{} connected", n.trunc()))
            })
            .collect();
        parts.extend(self.routes.iter().map(|(d, via)| format!("{d} via {via}")));
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

/// How a next hop's MAC was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// The switch answers ARP / neighbour solicitations for the address.
    Owned,
    /// A port of the switch has the address.
    Port,
    /// The host's neighbour table knows it.
    Neighbour,
    /// Nobody knows it.
    Unknown,
}

/// A next hop and its MAC.
#[derive(Clone, Debug)]
struct NextHop {
    address: IpAddr,
    mac: MacAddr,
    how: How,
    /// The port that has the address, for [`How::Port`].
    port_name: Option<String>,
}

impl NextHop {
    fn describe(&self) -> String {
        match self.how {
            How::Owned => "the switch answers ARP for it".into(),
            How::Port => format!(
                "the MAC of port {}, which has the address",
                self.port_name.as_deref().unwrap_or("?")
            ),
            How::Neighbour => "from the host's neighbour table".into(),
            How::Unknown => "unknown".into(),
        }
    }
}

/// The MAC the sender on `iface` would address `hop` with: what the switch answers to its ARP
/// (or neighbour solicitation), else the MAC of the port that has the address, else what the
/// host's neighbour table says.
fn resolve_mac(
    c: &mut Compiler,
    iface: &Iface,
    src: IpAddr,
    hop: IpAddr,
    now: Timestamp,
) -> NextHop {
    let found = |mac, how, port_name| NextHop {
        address: hop,
        mac,
        how,
        port_name,
    };
    if let Some(mac) = answered(c, iface, src, hop, now) {
        return found(mac, How::Owned, None);
    }
    let vni = c.switch().port(iface.port).map(|p| p.config().vni);
    let owner = c.switch().ports().find(|p| {
        p.id() != iface.port && Some(p.config().vni) == vni && p.config().ips.contains(&hop)
    });
    if let Some((mac, name)) = owner.and_then(|p| Some((p.config().mac?, p.name().to_string()))) {
        return found(mac, How::Port, Some(name));
    }
    match c.facts().resolver.mac_of(hop) {
        Some(mac) => found(mac, How::Neighbour, None),
        None => found(UNKNOWN_MAC, How::Unknown, None),
    }
}

/// The switch's answer to the sender's ARP request (IPv4) or neighbour solicitation (IPv6)
/// for `hop`, traced so that nothing changes.
fn answered(
    c: &mut Compiler,
    iface: &Iface,
    src: IpAddr,
    hop: IpAddr,
    now: Timestamp,
) -> Option<MacAddr> {
    let frame = match (src, hop) {
        (IpAddr::V4(s), IpAddr::V4(h)) => packet::arp_request(iface.mac, s, h),
        (IpAddr::V6(s), IpAddr::V6(h)) => solicitation(iface.mac, s, h),
        _ => return None,
    };
    let t = c.switch_mut().trace(iface.port, &frame, now);
    if !matches!(t.disposition, Disposition::Reply(_)) {
        return None;
    }
    match packet::parse(t.frame.as_deref()?).ok()?.1 {
        Parsed::Arp(a) => Some(a.sender_mac),
        Parsed::Nd(_, Icmpv6Repr::NeighborAdvert { target_mac, .. }) => target_mac,
        _ => None,
    }
}

fn solicitation(mac: MacAddr, src: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let group = packet::solicited_node(target);
    let ns = Icmpv6Repr::NeighborSolicit {
        target,
        source_mac: Some(mac),
    };
    packet::nd(mac, src, group, MacAddr::ipv6_multicast(group), &ns)
}

/// What the answer is made from.
struct View<'a> {
    state: &'a State,
    compiler: &'a Compiler,
    profile: hns::Profile,
}

impl View<'_> {
    fn answer(
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

    fn port_json(&self, port: PortId) -> Value {
        json!({"Port": port, "Name": self.port_name(port)})
    }

    fn step_json(&self, s: &TraceStep) -> Value {
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
    fn origin_json(&self, o: &Origin) -> Value {
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
    fn object(&self, id: Guid) -> Option<(&'static str, Guid, String)> {
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

    fn disposition_json(&self, t: &vfp::Trace, text: &str) -> Value {
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
fn service_json(s: &str) -> Option<Value> {
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

fn headers_json(h: &PacketHeaders) -> Value {
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

fn protocol_name(p: u8) -> String {
    match p {
        vfp::wire::proto::TCP => "tcp".into(),
        vfp::wire::proto::UDP => "udp".into(),
        vfp::wire::proto::ICMP => "icmp".into(),
        vfp::wire::proto::ICMPV6 => "icmpv6".into(),
        other => other.to_string(),
    }
}

fn sock(h: &Headers) -> String {
    std::net::SocketAddr::new(h.dst_ip, h.dst_port).to_string()
}

/// What a layer changed, field by field ("dst 10.96.0.10:80 -> 10.244.1.11:8080").
fn rewrites(before: &PacketHeaders, after: &PacketHeaders) -> Vec<String> {
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
    fn routes_take_the_longest_prefix_and_connected_wins_a_tie() {
        let iface = Iface {
            port: 1,
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            prefixes: vec!["10.244.1.10/24".parse().unwrap()],
        };
        let s = Stack {
            ifaces: vec![iface],
            routes: vec![
                ("0.0.0.0/0".parse().unwrap(), "10.244.1.2".parse().unwrap()),
                (
                    "10.244.1.0/24".parse().unwrap(),
                    "10.244.1.1".parse().unwrap(),
                ),
                ("10.9.0.0/16".parse().unwrap(), "10.3.0.1".parse().unwrap()),
            ],
        };
        let hop = |d: &str| s.route(d.parse().unwrap()).map(|(_, h)| h.to_string());
        assert_eq!(hop("10.244.1.11").as_deref(), Some("10.244.1.11"));
        assert_eq!(hop("10.96.0.10").as_deref(), Some("10.244.1.2"));
        // A route whose gateway is not on-link is not usable; the default route is.
        assert_eq!(hop("10.9.0.1").as_deref(), Some("10.244.1.2"));
    }

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
