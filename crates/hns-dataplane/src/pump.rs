//! The packet loop: one thread per core (at most [`MAX_THREADS`]) waits on every device queue
//! with one epoll (a TAP has a queue per thread, and the pod's kernel spreads its flows over
//! them). A queue is armed one-shot, so one thread at a time serves it: the thread reads a
//! batch of frames from it, takes the data plane's lock only to run the batch through the
//! switch, writes the frames out of the devices the switch chose, and only then re-arms the
//! queue — frames of one queue (and so of one flow) keep their order, while the system calls
//! and copies (nearly all of a frame's cost) of different queues run on different cores. No
//! allocation per frame: each thread reuses its batch of frame buffers.
//!
//! With io_uring (`Config::io_uring`, and a kernel that allows it) a thread reads a busy TAP
//! queue's frames past the first two, and writes a batch of two or more frames to TAPs, with
//! one system call per round ([`crate::ring`]); otherwise (a queue's first frames, a lone
//! frame, the uplink's socket, no ring) a `read()` and a `writev()` per frame.

use std::sync::Arc;
use std::time::{Duration, Instant};

use host::offload::{VNET_HDR_LEN, VnetHdr};
use nix::sys::epoll::{EpollEvent, EpollTimeout};
use vfp::{Disposition, Frame, PortId, Timestamp};

use crate::devices::{Io, WATCH};
use crate::offload;
use crate::ring::Ring;
use crate::{Inner, Shared, WAKE};

/// Frames read from one device before it is handed back to epoll (and another thread may take
/// it, or another device gets this thread's turn).
const BATCH: usize = 32;
/// Room for the largest frame a device hands over (a 64 KiB GSO segment and its headers).
const FRAME_ROOM: usize = 65_536 + 256;
/// Frames read with `read()` before the rest of a queue's batch is read through the ring.
const PLAIN_FIRST: usize = 2;
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
    /// How many reads to ask io_uring for first: one more than it read for the last batch, so
    /// that a busy queue costs a round or two.
    reads: usize,
}

impl Batch {
    /// Keeps frame `i`'s virtio-net header, read in front of it.
    fn take_header(&mut self, i: usize) {
        self.hdrs[i] = VnetHdr::parse(self.frames[i].prefix(VNET_HDR_LEN)).unwrap_or_default();
    }
}

