//! `POST /trace`, explained: the first packet of a connection, built as it would reach the
//! switch, run through `Switch::trace` (the data path with its side effects off), and told
//! back as a [`TraceAnswer`] that names the HNS object, and the Kubernetes object, behind each
//! rule. Pure over hnsd's [`State`] and the node's [`Compiler`]: the data plane calls
//! [`trace`] under its lock, the in-memory cluster on its simulated node.
//!
//! Where the packet enters (`sender`): from a local endpoint, its port, with the MAC its pod
//! would use (its next hop's: the pod's routes say which, and the switch's answer to the pod's
//! ARP, or the port that has the address, says the MAC: `stack`); from an address of the
//! node, the host vNIC the host's routes pick; from any other address, the uplink, addressed
//! to the host's MAC. `answer` tells what happened.

mod answer;
mod sender;
mod stack;

use std::net::IpAddr;

use hcn::error::{HResult, HnsError};
use hns::state::State;
use hns::trace::{TraceAnswer, TraceProtocol, TraceRequest, TraceSource};
use vfp::Timestamp;
use vfp::packet::{L4, Packet};
use vfp::wire::{MacAddr, TcpFlags};

use crate::Compiler;
use answer::View;
use sender::Sender;
use stack::{How, resolve_mac};

/// First source port (or echo identifier) tried for the traced connection.
const FIRST_SOURCE_PORT: u16 = 40_000;
/// Source ports tried until one names no connection the flow table already has (a trace of a
/// cached connection would show the fast path, not the layers).
const SOURCE_PORT_TRIES: u16 = 64;
/// The MAC a frame is addressed to when the next hop's is unknown: a unicast the switch knows
/// no port by, so it goes where unknown destinations go, as the next hop's frames would.
const UNKNOWN_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0]);

/// Traces `req` on the switch of `compiler` (compiled from `state`) at `now`, without changing
/// the flow table, counters or SNAT pools.
pub fn trace(
    state: &State,
    compiler: &mut Compiler,
    node: &str,
    req: &TraceRequest,
    now: Timestamp,
) -> Result<TraceAnswer, HnsError> {
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
