//! A pod's port under 1,000 ACL rules, as a NetworkPolicy agent programs them (Calico for
//! Windows: one Allow per remote address at ascending priorities from 1000, a Block closing
//! each direction, in VFP's per-direction groups), against the same port with none, in the
//! same run:
//! - `fast_path_*`: packets of live inbound connections (flow-table hits);
//! - `new_flows_*`: first packets of new connections (the layers, then a flow entry), inbound
//!   (remote client to the pod: the rules name the source) and outbound (the pod to a remote
//!   server: the rules name the destination).
//!
//! Each pair is printed as a ratio of rates: the best of many short runs of each, the two
//! taking turns so that both see the same load.
//! Run: `cargo bench -p vfp --bench acl`; `bench/check.sh switch` runs it briefly.

mod common;

use common::{mac, pick, tcp_frame, v4};
use criterion::{Criterion, Throughput, criterion_group};
use std::hint::black_box;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use vfp::layer::ACL;
use vfp::wire::{TcpFlags, proto};
use vfp::*;

/// Allow rules per direction; with the closing Block, 1,000 rules on the port.
const ALLOWS: u32 = 499;
const FLOWS: u32 = 20_000;
const BATCH: usize = 1024;
const POD: u32 = 0x0af4_010a; // 10.244.1.10

/// Remote address `i`: pods of other nodes, 10.244.2.0 onwards.
fn remote(i: u32) -> IpAddr {
    v4(0x0af4_0200 + i)
}

/// The pod's rules, as felix writes them: per remote address, an Allow at priority 1000 + i,
/// inbound naming the source and outbound the destination; a Block after them.
fn calico_rules(dir: Direction) -> Vec<Rule> {
    let mut rules: Vec<Rule> = (0..ALLOWS)
        .map(|i| {
            let c = Conditions::any().direction(dir).protocol(proto::TCP);
            let c = match dir {
                Direction::In => c.src_ip(remote(i)).dst_port(80),
                Direction::Out => c.dst_ip(remote(i)).dst_port(80),
            };
            Rule::new(1000 + i as u16, c, Action::Allow)
        })
        .collect();
    rules.push(Rule::new(
        1000 + ALLOWS as u16,
        Conditions::any().direction(dir),
        Action::Block,
    ));
    rules
}

/// A node: the pod and the uplink to the other nodes; with `acl`, the pod's 1,000 rules.
fn node(acl: bool) -> (Switch, PortId, PortId) {
    let mut sw = Switch::new(SwitchConfig::default());
    let pod = sw
        .add_port(PortConfig::pod("web", mac(10), vec![v4(POD)]))
        .expect("a pod port");
    let uplink = sw.add_port(PortConfig::uplink("eth0")).expect("the uplink");
    if acl {
        let layer = sw.layer_mut(pod, ACL).expect("the pod's ACL layer");
        for (group, dir) in [
            ("ACL_ENDPOINT_GROUP_IPV4_IN", Direction::In),
            ("ACL_ENDPOINT_GROUP_IPV4_OUT", Direction::Out),
        ] {
            layer.add_group(group).expect("a new group");
            layer
                .set_group_rules(group, Origin::new("ACL", group), calico_rules(dir))
                .expect("the group just added");
        }
    }
    (sw, pod, uplink)
}

fn segment(src: IpAddr, src_port: u16, dst: IpAddr, dst_port: u16, flags: u8) -> Vec<u8> {
    let macs = if src == v4(POD) {
        (mac(10), mac(99))
    } else {
        (mac(99), mac(10))
    };
    tcp_frame((src, src_port), (dst, dst_port), flags, macs)
}

/// Inbound connection `k`: from remote client `k % ALLOWS` (every rule is somebody's), a
/// client port unique per client.
fn inbound(k: u32, flags: u8) -> Vec<u8> {
    let port = 1024 + (k / ALLOWS) as u16;
    segment(remote(k % ALLOWS), port, v4(POD), 80, flags)
}

/// Outbound connection `k`: from the pod to remote server `k % ALLOWS`.
fn outbound(k: u32, flags: u8) -> Vec<u8> {
    let port = 1024 + (k / ALLOWS) as u16;
    segment(v4(POD), port, remote(k % ALLOWS), 80, flags)
}

/// The node with [`FLOWS`] live inbound connections.
fn with_live_connections(acl: bool) -> (Switch, PortId) {
    let (mut sw, pod, uplink) = node(acl);
    for k in 0..FLOWS {
        let d = sw.process(
            uplink,
            &mut Frame::new(&inbound(k, TcpFlags::SYN)),
            Timestamp(0),
        );
        assert_eq!(d, Disposition::Deliver(pod), "connection {k}");
    }
    (sw, uplink)
}

