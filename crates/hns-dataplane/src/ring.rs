//! A pump thread's io_uring: the frames of a batch are read from a TAP queue, and written to
//! TAPs, with one `io_uring_enter` per round instead of a `read()` or `writev()` per frame.
//!
//! Every request carries `RWF_NOWAIT`, so the kernel carries it out while `io_uring_enter`
//! runs, in the order the requests were queued, or fails it with `EAGAIN`: a TAP supports
//! no-wait I/O, and without the flag io_uring would park a read of an empty queue on the
//! TAP's poll (to complete with a later frame) instead of failing it. So a queue's frames keep
//! their order, and once a call here returns no request is left in the kernel's hands — which
//! is what makes lending it the batch's buffers sound.

use std::convert::Infallible;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use host::offload::VNET_HDR_LEN;
use io_uring::{IoUring, opcode, types};
use vfp::Frame;

use crate::devices::Io;

/// Requests in flight at most: a batch of reads, or this many writes before they are flushed.
const ENTRIES: u32 = 64;

/// One thread's ring and the writes queued on it. After an error the ring is left as it is
/// (requests may still be queued in it, their buffers gone): drop it and use the plain calls.
pub struct Ring {
    ring: IoUring,
    /// Writes waiting for [`Ring::flush`], in the order they must happen.
    writes: Vec<Write>,
    /// The iovecs of the writes being submitted (header, frame): the kernel reads them while
    /// it carries out the requests, so they live here, not on the stack of the loop that
    /// queues the requests.
    iovecs: Vec<[libc::iovec; 2]>,
    /// Each read's buffer while it is submitted.
    bufs: Vec<(*mut u8, usize)>,
    results: Vec<i32>,
}

/// A frame of the batch to write out of a TAP queue.
struct Write {
    /// Held until the write is done, so that the queue's descriptor cannot be closed (the
    /// device removed by another thread) and its number reused meanwhile.
    to: Arc<Io>,
    q: usize,
    hdr: [u8; VNET_HDR_LEN],
    frame: usize,
}

impl Ring {
    /// Sets up a ring, or says why there is none (an old kernel, `kernel.io_uring_disabled`,
    /// a seccomp filter).
    pub fn new() -> io::Result<Ring> {
        // One thread submits to and reaps from the ring: the kernel can skip its locking.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .build(ENTRIES)
            .or_else(|_| IoUring::new(ENTRIES))?;
        Ok(Ring {
            ring,
            writes: Vec::with_capacity(ENTRIES as usize),
            iovecs: Vec::with_capacity(ENTRIES as usize),
            bufs: Vec::with_capacity(ENTRIES as usize),
            results: Vec::with_capacity(ENTRIES as usize),
        })
    }

