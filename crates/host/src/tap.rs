//! A TAP device: the Linux form of a vNIC. The switch reads the frames the namespace's stack
//! sends through it and writes the frames the namespace should receive.
//!
//! The TAP is opened with a virtio-net header ([`crate::offload::VNET_HDR_LEN`] bytes before
//! every frame) and with TCP offloads on, so the kernel hands over TCP segments of up to ~64 KB
//! with partial checksums and accepts such segments back.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::HostError;
use crate::frame_fd;
use crate::netlink::check_link_name;
use crate::offload::VNET_HDR_LEN;

const TUN_PATH: &str = "/dev/net/tun";

/// `struct ifreq` as `TUNSETIFF` reads it: the name, then the flags at the start of the union.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    /// The rest of the 24-byte union (and more, so no architecture reads past the end).
    _pad: [u8; 30],
}

/// A TAP device opened in the calling thread's network namespace, owning its file descriptor.
/// Closing it (dropping the `Tap`) removes the device unless it was made persistent.
#[derive(Debug)]
pub struct Tap {
    fd: OwnedFd,
    name: String,
}

impl Tap {
    /// Creates the TAP `name`, or attaches to it if it exists already (a persistent TAP left by
    /// an earlier run), with a virtio-net header, TCP offloads and non-blocking I/O.
    pub fn open(name: &str) -> Result<Tap, HostError> {
        Tap::open_flags(name, 0)
    }

    /// Opens `queues` queues of the multiqueue TAP `name` (made if missing), each a file
    /// descriptor of its own as [`Tap::open`] makes it: the kernel spreads the flows the
    /// namespace sends over the queues, so that several threads can read one vNIC. A TAP left
    /// single-queue by an earlier run is adopted as it is (one queue).
    pub fn open_queues(name: &str, queues: usize) -> Result<Vec<Tap>, HostError> {
        if queues <= 1 {
            return Ok(vec![Tap::open(name)?]);
        }
        let first = match Tap::open_flags(name, libc::IFF_MULTI_QUEUE) {
            Ok(t) => t,
            Err(HostError::Io { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
                return Ok(vec![Tap::open(name)?]);
            }
            Err(e) => return Err(e),
        };
        let mut all = vec![first];
        for _ in 1..queues {
            all.push(Tap::open_flags(name, libc::IFF_MULTI_QUEUE)?);
        }
        Ok(all)
    }

    fn open_flags(name: &str, extra: libc::c_int) -> Result<Tap, HostError> {
        check_link_name(name)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(TUN_PATH)
            .map_err(|e| {
                let hint = if e.kind() == io::ErrorKind::NotFound {
                    " (load the tun module, or create the node: mknod /dev/net/tun c 10 200)"
                } else {
                    ""
                };
                HostError::io(format!("open {TUN_PATH} for TAP {name}{hint}"), e)
            })?;
        let fd = OwnedFd::from(file);
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR | extra) as libc::c_short,
            _pad: [0; 30],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes a `struct ifreq`; `req` is a live, properly laid out
        // `#[repr(C)]` ifreq at least as large as the kernel's, and `fd` is open.
        let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if ret < 0 {
            return Err(setiff_error(name, io::Error::last_os_error()));
        }
        let len = req
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(req.name.len());
        let name = String::from_utf8_lossy(&req.name[..len]).into_owned();

        let hdr_len = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one `int` through the pointer, which points at a live
        // local; `fd` is open.
        let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &hdr_len) };
        if ret < 0 {
            return Err(HostError::last_os(format!(
                "set the virtio-net header size of TAP {name} to {VNET_HDR_LEN} bytes"
            )));
        }
        let offloads = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
        // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned long of TUN_F_* flags),
        // so no memory is passed; `fd` is open.
        let ret = unsafe {
            libc::ioctl(
                fd.as_raw_fd(),
                libc::TUNSETOFFLOAD,
                libc::c_ulong::from(offloads),
            )
        };
        if ret < 0 {
            return Err(HostError::last_os(format!(
                "enable checksum and TCP segmentation offloads on TAP {name}"
            )));
        }
        Ok(Tap { fd, name })
    }

    /// Makes the device outlive this file descriptor (`on`), or go away when it is closed.
    pub fn set_persist(&self, on: bool) -> Result<(), HostError> {
        // SAFETY: TUNSETPERSIST takes its argument by value (0 or 1), so no memory is passed;
        // `self.fd` is open.
        let ret = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::TUNSETPERSIST,
                libc::c_ulong::from(on),
            )
        };
        if ret < 0 {
            let what = if on { "make" } else { "stop making" };
            return Err(HostError::last_os(format!(
                "{what} TAP {} persistent",
                self.name
            )));
        }
        Ok(())
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one frame, starting with its virtio-net header; `WouldBlock` when none is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        frame_fd::recv(self.fd.as_fd(), buf)
    }

    /// Writes one frame, `buf` starting with its virtio-net header.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        frame_fd::send(self.fd.as_fd(), buf)
    }

    /// Writes the virtio-net header `hdr` and the Ethernet frame `frame` as one frame.
    pub fn send_vectored(&self, hdr: &[u8], frame: &[u8]) -> io::Result<usize> {
        frame_fd::send_vectored(self.fd.as_fd(), hdr, frame)
    }
}

/// The error for a refused `TUNSETIFF`, with what each errno means for a TAP.
fn setiff_error(name: &str, e: io::Error) -> HostError {
    let op = match e.raw_os_error() {
        Some(libc::EBUSY) => format!(
            "attach TAP {name}: another file descriptor holds it (is another hnsd, or a VM, using it?)"
        ),
        Some(libc::EPERM) => {
            format!("create or attach TAP {name}: this needs CAP_NET_ADMIN (or to own the TAP)")
        }
        Some(libc::EINVAL) => format!(
            "create or attach TAP {name}: a device of that name exists and is not a single-queue \
             TAP (delete it with `ip link del {name}`)"
        ),
        _ => format!("create or attach TAP {name}"),
    };
    HostError::io(op, e)
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Tap {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