/// Best time per packet of each of two batches (`BATCH` packets each), run in turn so that
/// both see the same load on a shared machine, in ns.
fn best_of_both(runs: usize, mut batches: [&mut dyn FnMut() -> Duration; 2]) -> [f64; 2] {
    let mut best = [Duration::MAX; 2];
    for _ in 0..runs {
        for (b, batch) in best.iter_mut().zip(batches.iter_mut()) {
            *b = (*b).min(batch());
        }
    }
    best.map(|b| b.as_nanos() as f64 / BATCH as f64)
}

/// Packets of live inbound connections, timed per batch.
fn live(acl: bool, originals: &[Vec<u8>]) -> impl FnMut() -> Duration {
    let (mut sw, uplink) = with_live_connections(acl);
    let mut frames: Vec<Frame> = originals.iter().map(|o| Frame::new(o)).collect();
    let originals = originals.to_vec();
    move || {
        let t = Instant::now();
        for (f, o) in frames.iter_mut().zip(&originals) {
            f.set(o);
            black_box(sw.process(uplink, f, Timestamp(1)));
        }
        let took = t.elapsed();
        assert_eq!(sw.flows().len(), FLOWS as usize, "every packet hit a flow");
        took
    }
}

fn fast_path(c: &mut Criterion) {
    let originals: Vec<Vec<u8>> = pick(BATCH, FLOWS)
        .into_iter()
        .map(|k| inbound(k, TcpFlags::ACK))
        .collect();
    let (mut none, mut acl) = (live(false, &originals), live(true, &originals));
    report(
        "fast path (flow-table hit)",
        best_of_both(300, [&mut none, &mut acl]),
    );
    let mut g = c.benchmark_group("acl");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, run) in [
        (
            "fast_path_no_rules",
            &mut none as &mut dyn FnMut() -> Duration,
        ),
        ("fast_path_1000_rules", &mut acl),
    ] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| run()).sum())
        });
    }
    g.finish();
}

/// First packets of `BATCH` new connections per run (`conn`: inbound or outbound), timed; each
/// run on the tuples the last run's were expired from (outside the timed region).
fn opening(acl: bool, conn: fn(u32, u8) -> Vec<u8>, inbound: bool) -> impl FnMut() -> Duration {
    let (mut sw, pod, uplink) = node(acl);
    let from = if inbound { uplink } else { pod };
    // Distinct tuples, over every rule's address.
    let originals: Vec<Vec<u8>> = (0..BATCH as u32)
        .map(|k| conn(k * 7, TcpFlags::SYN))
        .collect();
    let mut frames: Vec<Frame> = originals.iter().map(|o| Frame::new(o)).collect();
    let mut round = 0u64;
    move || {
        round += 1;
        let t = Instant::now();
        for (f, o) in frames.iter_mut().zip(&originals) {
            f.set(o);
            black_box(sw.process(from, f, Timestamp::from_secs(round * 1000)));
        }
        let took = t.elapsed();
        assert_eq!(sw.flows().len(), BATCH, "each SYN made a connection");
        sw.expire(Timestamp::from_secs(round * 1000 + 999));
        took
    }
}

fn new_flows(c: &mut Criterion) {
    let mut g = c.benchmark_group("acl");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (way, conn) in [
        ("inbound", inbound as fn(u32, u8) -> Vec<u8>),
        ("outbound", outbound),
    ] {
        let into = way == "inbound";
        let (mut none, mut acl) = (opening(false, conn, into), opening(true, conn, into));
        report(
            &format!("new connections, {way}"),
            best_of_both(100, [&mut none, &mut acl]),
        );
        for (rules, run) in [
            ("no_rules", &mut none as &mut dyn FnMut() -> Duration),
            ("1000_rules", &mut acl),
        ] {
            g.bench_function(format!("new_flows_{way}_{rules}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| run()).sum())
            });
        }
    }
    g.finish();
}

/// Prints a pair: without rules, with 1,000, and the ratio of their rates.
fn report(what: &str, ns: [f64; 2]) {
    eprintln!(
        "{what}: no rules {:.1} ns/packet ({:.0} k/s), 1,000 ACL rules {:.1} ns/packet ({:.0} k/s): ratio to none {:.3}",
        ns[0],
        1e6 / ns[0],
        ns[1],
        1e6 / ns[1],
        ns[0] / ns[1]
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1)).sample_size(20);
    targets = fast_path, new_flows
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
