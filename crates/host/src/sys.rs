//! The few raw socket calls the crate makes, each checked once here.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `socket(2)`, owning the result.
pub(crate) fn socket(
    domain: libc::c_int,
    kind: libc::c_int,
    protocol: libc::c_int,
) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; the result is checked before use.
    let raw = unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor just opened and owned nowhere else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// `setsockopt(2)` with a value of any plain type.
pub(crate) fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points at a live `T` of `size_of::<T>()` bytes, which the kernel only
    // reads; `fd` is open.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