/// Runs until the data plane stops. `first` is the thread that also expires idle flows.
pub(crate) fn run(shared: &Shared, started: Instant, first: bool) {
    let mut events = vec![EpollEvent::empty(); 8];
    let mut batch = Batch {
        frames: (0..BATCH).map(|_| Frame::new(&[])).collect(),
        hdrs: vec![VnetHdr::default(); BATCH],
        sends: Vec::with_capacity(BATCH),
        reads: 1,
    };
    let mut ring = setup_ring(shared.io_uring, first);
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
                serve(shared, ev.data(), &mut batch, &mut ring, started);
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

/// The thread's ring, when asked for and the kernel allows it; the first thread says which
/// way the pump goes.
fn setup_ring(wanted: bool, first: bool) -> Option<Ring> {
    if !wanted {
        if first {
            tracing::info!("the pump reads and writes a frame per system call (io_uring off)");
        }
        return None;
    }
    match Ring::new() {
        Ok(r) => {
            if first {
                tracing::info!("the pump batches its TAP reads and writes with io_uring");
            }
            Some(r)
        }
        Err(e) => {
            if first {
                tracing::warn!(
                    "io_uring is not available ({e}): the pump reads and writes a frame per \
                     system call"
                );
            }
            None
        }
    }
}

/// Gives up the thread's ring after it failed: the thread goes on with plain calls.
fn ring_failed(ring: &mut Option<Ring>, e: &std::io::Error) {
    tracing::warn!(
        "io_uring failed ({e}): this pump thread reads and writes a frame per system call from now on"
    );
    *ring = None;
}

fn timestamp(started: Instant) -> Timestamp {
    Timestamp(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// Serves the device queue under `token`: reads a batch, switches it, writes it out, re-arms
/// the queue.
fn serve(
    shared: &Shared,
    token: u64,
    batch: &mut Batch,
    ring: &mut Option<Ring>,
    started: Instant,
) {
    let Some((io, from, q)) = shared
        .lock()
        .devices
        .by_token(token)
        .map(|(d, q)| (Arc::clone(&d.io), d.port, q))
    else {
        // Removed meanwhile: its registration went with it.
        return;
    };
    let n = read(&io, q, from, batch, ring);
    if n > 0 {
        let (mtu, vxlan_port) = {
            let mut inner = shared.lock();
            switch(&mut inner, from, batch, n, timestamp(started))
        };
        write(batch, q, mtu, vxlan_port, ring);
    }
    // This thread still holds the device (`io`), so its descriptor cannot have been closed
    // and reused by another device: a failure here only means it was removed meanwhile.
    let _ = shared
        .epoll
        .modify(io.fd(q), &mut EpollEvent::new(WATCH, token));
}

/// Reads up to a batch of frames from queue `q` of `io`; returns how many.
fn read(io: &Io, q: usize, from: PortId, batch: &mut Batch, ring: &mut Option<Ring>) -> usize {
    let tap_ring = ring.is_some() && !io.is_uplink();
    // With a ring the first frames still come by read(): a call through io_uring costs more
    // than a read() (the tap_io example), so a queue with a frame or two waiting (requests
    // and answers) costs what it did without one, and only a busier queue goes on through it.
    let first = if tap_ring { PLAIN_FIRST } else { BATCH };
    let (n, dry) = read_plain(io, q, from, batch, 0, first);
    if dry || n == BATCH {
        return n;
    }
    if tap_ring && let Some(r) = ring.as_mut() {
        match read_ring(r, io, q, batch, n) {
            Ok(n) => return n,
            Err(e) => ring_failed(ring, &e),
        }
    }
    read_plain(io, q, from, batch, n, BATCH).0
}

/// Reads frames from queue `q` of `io` into the batch from frame `n` on, one `read()` each,
/// until it holds `limit`; returns how many the batch holds and whether the queue ran dry.
fn read_plain(
    io: &Io,
    q: usize,
    from: PortId,
    batch: &mut Batch,
    mut n: usize,
    limit: usize,
) -> (usize, bool) {
    while n < limit {
        match batch.frames[n].read_with(VNET_HDR_LEN, FRAME_ROOM, |b| io.recv(q, b)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return (n, true),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(port = from, "device read failed: {e}");
                return (n, true);
            }
        }
        if batch.frames[n].is_empty() {
            continue;
        }
        batch.take_header(n);
        n += 1;
    }
    (n, false)
}

/// Reads more frames (the batch holds `n`) from the TAP queue `q` of `io` with io_uring, in
/// rounds (one system call each) until a read finds the queue empty; returns how many the
/// batch holds.
fn read_ring(
    ring: &mut Ring,
    io: &Io,
    q: usize,
    batch: &mut Batch,
    start: usize,
) -> std::io::Result<usize> {
    let mut n = start;
    let mut want = batch.reads;
    while n < BATCH {
        let end = (n + want).min(BATCH);
        let (got, dry) = ring.read(io, q, &mut batch.frames[n..end], VNET_HDR_LEN, FRAME_ROOM)?;
        for i in n..n + got {
            batch.take_header(i);
        }
        n += got;
        if dry {
            break;
        }
        want *= 2;
    }
    batch.reads = (n - start + 1).min(BATCH);
    Ok(n)
}

/// Writes the frames the switch sent somewhere: to TAPs through the ring (one system call
/// for the batch) when there is one and more than one frame to write, else (and to the
/// uplink) one call per frame. A frame the ring has queued is written before any later frame
/// goes out another way, so that every device sees its frames in the order the switch sent
/// them.
fn write(batch: &mut Batch, q: usize, mtu: usize, vxlan_port: u16, ring: &mut Option<Ring>) {
    let Batch {
        frames,
        hdrs,
        sends,
        ..
    } = batch;
    // One frame: a writev() costs less than a call through io_uring.
    let batched = sends.len() > 1;
    for (i, to) in sends.drain(..) {
        if batched && let Some(r) = ring.as_mut() {
            if !to.is_uplink() {
                let out = offload::for_tap(&hdrs[i], frames[i].bytes_mut(), vxlan_port);
                if let Err(e) = r.queue(to, q, out, i, frames) {
                    ring_failed(ring, &e);
                }
                continue;
            }
            // The uplink's segmentation rewrites the frame in place, which a queued write
            // of the same frame (a flood) must not see.
            if r.pending()
                && let Err(e) = r.flush(frames)
            {
                ring_failed(ring, &e);
            }
        }
        send(&to, q, &hdrs[i], &mut frames[i], mtu, vxlan_port);
    }
    if batched
        && let Some(r) = ring.as_mut()
        && let Err(e) = r.flush(frames)
    {
        ring_failed(ring, &e);
    }
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
