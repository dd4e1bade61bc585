//! Data-path throughput of the switch, in packets (elements) per second:
//! - `fast_path`: flow-table hits with 10,000 load balancers and 100,000 live connections;
//! - `new_flows`: first packets of new connections (slow path + install) with 10,000 LBs;
//! - `floor`: the least work any switch must do per packet, measured in the same run: parse
//!   the 5-tuple, one hash lookup, rewrite one address with incremental checksum updates.
//!
//! Every variant restores the same frame bytes into the same buffer before each packet, so the
//! copy is common to all three. Run: `cargo bench -p vfp --bench fastpath`.
//!
//! Before criterion's runs, `under_load` times the fast path against the floor twice in the same
//! process: on a quiet machine and with a fixed background load the bench starts itself (a
//! thread walking a 64 MiB buffer, standing in for a compiler on the other core), and prints
//! each ratio to the floor (budget: loaded >= 0.8 x quiet).
//!
//! `FASTPATH_QUICK=1` leaves `under_load` out (`bench/check.sh`'s quick run: it has no row
//! there).
//!
//! `FASTPATH_COUNT=N` runs only N batches of the fast path and of the floor, for callgrind's
//! instruction counts (see `count_only`).

mod common;

use common::{mac, pick, tcp_frame, v4};
use criterion::{Criterion, Throughput, criterion_group};
use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vfp::layer::{ACL, NAT, ROUTE, SLB};
use vfp::wire::{TcpFlags, proto};
use vfp::*;

const LBS: u32 = 10_000;
const FLOWS: u32 = 100_000;
const BATCH: usize = 1024;

fn vip(i: u32) -> IpAddr {
    v4(0x0a60_0000 + i) // 10.96.0.0/16 + i
}

fn frame(src: IpAddr, src_port: u16, dst: IpAddr, dst_port: u16, flags: u8) -> Vec<u8> {
    tcp_frame((src, src_port), (dst, dst_port), flags, (mac(10), mac(1)))
}

/// A node like kube-proxy programs it: a client pod, 8 local backend pods, a host vNIC, an
/// uplink; 10,000 ClusterIP load balancers (4 backends each: 2 local, 2 on remote nodes behind
/// VXLAN) in the client's SLB layer, ACLs, OutboundNAT with a cluster exception, and remote
/// subnet routes.
fn node() -> (Switch, PortId) {
    let mut sw = Switch::new(SwitchConfig {
        max_flows: 1 << 20,
        ..SwitchConfig::default()
    });
    let a = sw
        .add_port(PortConfig::pod("client", mac(10), vec![v4(0x0af4_010a)]))
        .unwrap();
    for i in 0..8u32 {
        sw.add_port(PortConfig::pod(
            &format!("web-{i}"),
            mac(11 + i as u8),
            vec![v4(0x0af4_010b + i)],
        ))
        .unwrap();
    }
    sw.add_port(PortConfig::host("host", mac(20), vec![v4(0xc0a8_0105)]))
        .unwrap();
    sw.add_port(PortConfig::uplink("eth0")).unwrap();
    sw.own_address(v4(0x0af4_0101), mac(1));
    let pool = sw.add_snat_pool(v4(0xc0a8_0105), 1024, 65535);
    let client = sw.port_mut(a).unwrap();
    let acl = (0..16u16)
        .map(|p| {
            Rule::new(
                100 + p,
                Conditions::any().protocol(proto::TCP).dst_port(9000 + p),
                Action::Block,
            )
        })
        .collect();
    client
        .layer_mut(ACL)
        .unwrap()
        .set_rules(Origin::new("ACL", "ep"), acl);
    let slb = client.layer_mut(SLB).unwrap();
    for i in 0..LBS {
        let local = |k: u32| Backend {
            ip: v4(0x0af4_010b + (i + k) % 8),
            port: Some(8080),
            mac: Some(mac(11 + ((i + k) % 8) as u8)),
        };
        let remote = |n: u32| Backend {
            ip: v4(0x0af4_0000 + (n << 8) + 2 + i % 200),
            port: Some(8080),
            mac: None,
        };
        let lb = LoadBalancer::new(vec![local(0), local(1), remote(2), remote(3)]);
        let c = Conditions::any()
            .protocol(proto::TCP)
            .dst_ip(vip(i))
            .dst_port(80);
        slb.set_rules(
            Origin::new("LoadBalancer", i.to_string()),
            vec![Rule::new(1, c, Action::LoadBalance(Arc::new(lb)))],
        );
    }
    let cluster = Conditions::any()
        .direction(Direction::Out)
        .dst_net("10.0.0.0/8".parse().unwrap());
    let nat = vec![
        Rule::new(1, cluster, Action::Allow),
        Rule::new(
            2,
            Conditions::any().direction(Direction::Out),
            Action::Snat { pool },
        ),
    ];
    client
        .layer_mut(NAT)
        .unwrap()
        .set_rules(Origin::new("OutBoundNAT", "ep"), nat);
    let routes = (2..4u32)
        .map(|n| {
            let outer = Arc::new(Encap {
                vni: 4096,
                src_mac: mac(20),
                dst_mac: mac(30 + n as u8),
                src_ip: v4(0xc0a8_0105),
                dst_ip: v4(0xc0a8_0100 + n),
                udp_port: 4789,
            });
            let net = format!("10.244.{n}.0/24").parse().unwrap();
            Rule::route(
                net,
                Action::Encap {
                    outer,
                    inner_dst_mac: Some(mac(40)),
                },
            )
        })
        .collect();
    client
        .layer_mut(ROUTE)
        .unwrap()
        .set_rules(Origin::new("RemoteSubnetRoute", "all"), routes);
    (sw, a)
}

