//! Frames captured where they cross ports of a bridge (a lab's fabric), to check what went on
//! the wire. A capture ends when the frames a test expects have been seen, not after a fixed
//! time: the test names what it waits for, and a deadline turns "never seen" into a failure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use host::netns::Netns;
use host::offload::VNET_HDR_LEN;
use host::packet_socket::PacketSocket;

/// Frames captured on ports of namespace `netns`, one reading thread per port, until stopped.
pub struct Capture {
    frames: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Capture {
    /// Starts capturing every frame crossing `ports` (devices of namespace `netns`). The
    /// sockets are bound before this returns: what happens next is captured.
    pub fn start(netns: &str, ports: &[&str]) -> Capture {
        let frames = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = ports
            .iter()
            .map(|port| {
                let sock = Netns::named(netns)
                    .run(|| PacketSocket::bind(port))
                    .unwrap_or_else(|e| panic!("capture on {port} in {netns}: {e}"));
                let (frames, stop) = (Arc::clone(&frames), Arc::clone(&stop));
                std::thread::spawn(move || read(&sock, &frames, &stop))
            })
            .collect();
        Capture {
            frames,
            stop,
            threads,
        }
    }

    /// Waits until the frames captured so far hold what `want` looks for, then stops and
    /// returns them all; fails the test naming `what` (and how many frames came) when that has
    /// not happened within `timeout`.
    #[track_caller]
    pub fn until(
        self,
        what: &str,
        timeout: Duration,
        want: impl Fn(&[Vec<u8>]) -> bool,
    ) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        loop {
            let (seen, count) = {
                let frames = lock(&self.frames);
                (want(&frames), frames.len())
            };
            if seen {
                return self.stop();
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what} on the wire ({count} frames captured)"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops capturing; every frame captured, in the order each port's thread read them.
    pub fn stop(mut self) -> Vec<Vec<u8>> {
        self.halt();
        std::mem::take(&mut *lock(&self.frames))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.halt();
    }
}

/// How long a stopped capture may go on reading the frames already queued on its socket.
const DRAIN: Duration = Duration::from_secs(1);

/// Reads frames (without their virtio-net header) from the non-blocking `sock` until `stop`,
/// then what is still queued (frames that crossed the port before the stop), for up to
/// [`DRAIN`].
fn read(sock: &PacketSocket, frames: &Mutex<Vec<Vec<u8>>>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 70_000];
    let mut drain_until = None;
    loop {
        if drain_until.is_none() && stop.load(Ordering::SeqCst) {
            drain_until = Some(Instant::now() + DRAIN);
        }
        match sock.recv(&mut buf) {
            Ok(n) if n > VNET_HDR_LEN => lock(frames).push(buf[VNET_HDR_LEN..n].to_vec()),
            Ok(_) => {}
            Err(_) if drain_until.is_some() => return,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
        if drain_until.is_some_and(|t| Instant::now() >= t) {
            return;
        }
    }
}

fn lock(frames: &Mutex<Vec<Vec<u8>>>) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
    // A reader that panicked left whole frames; they are still worth looking at.
    frames.lock().unwrap_or_else(|p| p.into_inner())
}
