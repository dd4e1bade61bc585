//! `CNI_NETNS` on a Windows node: a Linux netns path (here), an HCN namespace GUID (containerd on
//! Windows), `none` (dockershim's pause container) or `container:<id>` (a workload container
//! joining its pod's endpoint).

use std::path::{Path, PathBuf};

use hcn::Guid;
use host::HostError;
use host::netns::Netns;

use crate::config::is_valid_name;
use crate::error::{CniError, Code};

/// What `CNI_NETNS` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetNs {
    /// Unset (allowed on DEL only).
    Empty,
    /// `none`: no namespace; the endpoint is created and not attached.
    None,
    /// `container:<id>`: the pod whose sandbox is `<id>`; join its endpoint.
    Container(String),
    /// An HCN namespace by ID; it must exist in hnsd.
    Guid(Guid),
    /// A Linux network namespace path; its HCN namespace is found or created.
    Path(PathBuf),
}

impl NetNs {
    /// Reads `CNI_NETNS`.
    pub fn parse(s: &str) -> Result<NetNs, CniError> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(NetNs::Empty);
        }
        if s.eq_ignore_ascii_case("none") {
            return Ok(NetNs::None);
        }
        if let Some(id) = s.strip_prefix("container:") {
            if !is_valid_name(id) {
                return Err(CniError::new(
                    Code::INVALID_ENVIRONMENT,
                    format!(
                        "CNI_NETNS: \"{s}\" does not name a container; write container:<sandbox container ID>"
                    ),
                ));
            }
            return Ok(NetNs::Container(id.to_string()));
        }
        if !s.contains('/')
            && let Ok(g) = s.parse::<Guid>()
        {
            return Ok(NetNs::Guid(g));
        }
        Ok(NetNs::Path(PathBuf::from(s)))
    }

    /// The sandbox (pod) container ID: `<id>` of `container:<id>`, else the container's own.
    pub fn sandbox<'a>(&'a self, container_id: &'a str) -> &'a str {
        match self {
            NetNs::Container(id) => id,
            _ => container_id,
        }
    }

    /// ADD needs a namespace; a path must be a network namespace of its own (not this
    /// plugin's, which is the node's).
    pub fn check_for_add(&self) -> Result<(), CniError> {
        match self {
            NetNs::Empty => Err(CniError::new(
                Code::INVALID_ENVIRONMENT,
                "required env variables [CNI_NETNS] missing",
            )),
            NetNs::Path(p) => check_path(p),
            _ => Ok(()),
        }
    }
}

/// A pod's netns path: it exists, is a network namespace (the reference plugins' `ns.GetNS`
/// checks its filesystem; this checks the namespace's type as well), and is not the
/// namespace the plugin runs in: a pod's vNIC there would be a device of the node itself.
fn check_path(p: &Path) -> Result<(), CniError> {
    const FIX: &str = "give the path of the pod's network namespace as the runtime made it (/run/netns/NAME, /proc/PID/ns/net)";
    let ns = Netns::from_path(p);
    ns.check().map_err(|e| match e {
        HostError::NotFound(_) => CniError::new(
            Code::INVALID_NETNS,
            format!("CNI_NETNS: {} does not exist; {FIX}", p.display()),
        ),
        e => CniError::new(
            Code::INVALID_NETNS,
            format!("CNI_NETNS: failed to open netns \"{}\": {e}", p.display()),
        )
        .details(FIX),
    })?;
    if ns.is_current() {
        return Err(CniError::new(
            Code::INVALID_NETNS,
            format!(
                "CNI_NETNS: {} is the plugin's own network namespace (the node's), not a pod's",
                p.display()
            ),
        )
        .details(FIX));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_windows_shapes() {
        assert_eq!(NetNs::parse("none").unwrap(), NetNs::None);
        assert_eq!(NetNs::parse("").unwrap(), NetNs::Empty);
        assert_eq!(
            NetNs::parse("container:4f1c").unwrap(),
            NetNs::Container("4f1c".into())
        );
        assert!(matches!(
            NetNs::parse("5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D").unwrap(),
            NetNs::Guid(_)
        ));
        assert_eq!(
            NetNs::parse("/var/run/netns/cni-1").unwrap(),
            NetNs::Path("/var/run/netns/cni-1".into())
        );
        assert_eq!(
            NetNs::parse("container:a/b").unwrap_err().code,
            Code::INVALID_ENVIRONMENT
        );
    }

    #[test]
    fn sandbox_is_the_pod_of_container_netns() {
        assert_eq!(
            NetNs::parse("container:pause1").unwrap().sandbox("work1"),
            "pause1"
        );
        assert_eq!(NetNs::parse("none").unwrap().sandbox("pause1"), "pause1");
    }

    #[test]
    fn a_path_that_is_no_network_namespace_is_code_8() {
        let dir = tempfile::tempdir().unwrap();
        for (path, says) in [
            ("/etc/passwd", "a file, not a namespace"),
            ("/proc/self/status", "a file, not a namespace"),
            ("/proc/self/ns/uts", "a UTS namespace"),
            ("/dev/null", "not a regular file"),
            (dir.path().to_str().unwrap(), "a directory"),
        ] {
            let e = NetNs::parse(path).unwrap().check_for_add().unwrap_err();
            assert_eq!(e.code, Code::INVALID_NETNS, "{path}");
            assert!(
                e.msg
                    .starts_with(&format!("CNI_NETNS: failed to open netns \"{path}\"")),
                "{}",
                e.msg
            );
            assert!(e.msg.contains(says), "{path}: {}", e.msg);
        }
    }

    #[test]
    fn the_plugins_own_namespace_is_no_pods() {
        for own in ["/proc/self/ns/net", "/proc/thread-self/ns/net"] {
            let e = NetNs::parse(own).unwrap().check_for_add().unwrap_err();
            assert_eq!(e.code, Code::INVALID_NETNS);
            assert!(
                e.msg.contains("the plugin's own network namespace"),
                "{}",
                e.msg
            );
        }
    }

    #[test]
    fn a_missing_path_is_code_8() {
        let e = NetNs::parse("/nonexistent/netns/x")
            .unwrap()
            .check_for_add()
            .unwrap_err();
        assert_eq!(e.code, Code::INVALID_NETNS);
    }
}