/// Connection `k`: client address, client port, VIP. Client ports are unique per client
/// address so that two connections never clash after DNAT to the same backend.
fn conn(k: u32) -> (IpAddr, u16, IpAddr) {
    (
        v4(0x0af4_010a + k / 50_000),
        1024 + (k % 50_000) as u16,
        vip(k % LBS),
    )
}

/// One batch of packets of existing connections, picked all over the table, and buffers to
/// process them in.
fn batch_of_live_connections() -> (Vec<Vec<u8>>, Vec<Frame>) {
    let originals: Vec<Vec<u8>> = pick(BATCH, FLOWS)
        .into_iter()
        .map(|k| {
            let (client, sp, dst) = conn(k);
            frame(client, sp, dst, 80, TcpFlags::ACK)
        })
        .collect();
    let frames = originals.iter().map(|o| Frame::new(o)).collect();
    (originals, frames)
}

/// The node with [`FLOWS`] live connections opened through it (each SYN delivered).
fn node_with_live_connections() -> (Switch, PortId) {
    let (mut sw, a) = node();
    sw.reserve_flows(FLOWS as usize);
    for k in 0..FLOWS {
        let (client, sp, dst) = conn(k);
        let d = sw.process(
            a,
            &mut Frame::new(&frame(client, sp, dst, 80, TcpFlags::SYN)),
            Timestamp(0),
        );
        assert!(
            matches!(d, Disposition::Deliver(_) | Disposition::Uplink(_)),
            "{d:?}"
        );
    }
    assert_eq!(sw.flows().len(), FLOWS as usize);
    (sw, a)
}

fn fast_path(c: &mut Criterion) {
    let (mut sw, a) = node_with_live_connections();
    report_memory(&sw);
    let (originals, mut frames) = batch_of_live_connections();
    let mut g = c.benchmark_group("switch");
    g.throughput(Throughput::Elements(BATCH as u64));
    best_rate("fast_path", || {
        for (f, o) in frames.iter_mut().zip(&originals) {
            f.set(o);
            black_box(sw.process(a, f, Timestamp(1)));
        }
    });
    g.bench_function("fast_path_10k_lbs_100k_flows", |b| {
        b.iter(|| {
            for (f, o) in frames.iter_mut().zip(&originals) {
                f.set(o);
                black_box(sw.process(a, f, Timestamp(1)));
            }
        })
    });
    assert_eq!(
        sw.flows().len(),
        FLOWS as usize,
        "every packet hit an existing flow"
    );
    assert_eq!(sw.flow_counters().created, u64::from(FLOWS));
    g.finish();
}

