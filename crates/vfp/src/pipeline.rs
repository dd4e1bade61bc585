//! The slow path: a packet's headers through the ingress port's layers (top-down), the
//! forwarding decision, and the egress port's layers (bottom-up). The result is the composite
//! transposition the flow table caches. Traces run the same code with `commit` off.

use crate::action::{self, ActionCtx, Prior};
use crate::counters::FlowCounters;
use crate::direction::Direction;
use crate::disposition::DropReason;
use crate::flow_table::FlowTable;
use crate::forwarding::{Decision, ForwardReason, Forwarding};
use crate::headers::PacketHeaders;
use crate::layer::{DefaultAction, Layer, Verdict};
use crate::nat::{NatPools, SnatAlloc};
use crate::port::{Port, PortId};
use crate::tcp_state::TcpMark;
use crate::trace::{ForwardStep, LayerDecision, TraceStep};
use std::sync::Arc;

/// The parts of the switch the slow path works on.
pub(crate) struct Env<'a> {
    pub ports: &'a mut [Option<Port>],
    pub fwd: &'a Forwarding,
    pub pools: &'a mut NatPools,
    pub flows: &'a mut FlowTable,
    pub counters: &'a mut FlowCounters,
    pub seed: u64,
}

/// The slow path's result for a packet that leaves through a port.
#[derive(Debug, Clone)]
pub(crate) struct Evaluation {
    pub after: PacketHeaders,
    pub to: PortId,
    pub stateful: bool,
    /// SNAT ports the connection holds now.
    pub snat: [Option<SnatAlloc>; 2],
    /// Ports of the prior evaluation this one did not take over (to be released).
    pub unused_prior: [Option<SnatAlloc>; 2],
}

/// Why the slow path did not produce an egress port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Drop(DropReason),
    Flood,
}

/// What a trace collects while the slow path runs.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pub steps: Vec<TraceStep>,
    pub forward: Option<ForwardStep>,
}

/// Runs the layers of `from` (out), forwarding, and the layers of the egress port (in).
/// `syn` is the packet's place in its TCP sequence space when it opens a connection (SNAT may
/// then reuse a closed connection's tuple the far end would take it on). `commit` false
/// (traces) leaves counters and SNAT pools untouched.
pub(crate) fn evaluate(
    env: &mut Env<'_>,
    from: PortId,
    start: &PacketHeaders,
    prior: Prior,
    syn: Option<TcpMark>,
    commit: bool,
    mut rec: Option<&mut Recorder>,
) -> Result<Evaluation, Stop> {
    let mut cx = ActionCtx {
        pools: env.pools,
        flows: env.flows,
        counters: env.counters,
        commit,
        prior,
        syn,
        snat: [None, None],
        remotes: [None, None],
        seed: env.seed,
    };
    let r = run(env.ports, env.fwd, from, start, &mut cx, commit, &mut rec).and_then(
        |(mut after, to, stateful)| {
            cx.settle(&mut after.inner).map_err(Stop::Drop)?;
            Ok((after, to, stateful))
        },
    );
    match r {
        Ok((after, to, stateful)) => Ok(Evaluation {
            after,
            to,
            stateful,
            snat: cx.snat,
            unused_prior: cx.prior.snat,
        }),
        Err(stop) => {
            if commit {
                for (a, remote) in cx.snat.into_iter().zip(cx.remotes) {
                    if let (Some(a), Some(remote)) = (a, remote)
                        && !prior.snat.contains(&Some(a))
                    {
                        cx.pools.release(a, remote);
                    }
                }
            }
            Err(stop)
        }
    }
}

