//! The packet loop: one thread per core (at most [`MAX_THREADS`]) waits on every device queue
//! with one epoll (a TAP has a queue per thread, and the pod's kernel spreads its flows over
//! them). A queue is armed one-shot, so one thread at a time serves it: the thread reads a
//! batch of frames from it, takes the data plane's lock only to run the batch through the
//! switch, writes the frames out of the devices the switch chose, and only then re-arms the
//! queue — frames of one queue (and so of one flow) keep their order, while the system calls
//! and copies (nearly all of a frame's cost) of different queues run on different cores. No
//! allocation per frame: each thread reuses its batch of frame buffers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use host::offload::{VNET_HDR_LEN, VnetHdr};
use nix::sys::epoll::{EpollEvent, EpollTimeout};
use vfp::{Disposition, Frame, PortId, Timestamp};

use crate::devices::{Io, WATCH};
use crate::offload;
use crate::{Inner, Shared, WAKE};

/// Frames read from one device before it is handed back to epoll (and another thread may take
/// it, or another device gets this thread's turn).
const BATCH: usize = 32;
/// Room for the largest frame a device hands over (a 64 KiB GSO segment and its headers).
const FRAME_ROOM: usize = 65_536 + 256;
/// How often idle flows are expired.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);
/// More threads than this gain nothing: they would only wait for the switch's lock.
pub(crate) const MAX_THREADS: usize = 4;

/// How many pump threads to run: one per core the process may use, at least one.
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_THREADS)
}

/// One thread's frames: the batch read from one device, with their virtio-net headers.
struct Batch {
    frames: Vec<Frame>,
    hdrs: Vec<VnetHdr>,
    /// (frame, device) pairs to write once the switch has decided, in order.
    sends: Vec<(usize, Arc<Io>)>,
}

/// Runs until the data plane stops. `first` is the thread that also expires idle flows.
pub(crate) fn run(shared: &Shared, started: Instant, first: bool) {
    let mut events = vec![EpollEvent::empty(); 8];
    let mut batch = Batch {
        frames: (0..BATCH).map(|_| Frame::new(&[])).collect(),
        hdrs: vec![VnetHdr::default(); BATCH],
        sends: Vec::with_capacity(BATCH),
    };
    let mut expired = Instant::now();
    while !shared.stopping() {
        let n = match shared.epoll.wait(&mut events, EpollTimeout::from(200u16)) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(e) => {
                tracing::error!("the packet loop stopped: epoll_wait: {e}");
                return;
            }
        };
        for ev in &events[..n] {
            // The wake-up eventfd is only written to stop, and stays readable so that every
            // thread sees it.
            if ev.data() != WAKE {
                serve(shared, ev.data(), &mut batch, started);
            }
        }
        if first && expired.elapsed() >= EXPIRE_EVERY {
            expired = Instant::now();
            let now = timestamp(started);
            if let Some(c) = shared.lock().compiler.as_mut() {
                c.switch_mut().expire(now);
            }
        }
    }
}

fn timestamp(started: Instant) -> Timestamp {
    Timestamp(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// Serves the device queue under `token`: reads a batch, switches it, writes it out, re-arms
/// the queue.
fn serve(shared: &Shared, token: u64, batch: &mut Batch, started: Instant) {
    let Some((io, from, q)) = shared
        .lock()
        .devices
        .by_token(token)
        .map(|(d, q)| (Arc::clone(&d.io), d.port, q))
    else {
        // Removed meanwhile: its registration went with it.
        return;
    };
    let n = read(&io, q, from, batch);
    if n > 0 {
        let (mtu, vxlan_port) = {
            let mut inner = shared.lock();
            switch(&mut inner, from, batch, n, timestamp(started))
        };
        for (i, to) in batch.sends.drain(..) {
            send(
                &to,
                q,
                &batch.hdrs[i],
                &mut batch.frames[i],
                mtu,
                vxlan_port,
            );
        }
    }
    // This thread still holds the device (`io`), so its descriptor cannot have been closed
    // and reused by another device: a failure here only means it was removed meanwhile.
    let _ = shared
        .epoll
        .modify(io.fd(q), &mut EpollEvent::new(WATCH, token));
}

/// Reads up to a batch of frames from queue `q` of `io`; returns how many.
fn read(io: &Io, q: usize, from: PortId, batch: &mut Batch) -> usize {
    let mut n = 0;
    while n < BATCH {
        match batch.frames[n].read_with(VNET_HDR_LEN, FRAME_ROOM, |b| io.recv(q, b)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(port = from, "device read failed: {e}");
                break;
            }
        }
        if batch.frames[n].is_empty() {
            continue;
        }
        batch.hdrs[n] = VnetHdr::parse(batch.frames[n].prefix(VNET_HDR_LEN)).unwrap_or_default();
        n += 1;
    }
    n
}

/// Runs the first `n` frames of the batch through the switch and notes where each goes.
/// Returns the uplink's MTU and the VXLAN port, which writing them needs.
fn switch(
    inner: &mut Inner,
    from: PortId,
    batch: &mut Batch,
    n: usize,
    now: Timestamp,
) -> (usize, u16) {
    let Inner {
        compiler,
        devices,
        uplink,
        ..
    } = inner;
    let mtu = uplink.mtu() as usize;
    let Some(compiler) = compiler.as_mut() else {
        return (mtu, 0);
    };
    let vxlan_port = compiler.switch().config().vxlan_port;
    let Batch { frames, sends, .. } = batch;
    for (i, frame) in frames.iter_mut().enumerate().take(n) {
        if tracing::enabled!(tracing::Level::TRACE) {
            let t = compiler.switch_mut().trace(from, frame.bytes(), now);
            tracing::trace!(port = from, "{t}");
        }
        let switch = compiler.switch_mut();
        let mut to_port = |to: PortId| {
            if let Some(d) = devices.by_port(to) {
                sends.push((i, Arc::clone(&d.io)));
            }
        };
        match switch.process(from, frame, now) {
            Disposition::Deliver(to) | Disposition::Uplink(to) | Disposition::Reply(to) => {
                to_port(to);
            }
            Disposition::Flood { from } => switch.flood_targets(from).for_each(to_port),
            Disposition::Drop(_) => {}
        }
    }
    (mtu, vxlan_port)
}

/// Writes `frame` out of `dev` (into its queue `q`: the queue number the frame was read from,
/// so that a flow stays on one queue both ways), finishing checksums and segmentation as that
/// device needs.
fn send(dev: &Io, q: usize, hdr: &VnetHdr, frame: &mut Frame, mtu: usize, vxlan_port: u16) {
    if dev.is_uplink() {
        let zero = [0u8; VNET_HDR_LEN];
        offload::to_uplink(hdr, frame.bytes_mut(), mtu, vxlan_port, &mut |b| {
            let _ = dev.send(q, &zero, b);
        });
    } else {
        let out = offload::for_tap(hdr, frame.bytes_mut(), vxlan_port);
        let _ = dev.send(q, &out, frame.bytes());
    }
}
