//! A pod's `/etc/resolv.conf` read as glibc reads it (`res_init.c`): up to three
//! `nameserver`s, the last `search` or `domain` line wins, `options ndots:/timeout:/attempts:`
//! capped as glibc caps them, unknown lines and words ignored. glibc never rejects the file,
//! so neither does this reader: it reports what glibc would use.

use std::net::IpAddr;
use std::time::Duration;

use crate::name::AskedName;

/// glibc's `MAXNS`.
const MAX_SERVERS: usize = 3;
/// glibc's `MAXDNSRCH`.
const MAX_SEARCH: usize = 6;

/// The resolver settings glibc takes from a resolv.conf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<IpAddr>,
    pub search: Vec<AskedName>,
    /// `ndots` (default 1, at most 15).
    pub ndots: usize,
    /// `timeout` per try (default 5 s, at most 30 s).
    pub timeout: Duration,
    /// `attempts` (default 2, at most 5).
    pub attempts: u32,
}

impl Default for ResolvConf {
    fn default() -> Self {
        ResolvConf {
            nameservers: Vec::new(),
            search: Vec::new(),
            ndots: 1,
            timeout: Duration::from_secs(5),
            attempts: 2,
        }
    }
}

impl ResolvConf {
    /// Reads `text`; with no `search`/`domain` line the search list is the domain part of
    /// `hostname` (what glibc derives from `gethostname`), if it has one.
    pub fn parse(text: &str, hostname: &str) -> ResolvConf {
        let mut conf = ResolvConf::default();
        let mut search: Option<Vec<AskedName>> = None;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let Some(key) = words.next() else { continue };
            match key {
                "nameserver" => {
                    let ip = words.next().and_then(|w| w.parse().ok());
                    if let Some(ip) = ip
                        && conf.nameservers.len() < MAX_SERVERS
                    {
                        conf.nameservers.push(ip);
                    }
                }
                "search" => search = Some(names(words.take(MAX_SEARCH))),
                "domain" => search = Some(names(words.take(1))),
                "options" => words.for_each(|w| conf.option(w)),
                _ => {}
            }
        }
        conf.search = search.unwrap_or_else(|| {
            let domain = hostname.split_once('.').map(|(_, d)| d);
            names(domain.into_iter())
        });
        conf
    }

    fn option(&mut self, word: &str) {
        let Some((key, value)) = word.split_once(':') else {
            return;
        };
        let Ok(n) = value.parse::<u32>() else { return };
        match key {
            "ndots" => self.ndots = n.min(15) as usize,
            "timeout" => self.timeout = Duration::from_secs(u64::from(n.clamp(1, 30))),
            "attempts" => self.attempts = n.clamp(1, 5),
            _ => {}
        }
    }
}

/// The search entries glibc can use: `.` (the root) and unparsable words are dropped.
fn names<'a>(words: impl Iterator<Item = &'a str>) -> Vec<AskedName> {
    words
        .filter_map(|w| AskedName::parse(w.trim_end_matches('.')).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kubelets_linux_pod_file_reads_as_glibc_reads_it() {
        let c = ResolvConf::parse(
            "nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
            "vm",
        );
        assert_eq!(c.nameservers, ["10.96.0.10".parse::<IpAddr>().expect("ip")]);
        let s: Vec<String> = c.search.iter().map(ToString::to_string).collect();
        assert_eq!(
            s,
            [
                "default.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
        assert_eq!((c.ndots, c.attempts), (5, 2));
    }

    #[test]
    fn the_last_search_or_domain_line_wins_and_options_are_capped() {
        let c = ResolvConf::parse(
            "search a b\ndomain c\n# comment\noptions ndots:99 timeout:100 attempts:0 rotate\n",
            "h",
        );
        assert_eq!(c.search.len(), 1);
        assert_eq!(c.search[0].to_string(), "c");
        assert_eq!((c.ndots, c.timeout.as_secs(), c.attempts), (15, 30, 1));
    }

    #[test]
    fn no_search_line_takes_the_hostnames_domain() {
        let c = ResolvConf::parse("nameserver 127.0.0.53\n", "node.example.test");
        assert_eq!(c.search.len(), 1);
        assert_eq!(c.search[0].to_string(), "example.test");
        assert!(
            ResolvConf::parse("nameserver 127.0.0.53\n", "pod")
                .search
                .is_empty()
        );
    }

    #[test]
    fn bad_lines_are_skipped_as_glibc_skips_them() {
        let c = ResolvConf::parse(
            "nameserver nonsense\nnameserver 1.1.1.1\nnameserver 2.2.2.2\nnameserver 3.3.3.3\nnameserver 4.4.4.4\noptions ndots:x\n",
            "h",
        );
        assert_eq!(c.nameservers.len(), 3);
        assert_eq!(c.ndots, 1);
    }

    proptest! {
        #[test]
        fn any_text_reads_without_panic(text in "\\PC{0,400}", host in "\\PC{0,40}") {
            let c = ResolvConf::parse(&text, &host);
            prop_assert!(c.nameservers.len() <= MAX_SERVERS);
            prop_assert!(c.ndots <= 15);
        }

        #[test]
        fn the_file_host_writes_reads_back(
            servers in proptest::collection::vec(any::<std::net::Ipv4Addr>(), 1..4),
            search in proptest::collection::vec("[a-z][a-z0-9-]{0,10}(\\.[a-z][a-z0-9-]{0,10}){0,3}", 0..6),
            ndots in 0u32..16,
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            let ips: Vec<IpAddr> = servers.iter().copied().map(IpAddr::V4).collect();
            host::resolv::write_in(dir.path(), "p", &ips, &search, &[format!("ndots:{ndots}")])
                .expect("write");
            let text = std::fs::read_to_string(dir.path().join("p/resolv.conf")).expect("read");
            let c = ResolvConf::parse(&text, "h");
            prop_assert_eq!(c.nameservers, ips);
            let back: Vec<String> = c.search.iter().map(ToString::to_string).collect();
            prop_assert_eq!(back, search);
            prop_assert_eq!(c.ndots, ndots as usize);
        }
    }
}
