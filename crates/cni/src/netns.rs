//! `CNI_NETNS` on a Windows node: a Linux netns path (here), an HCN namespace GUID (containerd on
//! Windows), `none` (dockershim's pause container) or `container:<id>` (a workload container
//! joining its pod's endpoint).

use std::path::PathBuf;

use hcn::Guid;

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

    /// ADD and CHECK need a namespace; a path must exist.
    pub fn check_for_add(&self) -> Result<(), CniError> {
        match self {
            NetNs::Empty => Err(CniError::new(
                Code::INVALID_ENVIRONMENT,
                "required env variables [CNI_NETNS] missing",
            )),
            NetNs::Path(p) if !p.exists() => Err(CniError::new(
                Code::INVALID_NETNS,
                format!(
                    "CNI_NETNS: {} does not exist; give the path of the pod's network namespace",
                    p.display()
                ),
            )),
            _ => Ok(()),
        }
    }
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
    fn a_missing_path_is_code_8() {
        let e = NetNs::parse("/nonexistent/netns/x")
            .unwrap()
            .check_for_add()
            .unwrap_err();
        assert_eq!(e.code, Code::INVALID_NETNS);
    }
}