/// Best rate over many short runs of `batch` (packets per run): the figure least disturbed by
/// other load on a shared machine, printed next to criterion's mean.
fn best_rate(name: &str, mut batch: impl FnMut()) {
    let mut best = Duration::MAX;
    for _ in 0..300 {
        let t = Instant::now();
        batch();
        best = best.min(t.elapsed());
    }
    let mpps = BATCH as f64 / best.as_secs_f64() / 1e6;
    eprintln!(
        "{name}: best of 300 runs {:.1} ns/packet = {mpps:.2} Mpps",
        best.as_nanos() as f64 / BATCH as f64
    );
}

fn report_memory(sw: &Switch) {
    let f = sw.flows();
    eprintln!(
        "flow table: {} connections, {} heap bytes, {:.1} bytes/connection (record {} bytes in a 64-byte aligned slot, two index keys)",
        f.len(),
        f.memory_bytes(),
        f.memory_bytes() as f64 / f.len() as f64,
        vfp::FlowTable::record_bytes()
    );
}

fn new_flows(c: &mut Criterion) {
    let (mut sw, a) = node();
    sw.reserve_flows(BATCH);
    let mut round = 0u32;
    let mut g = c.benchmark_group("switch");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("new_flows_10k_lbs", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                round = round.wrapping_add(1);
                let mut pkts = black_box(new_connection_frames());
                let t = Instant::now();
                for f in pkts.iter_mut() {
                    black_box(sw.process(a, f, Timestamp::from_secs(u64::from(round) * 1000)));
                }
                total += t.elapsed();
                assert_eq!(sw.flows().len(), BATCH, "each packet created a connection");
                // Tear down outside the timed region.
                sw.expire(Timestamp::from_secs(u64::from(round) * 1000 + 999));
            }
            total
        })
    });
    g.finish();
}

/// The floor: a 5-tuple hash map and the minimal parse/lookup/rewrite any switch needs.
struct Floor {
    table: hashbrown::HashMap<[u8; 13], [u8; 4], foldhash::fast::FixedState>,
}

impl Floor {
    fn new() -> Floor {
        let mut table = hashbrown::HashMap::with_capacity_and_hasher(
            FLOWS as usize,
            foldhash::fast::FixedState::with_seed(1),
        );
        for k in 0..FLOWS {
            let (client, sp, dst) = conn(k);
            let f = frame(client, sp, dst, 80, TcpFlags::ACK);
            table.insert(Floor::key_of(&f).unwrap(), [10, 244, 1, (k % 250) as u8]);
        }
        Floor { table }
    }

    #[inline(always)]
    fn key_of(b: &[u8]) -> Option<[u8; 13]> {
        let ip = b.get(14..34)?;
        if b.get(12..14)? != [8, 0] || ip[0] >> 4 != 4 {
            return None;
        }
        let l4 = b.get(14 + usize::from(ip[0] & 0xf) * 4..)?.get(..4)?;
        let mut k = [0u8; 13];
        k[..8].copy_from_slice(&ip[12..20]);
        k[8] = ip[9];
        k[9..13].copy_from_slice(l4);
        Some(k)
    }

