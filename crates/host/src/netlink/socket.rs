//! The rtnetlink socket and its exchanges: send one request, read its answers until the
//! acknowledgement or the end of the dump. What the requests mean is in the
//! modules beside this one.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;

use super::wire::{self as nlmsg, Request, WireError};
use crate::HostError;
use crate::sys;

/// How long to wait for the kernel's answer before giving up on a request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a dump that the kernel marks inconsistent (the table changed while it was
/// being read) is read again.
const DUMP_TRIES: usize = 5;

/// Why an exchange failed, before it is given the words of an operation.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The kernel refused the request.
    Kernel { errno: i32, message: Option<String> },
    /// The socket failed.
    Io(io::Error),
    /// The answer could not be read.
    Malformed(WireError),
}

impl Failure {
    /// The errno of a kernel refusal.
    pub(crate) fn errno(&self) -> Option<i32> {
        match self {
            Failure::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The error for operation `op` ("add address 10.0.0.2/24 on eth0").
    pub(crate) fn into_host(self, op: String) -> HostError {
        match self {
            Failure::Kernel { errno, message } => {
                let text = Errno::from_raw(errno).desc();
                let message = match message {
                    Some(m) => format!("{text} (kernel: {m})"),
                    None => text.to_string(),
                };
                HostError::Netlink { op, message }
            }
            Failure::Io(source) => HostError::Io {
                op: format!("netlink: {op}"),
                source,
            },
            Failure::Malformed(e) => HostError::Netlink {
                op,
                message: format!("unreadable answer from the kernel: {e}"),
            },
        }
    }
}

impl From<WireError> for Failure {
    fn from(e: WireError) -> Failure {
        Failure::Malformed(e)
    }
}

/// A `NETLINK_ROUTE` socket, bound to the network namespace of the thread that opened it.
#[derive(Debug)]
pub(crate) struct Socket {
    fd: OwnedFd,
    port: u32,
    seq: u32,
    buf: Vec<u8>,
}

impl Socket {
    /// Opens a socket in the calling thread's network namespace.
    pub(crate) fn open() -> Result<Socket, HostError> {
        let op = |what: &str| format!("open a NETLINK_ROUTE socket ({what})");
        let fd = sys::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
        .map_err(|e| HostError::io(op("socket"), e))?;
        // Extended acks give the kernel's reason in words; capped acks keep errors short.
        // Both are best effort: kernels without them still answer with an errno.
        let _ = sys::setsockopt(&fd, libc::SOL_NETLINK, libc::NETLINK_EXT_ACK, &1);
        let _ = sys::setsockopt(&fd, libc::SOL_NETLINK, libc::NETLINK_CAP_ACK, &1);
        let timeout = libc::timeval {
            tv_sec: ANSWER_TIMEOUT.as_secs() as libc::time_t,
            tv_usec: 0,
        };
        sys::setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout)
            .map_err(|e| HostError::io(op("SO_RCVTIMEO"), e))?;
        // SAFETY: sockaddr_nl is plain old data; all-zero is a valid value (port 0: the
        // kernel picks one).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let mut len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: `addr` is a live sockaddr_nl and `len` its size; bind only reads it.
        if unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) } < 0 {
            return Err(HostError::last_os(op("bind")));
        }
        // SAFETY: `addr` and `len` are live and describe a buffer of `len` bytes, which
        // getsockname fills in.
        if unsafe { libc::getsockname(fd.as_raw_fd(), (&raw mut addr).cast(), &mut len) } < 0 {
            return Err(HostError::last_os(op("getsockname")));
        }
        Ok(Socket {
            fd,
            port: addr.nl_pid,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    /// Sends a request that asks for an acknowledgement (`NLM_F_ACK`) and collects the
    /// answers of type `kind` that `parse` keeps until it comes.
    pub(crate) fn exchange<T>(
        &mut self,
        req: Request,
        kind: u16,
        mut parse: impl FnMut(&[u8]) -> Result<Option<T>, WireError>,
    ) -> Result<Vec<T>, Failure> {
        self.exchange_once(req, kind, &mut parse, &mut false)
    }

    /// Reads a whole table with a dump request, again if the kernel says the table changed
    /// while it was being read.
    pub(crate) fn dump<T>(
        &mut self,
        req: impl Fn() -> Request,
        kind: u16,
        mut parse: impl FnMut(&[u8]) -> Result<Option<T>, WireError>,
    ) -> Result<Vec<T>, Failure> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut interrupted = false;
            let items = self.exchange_once(req(), kind, &mut parse, &mut interrupted)?;
            if !interrupted || tries >= DUMP_TRIES {
                return Ok(items);
            }
        }
    }