    /// Reads up to `frames.len()` frames (at most [`ENTRIES`]) from queue `q` of the TAP `io`
    /// in one system call, each behind `prefix` bytes of device header with room for
    /// `capacity` bytes, as [`Frame::read_with`] reads one. The frames read are moved to the
    /// front, in the order the queue gave them; returns how many, and whether the queue ran
    /// dry (a read found no frame). An error means the ring cannot be used (nothing was read).
    pub fn read(
        &mut self,
        io: &Io,
        q: usize,
        frames: &mut [Frame],
        prefix: usize,
        capacity: usize,
    ) -> io::Result<(usize, bool)> {
        let want = frames.len().min(ENTRIES as usize);
        let fd = types::Fd(io.fd(q).as_raw_fd());
        self.bufs.clear();
        for frame in &mut frames[..want] {
            // Sizes the frame's buffer and takes where a read would go, reading nothing: the
            // frame is not touched again until the kernel has filled it (below).
            let Ok(()) = frame.read_with(prefix, capacity, |b| {
                self.bufs.push((b.as_mut_ptr(), b.len()));
                Ok::<usize, Infallible>(0)
            });
        }
        for (i, &(ptr, len)) in self.bufs.iter().enumerate() {
            let read = opcode::Read::new(fd, ptr, u32::try_from(len).unwrap_or(u32::MAX))
                .rw_flags(libc::RWF_NOWAIT)
                .build()
                .user_data(i as u64);
            // SAFETY: the buffer is the frame's own (`frames` is borrowed mutably for this
            // whole call, and nothing else touches these frames until `complete` returns), of
            // `len` writable bytes; `fd` is a queue of `io`, which the caller holds. The
            // request carries RWF_NOWAIT, so it is done (or failed) before `complete` returns
            // (see the module's comment), and `complete` waits for every completion.
            if unsafe { self.ring.submission().push(&read) }.is_err() {
                // Cannot happen: a call queues at most ENTRIES requests and submits them all.
                return Err(io::Error::other("the io_uring submission queue is full"));
            }
        }
        self.complete(want)?;
        let mut got = 0;
        let mut dry = false;
        for i in 0..want {
            let r = self.results[i];
            if r == -libc::EAGAIN {
                dry = true;
                continue;
            }
            if r < 0 {
                let e = io::Error::from_raw_os_error(-r);
                if matches!(r.abs(), libc::EOPNOTSUPP | libc::EINVAL | libc::EBADF) && got == 0 {
                    // This kernel cannot read the TAP this way (no RWF_NOWAIT for it).
                    return Err(e);
                }
                tracing::debug!("device read failed: {e}");
                dry = true;
                continue;
            }
            let n = r as usize;
            let Ok(()) = frames[i].read_with(prefix, capacity, |_| Ok::<usize, Infallible>(n));
            if frames[i].is_empty() {
                continue;
            }
            frames.swap(got, i);
            got += 1;
        }
        Ok((got, dry))
    }

    /// Queues `frames[frame]` behind the virtio-net header `hdr` to be written into queue `q`
    /// of the TAP `to` by the next [`Ring::flush`]. Flushes first when the ring is full.
    pub fn queue(
        &mut self,
        to: Arc<Io>,
        q: usize,
        hdr: [u8; VNET_HDR_LEN],
        frame: usize,
        frames: &[Frame],
    ) -> io::Result<()> {
        if self.writes.len() == ENTRIES as usize {
            self.flush(frames)?;
        }
        self.writes.push(Write { to, q, hdr, frame });
        Ok(())
    }

    /// True when writes wait for [`Ring::flush`].
    pub fn pending(&self) -> bool {
        !self.writes.is_empty()
    }

    /// Writes the queued frames, in the order queued, with one system call. A write the
    /// device refuses is lost, as with `writev()` (a full or downed TAP drops the frame); an
    /// error means the ring cannot be used, and the queued frames were not written.
    pub fn flush(&mut self, frames: &[Frame]) -> io::Result<()> {
        let n = self.writes.len();
        if n == 0 {
            return Ok(());
        }
        self.iovecs.clear();
        for w in &self.writes {
            let bytes = frames.get(w.frame).map_or(&[][..], Frame::bytes);
            self.iovecs.push([
                libc::iovec {
                    iov_base: w.hdr.as_ptr().cast_mut().cast(),
                    iov_len: w.hdr.len(),
                },
                libc::iovec {
                    iov_base: bytes.as_ptr().cast_mut().cast(),
                    iov_len: bytes.len(),
                },
            ]);
        }
        for (i, (w, iov)) in self.writes.iter().zip(&self.iovecs).enumerate() {
            let fd = types::Fd(w.to.fd(w.q).as_raw_fd());
            let write = opcode::Writev::new(fd, iov.as_ptr(), 2)
                .rw_flags(libc::RWF_NOWAIT)
                .build()
                .user_data(i as u64);
            // SAFETY: the iovecs live in `self.iovecs` and point at the header in
            // `self.writes` and at a frame of `frames`, borrowed for this whole call; none of
            // them moves or changes until `complete` returns, and the kernel only reads them.
            // `fd` is a queue of `w.to`, which `self.writes` holds until then. The request
            // carries RWF_NOWAIT, so it is done (or failed) before `complete` returns.
            if unsafe { self.ring.submission().push(&write) }.is_err() {
                self.writes.clear();
                return Err(io::Error::other("the io_uring submission queue is full"));
            }
        }
        let done = self.complete(n);
        self.writes.clear();
        done?;
        for &r in &self.results {
            if r < 0 {
                let e = io::Error::from_raw_os_error(-r);
                if matches!(-r, libc::EOPNOTSUPP | libc::EINVAL | libc::EBADF) {
                    return Err(e);
                }
                tracing::debug!("device write failed: {e}");
            }
        }
        Ok(())
    }

