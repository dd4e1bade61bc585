//! Why an operation on the host's network stack failed.

use thiserror::Error;

/// An error from the Linux host: a system call, a kernel netlink answer, or a request that names
/// something absent or malformed. Every message names the thing (interface, namespace, file) and,
/// where there is one, what to do about it.
#[derive(Debug, Error)]
pub enum HostError {
    /// A system call failed; `op` says which and on what ("open /dev/net/tun for TAP pod0").
    #[error("{op}: {source}")]
    Io {
        /// What was being done, naming the object.
        op: String,
        /// The error the kernel returned.
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused a netlink request or answered one with something unreadable.
    #[error("{op}: {message}")]
    Netlink {
        /// The request, naming its object ("add address 10.0.0.2/24 on eth0").
        op: String,
        /// The kernel's answer: the errno text, and its extended message when it gave one.
        message: String,
    },
    /// The thing asked for does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The thing asked to be created exists already.
    #[error("{0}")]
    AlreadyExists(String),
    /// The request itself is malformed (a name Linux does not allow, a bad key).
    #[error("{0}")]
    Invalid(String),
}

impl HostError {
    /// An [`HostError::Io`] for `op` from the calling thread's `errno`.
    pub(crate) fn last_os(op: impl Into<String>) -> HostError {
        HostError::Io {
            op: op.into(),
            source: std::io::Error::last_os_error(),
        }
    }

    /// An [`HostError::Io`] for `op` from `source`.
    pub fn io(op: impl Into<String>, source: std::io::Error) -> HostError {
        HostError::Io {
            op: op.into(),
            source,
        }
    }
}
