//! What a frame costs the pump at a TAP: a `read()` or `writev()` per frame against the pump's
//! io_uring ([`hns_dataplane::ring::Ring`], a batch per system call), on one TAP in a scratch
//! namespace, the two ways interleaved so that both see the same moments of the machine. The
//! measure behind docs/benchmarks/io-uring.md.
//!
//! Root. `cargo run --release -p hns-dataplane --example tap_io [FRAMES]`; prints ns per frame.
//! Writes: 64-byte frames to a MAC nobody has (the namespace's stack drops them on arrival),
//! 32 per flush. Reads: the stack's datagrams to a neighbour queued on the TAP, k at a time,
//! read until the queue is empty (k + 1 reads).

use std::net::UdpSocket;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use hns_dataplane::devices::Io;
use hns_dataplane::ring::Ring;
use host::netns::Netns;
use host::offload::VNET_HDR_LEN;
use host::tap::Tap;
use vfp::Frame;

const ROOM: usize = 65_536 + 256;

fn main() -> anyhow::Result<()> {
    let frames: usize = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|e| anyhow::anyhow!("FRAMES: {a:?} is not a count: {e}"))?,
        None => 200_000,
    };
    let name = format!("tapio-{}", std::process::id());
    let ns = Netns::create(&name)?;
    let res = measure(&ns, &name, frames);
    ns.delete()?;
    res
}

fn ip(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let st = Command::new("ip").arg("-n").arg(ns).args(args).status()?;
    anyhow::ensure!(st.success(), "ip -n {ns} {}: {st}", args.join(" "));
    Ok(())
}

fn measure(ns: &Netns, name: &str, count: usize) -> anyhow::Result<()> {
    let tap = ns.run(|| Tap::open("tio0"))?;
    ip(name, &["link", "set", "lo", "up"])?;
    // Only the frames sent here on the TAP: no router solicitations or MLD reports.
    let st = Command::new("ip")
        .args(["netns", "exec", name, "sysctl", "-qw"])
        .arg("net.ipv6.conf.tio0.disable_ipv6=1")
        .status()?;
    anyhow::ensure!(st.success(), "disable IPv6 on tio0: {st}");
    ip(name, &["link", "set", "tio0", "up"])?;
    ip(name, &["addr", "add", "10.9.0.1/24", "dev", "tio0"])?;
    ip(
        name,
        &[
            "neigh",
            "add",
            "10.9.0.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "tio0",
        ],
    )?;
    let sock = ns.run(|| {
        UdpSocket::bind("10.9.0.1:0").map_err(|e| host::HostError::io("bind in the namespace", e))
    })?;
    let io = Arc::new(Io::Tap(vec![tap]));
    let mut ring = Ring::new()?;

    let mut eth = [0u8; 64];
    eth[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x09]);
    eth[12] = 0x08;
    let out: Vec<Frame> = (0..32).map(|_| Frame::new(&eth)).collect();
    let hdr = [0u8; VNET_HDR_LEN];
    let mut inb: Vec<Frame> = (0..33).map(|_| Frame::new(&[])).collect();
    let batches = (count / 32).max(1);

    for round in 1..=3 {
        let t = Instant::now();
        for _ in 0..batches * 32 {
            let _ = io.send(0, &hdr, &eth);
        }
        let plain_w = per(t, batches * 32);
        let t = Instant::now();
        for _ in 0..batches {
            for i in 0..32 {
                ring.queue(Arc::clone(&io), 0, hdr, i, &out)?;
            }
            ring.flush(&out)?;
        }
        let ring_w = per(t, batches * 32);
        println!("round {round} write: writev {plain_w:.0} ns/frame, io_uring {ring_w:.0}");

        for k in [1usize, 4, 32] {
            let reps = (count / 100 / k).max(1);
            let (mut plain, mut uring) = (0u128, 0u128);
            for _ in 0..reps {
                fill(&sock, k)?;
                let t = Instant::now();
                let mut got = 0;
                loop {
                    let r = inb[0].read_with(VNET_HDR_LEN, ROOM, |b| io.recv(0, b));
                    if r.is_err() {
                        break;
                    }
                    got += 1;
                }
                plain += t.elapsed().as_nanos();
                anyhow::ensure!(got == k, "read() found {got} frames of {k}");
                fill(&sock, k)?;
                let t = Instant::now();
                let (got, dry) = ring.read(&io, 0, &mut inb[..k + 1], VNET_HDR_LEN, ROOM)?;
                uring += t.elapsed().as_nanos();
                anyhow::ensure!(got == k && dry, "io_uring found {got} frames of {k}");
            }
            let n = (reps * k) as f64;
            println!(
                "round {round} read {k:>2} queued: read() {:.0} ns/frame, io_uring {:.0}",
                plain as f64 / n,
                uring as f64 / n
            );
        }
    }
    Ok(())
}

/// Queues `k` datagrams on the TAP (the stack sends them to the neighbour out of it).
fn fill(sock: &UdpSocket, k: usize) -> anyhow::Result<()> {
    for _ in 0..k {
        sock.send_to(&[0u8; 18], "10.9.0.2:9")?;
    }
    Ok(())
}

fn per(t: Instant, n: usize) -> f64 {
    t.elapsed().as_nanos() as f64 / n as f64
}