fn run(
    ports: &mut [Option<Port>],
    fwd: &Forwarding,
    from: PortId,
    start: &PacketHeaders,
    cx: &mut ActionCtx<'_>,
    commit: bool,
    rec: &mut Option<&mut Recorder>,
) -> Result<(PacketHeaders, PortId, bool), Stop> {
    let mut h = start.clone();
    let mut stateful = true;
    let port = port_mut(ports, from)?;
    let vni = port.config().vni;
    run_layers(port, Direction::Out, &mut h, cx, commit, &mut stateful, rec)?;
    let arrived = start
        .outer
        .as_ref()
        .filter(|o| h.outer.as_ref().is_some_and(|n| Arc::ptr_eq(o, n)));
    let (to, reason) = match fwd.decide(from, vni, &mut h, arrived) {
        Decision::To(p, why) => (p, why),
        Decision::Flood => return Err(Stop::Flood),
        Decision::Drop(d) => return Err(Stop::Drop(d)),
    };
    if let Some(r) = rec.as_deref_mut() {
        r.forward = Some(ForwardStep { to, reason });
    }
    if to == from && h == *start && reason != ForwardReason::Routed {
        return Err(Stop::Drop(DropReason::Hairpin));
    }
    let port = port_mut(ports, to)?;
    run_layers(port, Direction::In, &mut h, cx, commit, &mut stateful, rec)?;
    Ok((h, to, stateful))
}

fn port_mut(ports: &mut [Option<Port>], id: PortId) -> Result<&mut Port, Stop> {
    ports
        .get_mut(usize::from(id))
        .and_then(Option::as_mut)
        .ok_or(Stop::Drop(DropReason::UnknownPort))
}

/// Runs one port's layers in `dir` order, applying each layer's decision to `h`.
fn run_layers(
    port: &mut Port,
    dir: Direction,
    h: &mut PacketHeaders,
    cx: &mut ActionCtx<'_>,
    commit: bool,
    stateful: &mut bool,
    rec: &mut Option<&mut Recorder>,
) -> Result<(), Stop> {
    let n = port.layers.len();
    for i in 0..n {
        let li = if dir == Direction::Out { i } else { n - 1 - i };
        let layer = &port.layers[li];
        if layer.is_empty() && layer.default_action(dir) == DefaultAction::Allow {
            continue;
        }
        let before = rec.is_some().then(|| h.clone());
        let verdict = layer.lookup(&h.inner, h.vni(), dir);
        let (result, decision) = apply_verdict(layer, verdict, h, cx, stateful, rec.is_some());
        if commit {
            count(&mut port.layers[li], verdict, result.is_err());
        }
        if let (Some(r), Some(before), Some(decision)) = (rec.as_deref_mut(), before, decision) {
            r.steps.push(TraceStep {
                port: port.id(),
                port_name: port.name().to_string(),
                direction: dir,
                layer: port.layers[li].name().to_string(),
                decision,
                after: h.clone(),
                before,
            });
        }
        result.map_err(Stop::Drop)?;
    }
    Ok(())
}

/// Carries out a layer's verdict on the headers; describes it too when a trace wants it.
fn apply_verdict(
    layer: &Layer,
    verdict: Verdict,
    h: &mut PacketHeaders,
    cx: &mut ActionCtx<'_>,
    stateful: &mut bool,
    describe: bool,
) -> (Result<(), DropReason>, Option<LayerDecision>) {
    match verdict {
        Verdict::Rule { group, slot } => {
            let Some(r) = layer.rule(group, slot) else {
                return (Ok(()), None);
            };
            *stateful &= r.rule.stateful;
            let decision = describe.then(|| LayerDecision::Rule {
                origin: r.origin.clone(),
                group: layer.groups()[group].name().to_string(),
                index: r.index,
                priority: r.rule.priority,
                action: r.rule.action.clone(),
            });
            (action::apply(&r.rule.action, h, cx), decision)
        }
        Verdict::Default(d) => {
            let result = match d {
                DefaultAction::Allow => Ok(()),
                DefaultAction::Block => Err(DropReason::BlockedByDefault),
            };
            (result, describe.then_some(LayerDecision::Default(d)))
        }
    }
}

fn count(layer: &mut Layer, verdict: Verdict, dropped: bool) {
    layer.counters.evaluated += 1;
    layer.counters.drops += u64::from(dropped);
    match verdict {
        Verdict::Rule { group, slot } => {
            layer.counters.rule_hits += 1;
            if let Some(r) = layer.rule_mut(group, slot) {
                r.hits += 1;
            }
        }
        Verdict::Default(_) => layer.counters.default_hits += 1,
    }
}
