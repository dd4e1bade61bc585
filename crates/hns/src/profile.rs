//! Profiles: which Windows Server build hnsd reproduces, with its HNS version and limits.

use std::fmt;
use std::str::FromStr;

use hcn::{SupportedFeatures, Version};

/// A Windows build whose HNS behaviour hnsd reproduces, or `Unrestricted` with every
/// limitation lifted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Profile {
    /// Windows Server 2019 (1809, HNS 9.x with the DSR backport).
    Ws2019,
    /// Windows Server 2022 (HNS 12.x).
    #[default]
    Ws2022,
    /// Windows Server 2025 (HNS 15.4, kubernetes#131466).
    Ws2025,
    /// Every feature, no limitation: not a Windows build.
    Unrestricted,
}

impl Profile {
    pub const ALL: [Profile; 4] = [
        Profile::Ws2019,
        Profile::Ws2022,
        Profile::Ws2025,
        Profile::Unrestricted,
    ];

    /// The HNS version `GET /globals/version` reports.
    pub fn version(self) -> Version {
        match self {
            Profile::Ws2019 => Version::new(9, 5),
            Profile::Ws2022 => Version::new(12, 1),
            Profile::Ws2025 => Version::new(15, 4),
            Profile::Unrestricted => Version::new(16, 0),
        }
    }

    /// The features a client derives from the version.
    pub fn features(self) -> SupportedFeatures {
        SupportedFeatures::for_version(self.version())
    }

    /// The most backends (destinations) one load balancer may have: 64 on Windows Server 2019
    /// and 2022 (kubernetes#98680), later raised to 1024.
    pub fn max_lb_backends(self) -> Option<usize> {
        match self {
            Profile::Ws2019 | Profile::Ws2022 => Some(64),
            Profile::Ws2025 => Some(1024),
            Profile::Unrestricted => None,
        }
    }

    /// Whether HNS implements `HcnModifyLoadBalancer` (hcsshim: HNS >= 15.4).
    pub fn modify_load_balancer(self) -> bool {
        self.version() >= Version::new(15, 4)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Ws2019 => "ws2019",
            Profile::Ws2022 => "ws2022",
            Profile::Ws2025 => "ws2025",
            Profile::Unrestricted => "unrestricted",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Profile::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown profile \"{s}\"; use one of ws2019, ws2022, ws2025, unrestricted")
            })
    }
}
