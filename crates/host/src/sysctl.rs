//! Kernel parameters under `/proc/sys`. Those under `net` belong to the network namespace of
//! the thread that opens them.

use std::io;
use std::path::PathBuf;

use crate::HostError;

const PROC_SYS: &str = "/proc/sys";

/// Writes `value` to the kernel parameter `key`: either dotted (`net.ipv4.ip_forward`) or, for
/// keys with an interface name that may itself contain dots, with slashes
/// (`net/ipv4/conf/eth0.100/rp_filter`).
pub fn set_sysctl(key: &str, value: &str) -> Result<(), HostError> {
    let path = sysctl_path(key)?;
    std::fs::write(&path, value).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => HostError::NotFound(format!(
            "kernel parameter {key} does not exist ({}): is the interface in this network \
             namespace, and the protocol in this kernel?",
            path.display()
        )),
        _ => HostError::io(format!("write {value:?} to {}", path.display()), e),
    })
}

/// The file under `/proc/sys` for `key`.
fn sysctl_path(key: &str) -> Result<PathBuf, HostError> {
    let relative = if key.contains('/') {
        key.trim_start_matches('/')
            .trim_start_matches("proc/sys/")
            .to_string()
    } else {
        key.replace('.', "/")
    };
    let bad = relative.is_empty()
        || relative
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        return Err(HostError::Invalid(format!(
            "kernel parameter {key:?} is not a key under {PROC_SYS}: write it dotted \
             (net.ipv4.ip_forward) or with slashes (net/ipv4/conf/eth0.100/rp_filter)"
        )));
    }
    Ok(PathBuf::from(PROC_SYS).join(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_and_slashed_keys_name_the_same_kind_of_file() {
        let p = |k: &str| sysctl_path(k).expect(k).display().to_string();
        assert_eq!(p("net.ipv4.ip_forward"), "/proc/sys/net/ipv4/ip_forward");
        assert_eq!(
            p("net/ipv4/conf/eth0.100/rp_filter"),
            "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
        );
        assert_eq!(
            p("/proc/sys/net/ipv4/ip_forward"),
            "/proc/sys/net/ipv4/ip_forward"
        );
    }

    #[test]
    fn keys_that_leave_proc_sys_are_refused() {
        for bad in ["", "net/../../etc/passwd", "net//x", ".", "net.ipv4."] {
            assert!(
                matches!(sysctl_path(bad), Err(HostError::Invalid(_))),
                "{bad:?}"
            );
        }
    }
}
