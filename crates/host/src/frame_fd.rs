//! Frame I/O shared by TAPs and packet sockets: each read returns one frame, each write sends
//! one, and a virtio-net header and a frame can be written together without copying them into
//! one buffer. The descriptors are non-blocking, so "no frame now" is
//! [`std::io::ErrorKind::WouldBlock`].

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Turns a `-1` return into the thread's `errno`.
fn check(ret: isize) -> io::Result<usize> {
    usize::try_from(ret).map_err(|_| io::Error::last_os_error())
}

/// Retries `f` while it is interrupted by a signal.
fn retry(mut f: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        match check(f()) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Reads one frame into `buf`; a longer frame is cut to `buf.len()`.
pub(crate) fn recv(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, writable region of `buf.len()` bytes for the whole call, and
    // `fd` is an open descriptor borrowed for the call.
    retry(|| unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

/// Writes `buf` as one frame.
pub(crate) fn send(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, readable region of `buf.len()` bytes for the whole call, and
    // `fd` is an open descriptor borrowed for the call.
    retry(|| unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) })
}

/// Writes `hdr` followed by `frame` as one frame.
pub(crate) fn send_vectored(fd: BorrowedFd<'_>, hdr: &[u8], frame: &[u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec {
            iov_base: hdr.as_ptr().cast_mut().cast(),
            iov_len: hdr.len(),
        },
        libc::iovec {
            iov_base: frame.as_ptr().cast_mut().cast(),
            iov_len: frame.len(),
        },
    ];
    // SAFETY: both iovecs point into slices that live for the whole call and that the kernel
    // only reads (writev never writes through iov_base); `fd` is open for the call.
    retry(|| unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) })
}