    fn exchange_once<T>(
        &mut self,
        req: Request,
        kind: u16,
        parse: &mut impl FnMut(&[u8]) -> Result<Option<T>, WireError>,
        interrupted: &mut bool,
    ) -> Result<Vec<T>, Failure> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        self.send(&req.finish(seq))?;
        let mut answers = Answers {
            seq,
            port: self.port,
            kind,
            parse,
            out: Vec::new(),
            interrupted: false,
        };
        loop {
            let len = self.recv()?;
            if answers.read(&self.buf[..len])? {
                *interrupted = answers.interrupted;
                return Ok(answers.out);
            }
        }
    }

    fn send(&self, bytes: &[u8]) -> Result<(), Failure> {
        // SAFETY: `bytes` is a live slice the kernel only reads; the socket is open, and an
        // unconnected netlink socket sends to the kernel.
        let ret = unsafe { libc::send(self.fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), 0) };
        if ret < 0 {
            return Err(Failure::Io(io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Receives one datagram into `self.buf`, growing it to fit.
    fn recv(&mut self) -> Result<usize, Failure> {
        let want = retry(|| {
            // SAFETY: MSG_PEEK|MSG_TRUNC with an empty buffer writes nothing and returns the
            // datagram's full length.
            unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_PEEK | libc::MSG_TRUNC,
                )
            }
        })
        .map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Failure::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no answer from the kernel in {} s",
                    ANSWER_TIMEOUT.as_secs()
                ),
            )),
            _ => Failure::Io(e),
        })?;
        if want > self.buf.len() {
            self.buf.resize(want, 0);
        }
        let buf = &mut self.buf;
        let fd = self.fd.as_raw_fd();
        // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes for the call.
        retry(|| unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) })
            .map_err(Failure::Io)
    }
}

/// Retries a call while a signal interrupts it.
fn retry(mut f: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        match usize::try_from(f()) {
            Ok(n) => return Ok(n),
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// The answers to one request, as they are read.
struct Answers<'p, T, P> {
    seq: u32,
    port: u32,
    /// The message type `parse` reads; other types are skipped.
    kind: u16,
    parse: &'p mut P,
    out: Vec<T>,
    /// The kernel marked a message of the dump inconsistent.
    interrupted: bool,
}

impl<T, P: FnMut(&[u8]) -> Result<Option<T>, WireError>> Answers<'_, T, P> {
    /// Reads one datagram; true when the exchange is over.
    fn read(&mut self, datagram: &[u8]) -> Result<bool, Failure> {
        for m in nlmsg::messages(datagram) {
            let m = m?;
            // Answers to an earlier request that timed out, or not for this socket.
            if m.seq != self.seq || (m.port != self.port && m.port != 0) {
                continue;
            }
            if m.flags & nlmsg::NLM_F_DUMP_INTR != 0 {
                self.interrupted = true;
            }
            let ack = match m.kind {
                nlmsg::NLMSG_ERROR => nlmsg::parse_ack(m.flags, m.payload)?,
                nlmsg::NLMSG_DONE => nlmsg::parse_done(m.flags, m.payload)?,
                k if k == self.kind => {
                    if let Some(item) = (self.parse)(m.payload)? {
                        self.out.push(item);
                    }
                    continue;
                }
                _ => continue,
            };
            if ack.errno != 0 {
                return Err(Failure::Kernel {
                    errno: ack.errno,
                    message: ack.message,
                });
            }
            return Ok(true);
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_refusals_read_as_the_operation_and_the_errno_text() {
        let e = Failure::Kernel {
            errno: libc::EEXIST,
            message: None,
        }
        .into_host("add address 10.0.0.2/24 on eth0".into());
        assert_eq!(
            e.to_string(),
            "add address 10.0.0.2/24 on eth0: File exists"
        );
        let e = Failure::Kernel {
            errno: libc::ENETUNREACH,
            message: Some("Nexthop has invalid gateway".into()),
        }
        .into_host("add route 10.1.0.0/16 via 10.9.9.9 dev eth0".into());
        assert_eq!(
            e.to_string(),
            "add route 10.1.0.0/16 via 10.9.9.9 dev eth0: Network is unreachable \
             (kernel: Nexthop has invalid gateway)"
        );
    }
}