    fn run(&self, frames: &mut [Frame], originals: &[Vec<u8>]) {
        for (f, o) in frames.iter_mut().zip(originals) {
            f.set(o);
            let bytes = f.bytes_mut();
            let Some(k) = Floor::key_of(bytes) else {
                continue;
            };
            let Some(new) = self.table.get(&k) else {
                continue;
            };
            let old = [bytes[30], bytes[31], bytes[32], bytes[33]];
            bytes[30..34].copy_from_slice(new);
            let d = vfp::wire::checksum::delta(&old, new);
            let ipc = u16::from_be_bytes([bytes[24], bytes[25]]);
            bytes[24..26].copy_from_slice(&vfp::wire::checksum::apply_delta(ipc, d).to_be_bytes());
            let l4 = 14 + usize::from(bytes[14] & 0xf) * 4 + 16;
            let tc = u16::from_be_bytes([bytes[l4], bytes[l4 + 1]]);
            bytes[l4..l4 + 2]
                .copy_from_slice(&vfp::wire::checksum::apply_delta(tc, d).to_be_bytes());
            black_box(&bytes[..]);
        }
    }
}

fn floor(c: &mut Criterion) {
    let table = Floor::new();
    let (originals, mut frames) = batch_of_live_connections();
    let mut g = c.benchmark_group("switch");
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut run = || table.run(&mut frames, &originals);
    best_rate("floor", &mut run);
    g.bench_function("floor_parse_lookup_rewrite", |b| b.iter(&mut run));
    g.finish();
}

/// The background load: one thread walking a 64 MiB buffer (twice the shared L3) in a fixed
/// pseudo-random order, reading and writing a word per cache line — as a compiler or a test
/// suite on the other core competes for the caches and memory. The same load every run.
struct Load {
    stop: Arc<AtomicBool>,
    /// Rounds of 4,096 cache lines done, to show that the load ran alongside (and how much).
    steps: Arc<AtomicU64>,
    started: Instant,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The load's buffer: 64 MiB, or `FASTPATH_LOAD_MIB` MiB (a load that fits the other core's
/// own L2, 1 MiB, competes for the core's time and not the shared cache).
fn load_bytes() -> usize {
    std::env::var("FASTPATH_LOAD_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&m| m > 0)
        .unwrap_or(64)
        << 20
}

impl Load {
    /// Starts the load and returns once it is running.
    fn start() -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let steps = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, steps) = (stop.clone(), steps.clone());
            std::thread::spawn(move || {
                let bytes = load_bytes();
                let lines = bytes / 64;
                let mut buf = vec![0u64; bytes / 8];
                let mut x: u64 = 0x2545_f491_4f6c_dd1d;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..4096 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = (x as usize % lines) * 8;
                        buf[i] = buf[i].wrapping_add(x);
                    }
                    steps.fetch_add(1, Ordering::Relaxed);
                }
                black_box(&buf);
            })
        };
        while steps.load(Ordering::Relaxed) < 16 {
            std::thread::yield_now();
        }
        Load {
            stop,
            steps,
            started: Instant::now(),
            thread: Some(thread),
        }
    }

    /// Cache lines the load touched per second so far, in millions.
    fn rate(&self) -> f64 {
        self.steps.load(Ordering::Relaxed) as f64 * 4096.0
            / self.started.elapsed().as_secs_f64()
            / 1e6
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Batch times (ns per packet) of the fast path and the floor, interleaved batch by batch so
/// that both see the same moment of the machine: (median, best) of each.
fn interleaved(
    rounds: usize,
    mut fast: impl FnMut(),
    mut floor: impl FnMut(),
) -> ((f64, f64), (f64, f64)) {
    let (mut a, mut b) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        fast();
        a.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
        let t = Instant::now();
        floor();
        b.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    let stat = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0])
    };
    (stat(&mut a), stat(&mut b))
}