    /// Submits what was queued and waits until all `n` requests have completed; their
    /// results, in the order queued, are in `self.results`.
    fn complete(&mut self, n: usize) -> io::Result<()> {
        self.results.clear();
        self.results.resize(n, -libc::ECANCELED);
        let mut seen = 0;
        while seen < n {
            match self.ring.submit_and_wait(n - seen) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for cqe in self.ring.completion() {
                if let Some(r) = usize::try_from(cqe.user_data())
                    .ok()
                    .and_then(|i| self.results.get_mut(i))
                {
                    *r = cqe.result();
                }
                seen += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Root: a TAP in a namespace of the test's own, frames of the namespace's stack read
    //! through the ring and frames written through it to the stack, in order both ways.

    use std::net::UdpSocket;
    use std::process::Command;
    use std::time::Duration;

    use host::netns::Netns;
    use host::tap::Tap;

    use super::*;

    const TAP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    const FRAMES: usize = 40;

    /// The test's namespace, deleted (with the TAP) when the test ends, passed or failed.
    struct TestNs(Netns, String);

    impl TestNs {
        fn new(tag: &str) -> TestNs {
            testkit::require_root("this test makes a network namespace and a TAP");
            let name = format!("dptest-{}-{tag}", std::process::id());
            let _ = Netns::named(&name).delete();
            let ns = Netns::create(&name).unwrap_or_else(|e| panic!("create {name}: {e}"));
            TestNs(ns, name)
        }

        fn ip(&self, args: &[&str]) {
            testkit::cmd::ok(Command::new("ip").arg("-n").arg(&self.1).args(args));
        }
    }

    impl Drop for TestNs {
        fn drop(&mut self) {
            if let Err(e) = self.0.delete() {
                eprintln!("cleanup: cannot delete namespace {}: {e}", self.1);
            }
        }
    }

    /// An Ethernet frame with an IPv4 UDP datagram from 10.9.0.2:40000 to `dst` (UDP
    /// checksum 0: none).
    fn udp_frame(dst_mac: [u8; 6], dst: [u8; 4], port: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&dst_mac);
        f.extend_from_slice(&PEER_MAC);
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 8 + payload.len()) as u16;
        let mut ip = vec![0x45, 0];
        ip.extend_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0, 10, 9, 0, 2]);
        ip.extend_from_slice(&dst);
        let mut sum: u32 = ip
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&40000u16.to_be_bytes());
        f.extend_from_slice(&port.to_be_bytes());
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    /// The UDP payload of `frame` if it is a datagram to 10.9.0.2 port 7777.
    fn payload_to_peer(frame: &[u8]) -> Option<&[u8]> {
        let ip = frame.get(14..34)?;
        let udp = frame.get(34..42)?;
        (frame.get(12..14)? == [0x08, 0x00]
            && ip[9] == 17
            && ip[16..20] == [10, 9, 0, 2]
            && udp[2..4] == 7777u16.to_be_bytes())
        .then(|| &frame[42..])
    }

    #[test]
    fn a_queue_s_frames_go_through_the_ring_in_order_both_ways() {
        let t = TestNs::new("ring");
        t.ip(&["link", "set", "lo", "up"]);
        let tap = t.0.run(|| Tap::open("rt0")).expect("open the TAP");
        // No IPv6 on the TAP: brought up with it, the kernel sends its own frames (MLD reports,
        // router solicitations) into the queue that the test reads as empty.
        t.0.run(|| host::sysctl::set_sysctl("net.ipv6.conf.rt0.disable_ipv6", "1"))
            .expect("IPv6 off on the TAP");
        t.ip(&["link", "set", "rt0", "address", "02:00:00:00:00:01", "up"]);
        t.ip(&["addr", "add", "10.9.0.1/24", "dev", "rt0"]);
        t.ip(&[
            "neigh",
            "add",
            "10.9.0.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "rt0",
            "nud",
            "permanent",
        ]);
        let (tx, rx) =
            t.0.run(|| {
                let io = |e| host::HostError::io("bind a UDP socket in the namespace", e);
                let tx = UdpSocket::bind("10.9.0.1:0").map_err(io)?;
                let rx = UdpSocket::bind("10.9.0.1:7778").map_err(io)?;
                Ok((tx, rx))
            })
            .expect("sockets in the namespace");
        let io = Arc::new(Io::Tap(vec![tap]));
        let mut ring = Ring::new().expect("io_uring on this kernel");
        let mut frames: Vec<Frame> = (0..8).map(|_| Frame::new(&[])).collect();

        // An empty queue: the reads fail at once with EAGAIN instead of waiting for a frame.
        let (got, dry) = ring
            .read(&io, 0, &mut frames, VNET_HDR_LEN, 2048)
            .expect("read an empty queue");
        assert_eq!(
            (got, dry),
            (0, true),
            "an empty TAP queue read through the ring"
        );

        // The stack's datagrams to the peer leave by the TAP, numbered; the ring reads them
        // eight at a time and must see them in the order sent.
        for i in 0..FRAMES as u32 {
            tx.send_to(&i.to_be_bytes(), "10.9.0.2:7777")
                .expect("send to the peer");
        }
        let mut seen: Vec<u32> = Vec::new();
        testkit::wait::until(
            "every datagram read through the ring",
            Duration::from_secs(5),
            || {
                let (got, _) = ring
                    .read(&io, 0, &mut frames, VNET_HDR_LEN, 2048)
                    .expect("read the TAP");
                for f in &frames[..got] {
                    assert_eq!(
                        f.prefix(VNET_HDR_LEN).len(),
                        VNET_HDR_LEN,
                        "the virtio-net header"
                    );
                    if let Some(p) = payload_to_peer(f.bytes()) {
                        seen.push(u32::from_be_bytes(p.try_into().expect("a 4-byte number")));
                    }
                }
                seen.len() >= FRAMES
            },
        );
        assert_eq!(
            seen,
            (0..FRAMES as u32).collect::<Vec<_>>(),
            "the order read"
        );

        // Written: numbered datagrams to the stack's socket, queued together (more than a
        // ring's worth, so a flush happens on the way) and written by flushes.
        let count = ENTRIES as usize + 16;
        let out: Vec<Frame> = (0..count as u32)
            .map(|i| Frame::new(&udp_frame(TAP_MAC, [10, 9, 0, 1], 7778, &i.to_be_bytes())))
            .collect();
        for i in 0..count {
            ring.queue(Arc::clone(&io), 0, [0; VNET_HDR_LEN], i, &out)
                .expect("queue a write");
        }
        assert!(ring.pending());
        ring.flush(&out).expect("write the frames");
        assert!(!ring.pending());
        rx.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("a read timeout");
        let mut buf = [0u8; 16];
        for want in 0..count as u32 {
            let n = rx
                .recv(&mut buf)
                .expect("a datagram written through the ring");
            assert_eq!(&buf[..n], want.to_be_bytes(), "datagram {want} in order");
        }
    }
}
