//! The packet loop: one thread waits on every device with epoll, reads a batch of frames from
//! each ready one, runs them through the switch and writes them out of the devices the switch
//! chose. No allocation per frame: one frame buffer is reused for every read.

use std::time::{Duration, Instant};

use host::offload::{VNET_HDR_LEN, VnetHdr};
use nix::sys::epoll::{EpollEvent, EpollTimeout};
use vfp::{Disposition, Frame, PortId, Timestamp};

use crate::devices::Devices;
use crate::offload;
use crate::{Inner, Shared, WAKE};

/// Frames read from one device before the next ready device gets its turn.
const BATCH: usize = 64;
/// Room for the largest frame a device hands over (a 64 KiB GSO segment and its headers).
const FRAME_ROOM: usize = 65_536 + 256;
/// How often idle flows are expired.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// Runs until the data plane stops.
pub(crate) fn run(shared: &Shared) {
    let mut events = vec![EpollEvent::empty(); 64];
    let mut frame = Frame::new(&[]);
    let start = Instant::now();
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
        let now = Timestamp(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
        let mut inner = shared.lock();
        for ev in &events[..n] {
            if ev.data() == WAKE {
                let _ = shared.wake.read();
                continue;
            }
            drain(&mut inner, ev.data(), &mut frame, now);
        }
        if expired.elapsed() >= EXPIRE_EVERY {
            expired = Instant::now();
            if let Some(c) = inner.compiler.as_mut() {
                c.switch_mut().expire(now);
            }
        }
    }
}

/// Reads up to a batch of frames from the device under `token` and forwards them.
fn drain(inner: &mut Inner, token: u64, frame: &mut Frame, now: Timestamp) {
    let Inner {
        compiler,
        devices,
        uplink,
        ..
    } = inner;
    let Some(compiler) = compiler.as_mut() else {
        return;
    };
    let Some(dev) = devices.by_token(token) else {
        return;
    };
    let from = dev.port;
    let vxlan_port = compiler.switch().config().vxlan_port;
    let mtu = uplink.mtu() as usize;
    for _ in 0..BATCH {
        match frame.read_with(VNET_HDR_LEN, FRAME_ROOM, |b| dev.io.recv(b)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!(port = from, "device read failed: {e}");
                return;
            }
        }
        if frame.is_empty() {
            continue;
        }
        let hdr = VnetHdr::parse(frame.prefix(VNET_HDR_LEN)).unwrap_or_default();
        if tracing::enabled!(tracing::Level::TRACE) {
            let t = compiler.switch_mut().trace(from, frame.bytes(), now);
            tracing::trace!(port = from, "{t}");
        }
        let switch = compiler.switch_mut();
        match switch.process(from, frame, now) {
            Disposition::Deliver(to) | Disposition::Uplink(to) | Disposition::Reply(to) => {
                send(devices, to, &hdr, frame, mtu, vxlan_port);
            }
            Disposition::Flood { from } => {
                let targets: Vec<PortId> = switch.flood_targets(from).collect();
                for to in targets {
                    send(devices, to, &hdr, frame, mtu, vxlan_port);
                }
            }
            Disposition::Drop(_) => {}
        }
    }
}

/// Writes `frame` out of port `to`'s device, finishing checksums and segmentation as that
/// device needs.
fn send(
    devices: &Devices,
    to: PortId,
    hdr: &VnetHdr,
    frame: &mut Frame,
    mtu: usize,
    vxlan_port: u16,
) {
    let Some(dev) = devices.by_port(to) else {
        return;
    };
    if dev.io.is_uplink() {
        let zero = [0u8; VNET_HDR_LEN];
        offload::to_uplink(hdr, frame.bytes_mut(), mtu, vxlan_port, &mut |b| {
            let _ = dev.io.send(&zero, b);
        });
    } else {
        let out = offload::for_tap(hdr, frame.bytes_mut(), vxlan_port);
        let _ = dev.io.send(&out, frame.bytes());
    }
}