/// The fast path's cost per packet against the floor's, quiet and under the background load.
fn under_load(_: &mut Criterion) {
    if std::env::var_os("FASTPATH_QUICK").is_some() {
        return;
    }
    let (mut sw, a) = node_with_live_connections();
    let table = Floor::new();
    let (originals, mut frames) = batch_of_live_connections();
    let mut floor_frames = frames.clone();
    let rounds = 2_000;
    let mut measure = || {
        interleaved(
            rounds,
            || {
                for (f, o) in frames.iter_mut().zip(&originals) {
                    f.set(o);
                    black_box(sw.process(a, f, Timestamp(1)));
                }
            },
            || table.run(&mut floor_frames, &originals),
        )
    };
    // Warm both up (caches, branch predictors, page faults) before the quiet figure.
    measure();
    let quiet = measure();
    let (loaded, load_rate) = {
        let load = Load::start();
        let m = measure();
        (m, load.rate())
    };
    let ratio = |((fast, _), (floor, _)): ((f64, f64), (f64, f64))| floor / fast;
    for (name, m) in [("quiet", quiet), ("loaded", loaded)] {
        let ((fm, fb), (lm, lb)) = m;
        eprintln!(
            "under_load {name:>6}: fast path median {fm:.1} ns/packet (best {fb:.1}), floor median {lm:.1} (best {lb:.1}), fast path / floor rate {:.2}",
            ratio(m)
        );
    }
    eprintln!(
        "under_load: ratio to the floor loaded / quiet = {:.2} (budget >= 0.8; {rounds} interleaved batches of {BATCH} each; the load touched {load_rate:.1} M cache lines/s)",
        ratio(loaded) / ratio(quiet)
    );
}

/// One fast-path batch, kept out of line so that `callgrind --toggle-collect` can count it
/// alone (setup excluded).
#[inline(never)]
fn counted_fast_batch(sw: &mut Switch, a: PortId, frames: &mut [Frame], originals: &[Vec<u8>]) {
    for (f, o) in frames.iter_mut().zip(originals) {
        f.set(o);
        black_box(sw.process(a, f, Timestamp(1)));
    }
}

/// One floor batch, out of line for the same reason.
#[inline(never)]
fn counted_floor_batch(table: &Floor, frames: &mut [Frame], originals: &[Vec<u8>]) {
    table.run(frames, originals);
}

/// One batch of first packets of new connections (the slow path and the flow install), out of
/// line for the same reason.
#[inline(never)]
fn counted_new_batch(sw: &mut Switch, a: PortId, frames: &mut [Frame], now: Timestamp) {
    for f in frames.iter_mut() {
        black_box(sw.process(a, f, now));
    }
}

/// The first packets of `BATCH` new connections (the same every round; `new_flows` expires
/// them between rounds).
fn new_connection_frames() -> Vec<Frame> {
    let client = v4(0x0af4_010a);
    pick(BATCH, LBS)
        .into_iter()
        .enumerate()
        .map(|(i, l)| Frame::new(&frame(client, 1024 + i as u16, vip(l), 80, TcpFlags::SYN)))
        .collect()
}

/// `FASTPATH_COUNT=N`: runs N batches of the fast path and of the floor, and N batches of new
/// connections, and nothing else, for an instruction count that a busy machine does not
/// change:
/// `FASTPATH_COUNT=100 valgrind --tool=callgrind --toggle-collect='*counted_fast_batch*' BENCH`
/// (instructions / (N x 1,024) = per packet; `*counted_floor_batch*` for the floor,
/// `*counted_new_batch*` for new connections).
fn count_only(n: usize) {
    let (mut sw, a) = node_with_live_connections();
    let table = Floor::new();
    let (originals, mut frames) = batch_of_live_connections();
    let mut floor_frames = frames.clone();
    for _ in 0..n {
        counted_fast_batch(&mut sw, a, &mut frames, &originals);
        counted_floor_batch(&table, &mut floor_frames, &originals);
    }
    assert_eq!(
        sw.flow_counters().hits,
        (n * BATCH) as u64,
        "every packet hit"
    );
    let (mut sw, a) = node();
    sw.reserve_flows(BATCH);
    for round in 1..=n as u64 {
        let mut frames = new_connection_frames();
        counted_new_batch(&mut sw, a, &mut frames, Timestamp::from_secs(round * 1000));
        assert_eq!(sw.flows().len(), BATCH, "each packet created a connection");
        sw.expire(Timestamp::from_secs(round * 1000 + 999));
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(2)).sample_size(30);
    targets = under_load, floor, fast_path, new_flows
}

fn main() {
    if let Some(n) = std::env::var("FASTPATH_COUNT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        return count_only(n);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
