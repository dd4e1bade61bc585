//! CNI spec versions: which ones the plugins speak, which verbs each allows, which result shape
//! each prints.

use std::fmt;
use std::str::FromStr;

use crate::error::{CniError, Code};

/// A CNI spec version such as `0.2.0` or `1.1.0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CniVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// Every version the plugins accept in a config, oldest first (the Go `version.All`).
pub const SUPPORTED: [CniVersion; 7] = [
    CniVersion::new(0, 1, 0),
    CniVersion::new(0, 2, 0),
    CniVersion::new(0, 3, 0),
    CniVersion::new(0, 3, 1),
    CniVersion::new(0, 4, 0),
    CniVersion::new(1, 0, 0),
    CniVersion::new(1, 1, 0),
];

/// How a version prints an ADD result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultShape {
    /// 0.1.0 and 0.2.0: `ip4` / `ip6` objects.
    V020,
    /// 0.3.0 to 0.4.0: `interfaces`, `ips` with `version`, `routes`.
    V040,
    /// 1.0.0 and later: as 0.4.0 without `ips[].version`.
    V100,
}

impl CniVersion {
    /// The newest version: what VERSION reports and results are built in.
    pub const CURRENT: CniVersion = CniVersion::new(1, 1, 0);

    pub const fn new(major: u32, minor: u32, patch: u32) -> CniVersion {
        CniVersion {
            major,
            minor,
            patch,
        }
    }

    /// The version of a config: absent or empty means 0.1.0, as libcni and skel read it.
    pub fn of_config(given: Option<&str>) -> Result<CniVersion, CniError> {
        let text = given.unwrap_or("").trim();
        if text.is_empty() {
            return Ok(CniVersion::new(0, 1, 0));
        }
        let v: CniVersion = text.parse().map_err(|_| incompatible(text))?;
        if !v.is_supported() {
            return Err(incompatible(text));
        }
        Ok(v)
    }

    pub fn is_supported(self) -> bool {
        SUPPORTED.contains(&self)
    }

    pub fn result_shape(self) -> ResultShape {
        if self < CniVersion::new(0, 3, 0) {
            ResultShape::V020
        } else if self < CniVersion::new(1, 0, 0) {
            ResultShape::V040
        } else {
            ResultShape::V100
        }
    }

    /// CHECK exists from 0.4.0 on.
    pub fn allows_check(self) -> bool {
        self >= CniVersion::new(0, 4, 0)
    }

    /// STATUS and GC exist from 1.1.0 on.
    pub fn allows_status_and_gc(self) -> bool {
        self >= CniVersion::new(1, 1, 0)
    }

    /// The newest version both sides speak, at most `self`.
    pub fn best_common(self, theirs: &[CniVersion]) -> Option<CniVersion> {
        theirs
            .iter()
            .copied()
            .filter(|v| *v <= self && v.is_supported())
            .max()
    }
}

fn incompatible(given: &str) -> CniError {
    let list: Vec<String> = SUPPORTED.iter().map(|v| v.to_string()).collect();
    CniError::new(
        Code::INCOMPATIBLE_VERSION,
        format!(
            "cniVersion: \"{given}\" is not supported; write one of {}",
            list.join(", ")
        ),
    )
    .details(format!(
        "config is \"{given}\", plugin supports [{}]",
        list.join(" ")
    ))
}

impl fmt::Display for CniVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for CniVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<CniVersion, String> {
        let bad = || format!("\"{s}\" is not a version; write e.g. 1.1.0");
        let mut parts = s.trim().split('.');
        let mut next =
            || -> Result<u32, String> { parts.next().ok_or_else(bad)?.parse().map_err(|_| bad()) };
        let v = CniVersion::new(next()?, next()?, next()?);
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_version_is_0_1_0() {
        assert_eq!(
            CniVersion::of_config(None).unwrap(),
            CniVersion::new(0, 1, 0)
        );
        assert_eq!(
            CniVersion::of_config(Some("")).unwrap(),
            CniVersion::new(0, 1, 0)
        );
    }

    #[test]
    fn unsupported_versions_are_code_1_naming_the_field() {
        for bad in ["0.5.0", "2.0.0", "1.0", "one", "1.1.0.0", "1.0.1"] {
            let e = CniVersion::of_config(Some(bad)).unwrap_err();
            assert_eq!(e.code, Code::INCOMPATIBLE_VERSION, "{bad}");
            assert!(e.msg.starts_with("cniVersion"), "{}", e.msg);
        }
    }

    #[test]
    fn shapes_and_verbs_follow_the_spec() {
        let v = |s: &str| s.parse::<CniVersion>().unwrap();
        assert_eq!(v("0.2.0").result_shape(), ResultShape::V020);
        assert_eq!(v("0.3.1").result_shape(), ResultShape::V040);
        assert_eq!(v("0.4.0").result_shape(), ResultShape::V040);
        assert_eq!(v("1.0.0").result_shape(), ResultShape::V100);
        assert!(!v("0.3.1").allows_check());
        assert!(v("0.4.0").allows_check());
        assert!(!v("1.0.0").allows_status_and_gc());
        assert!(v("1.1.0").allows_status_and_gc());
    }

    #[test]
    fn best_common_picks_the_newest_shared() {
        let debian_host_local: Vec<CniVersion> = SUPPORTED[..6].to_vec();
        assert_eq!(
            CniVersion::CURRENT.best_common(&debian_host_local),
            Some(CniVersion::new(1, 0, 0))
        );
        assert_eq!(
            CniVersion::new(0, 2, 0).best_common(&debian_host_local),
            Some(CniVersion::new(0, 2, 0))
        );
    }
}
