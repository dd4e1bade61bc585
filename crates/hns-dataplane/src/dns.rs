//! The DNS client of each pod compartment. What a pod endpoint's `Dns` (Domain, Search,
//! ServerList, Options) becomes depends on the profile ([`Limitation::WindowsDnsClient`](hns::Limitation::WindowsDnsClient)):
//!
//! - Windows DNS Client: the pod's resolv.conf is `nameserver 127.0.0.53` with no search line
//!   (and a timeout that lets the stub finish its retries),
//!   and a stub there (one per compartment, run by hnsd, started and stopped with the
//!   endpoints) applies the Windows rules and forwards to the servers from the pod's namespace;
//! - `unrestricted`: resolv.conf carries the servers, every search entry and the options
//!   (kubelet's `ndots:5` when the endpoint has none), and glibc resolves as in a Linux pod.
//!
//! `POST /resolve` runs a walk through the same stub, or glibc's rules over the same file.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use dnsclient::resolv_conf::ResolvConf;
use dnsclient::stub::{self, Stub, StubConfig};
use dnsclient::upstream::Schedule;
use dnsclient::{AskedName, Rules};
use hcn::error::{HResult, HnsError};
use hcn::{Endpoint, Guid};
use host::netns::Netns;
use tokio::runtime::Handle;

use crate::Shared;
use crate::devices::{Key, Spec};
use hns::profile::Profile;
use hns::resolve::PodResolver;
use hns::trace::NO_DATAPLANE;

/// The options a Linux pod's resolv.conf carries (kubelet `ClusterFirst`).
const KUBELET_OPTIONS: &str = "ndots:5";
/// The options in front of a stub: glibc waits out the stub's whole Windows retry schedule
/// (10 s) once, instead of resending at 5 s and starting a second walk.
const STUB_OPTIONS: [&str; 2] = ["timeout:11", "attempts:1"];

/// What `/etc/netns/<name>/resolv.conf` of a pod says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvFile {
    pub servers: Vec<IpAddr>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

/// The DNS client of one pod compartment: its resolv.conf, and the stub when the profile's
/// resolver is the Windows DNS Client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDns {
    pub file: ResolvFile,
    pub stub: Option<StubPlan>,
}

impl PodDns {
    /// The rules the pod's names are resolved by: the stub's (the Windows DNS Client), or
    /// glibc's over the resolv.conf the pod is given (what `POST /resolve` runs); `None` when
    /// that file cannot be written.
    pub fn rules(&self) -> Option<Rules> {
        if let Some(stub) = &self.stub {
            return Some(stub.rules.clone());
        }
        let f = &self.file;
        let text = host::resolv::render(&f.servers, &f.search, &f.options).ok()?;
        let conf = ResolvConf::parse(&text, "");
        Some(Rules::Glibc {
            search: conf.search,
            ndots: conf.ndots,
        })
    }
}

/// A stub to run in a pod's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StubPlan {
    pub netns: PathBuf,
    pub rules: Rules,
    pub servers: Vec<SocketAddr>,
}

/// The DNS client of endpoint `ep` in namespace `netns` under `profile`; `None` when the
/// endpoint has no DNS server or the namespace has no name (no resolv.conf can reach it).
pub fn pod_dns(profile: Profile, ep: &Endpoint, netns: &Path) -> Option<PodDns> {
    netns.strip_prefix(Netns::RUN_DIR).ok()?;
    let servers: Vec<IpAddr> = ep
        .dns
        .server_list
        .iter()
        .flat_map(|s| s.split(','))
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    if servers.is_empty() {
        return None;
    }
    let suffixes = suffixes(ep);
    let Some(honoured) = profile.windows_dns_suffixes() else {
        let options = if ep.dns.options.is_empty() {
            vec![KUBELET_OPTIONS.to_string()]
        } else {
            ep.dns.options.clone()
        };
        let file = ResolvFile {
            servers,
            search: suffixes,
            options,
        };
        return Some(PodDns { file, stub: None });
    };
    let rules = Rules::Windows {
        suffixes: suffixes
            .iter()
            .filter_map(|s| AskedName::parse(s.trim_end_matches('.')).ok())
            .collect(),
        honoured,
        profile: profile.to_string(),
    };
    let stub = StubPlan {
        netns: netns.to_path_buf(),
        rules,
        servers: servers.iter().map(|ip| SocketAddr::new(*ip, 53)).collect(),
    };
    let file = ResolvFile {
        servers: vec![IpAddr::V4(*stub::ADDRESS.ip())],
        search: Vec::new(),
        options: STUB_OPTIONS.iter().map(|o| o.to_string()).collect(),
    };
    Some(PodDns {
        file,
        stub: Some(stub),
    })
}

/// The endpoint's suffixes in order: the connection-specific suffix (`Domain`) first, then
/// the search list, each once; words that cannot go in a resolv.conf are left out.
fn suffixes(ep: &Endpoint) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let domain = (!ep.dns.domain.is_empty()).then(|| ep.dns.domain.clone());
    for s in domain.into_iter().chain(ep.dns.search.iter().cloned()) {
        let s = s.trim().to_string();
        let word = !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c == '\0');
        if word && !out.iter().any(|o| o.eq_ignore_ascii_case(&s)) {
            out.push(s);
        }
    }
    out
}

/// The stubs running on this node, by the namespace they serve.
pub struct Stubs {
    runtime: Option<Handle>,
    running: HashMap<PathBuf, Arc<Stub>>,
    /// Stubs that failed to start, with why (logged once per change).
    failed: HashMap<PathBuf, String>,
}

impl Stubs {
    /// Stubs served on `runtime`; without one (hnsd's data plane started outside tokio) none
    /// can run, and each wanted one is reported.
    pub fn new(runtime: Option<Handle>) -> Stubs {
        Stubs {
            runtime,
            running: HashMap::new(),
            failed: HashMap::new(),
        }
    }

    /// The stubs the devices in `want` call for.
    pub fn wanted(want: &[(Key, vfp::PortId, Spec)]) -> Vec<StubPlan> {
        want.iter()
            .filter_map(|(_, _, spec)| match spec {
                Spec::Tap(t) => t.dns.as_ref()?.stub.clone(),
                Spec::Uplink { .. } => None,
            })
            .collect()
    }

    /// Starts the stubs `want` names, keeps those unchanged, stops the rest.
    pub fn sync(&mut self, want: Vec<StubPlan>) {
        let mut by_netns: HashMap<PathBuf, StubPlan> = HashMap::new();
        for plan in want {
            // Two endpoints in one compartment share its DNS client; the first one's settings win.
            by_netns.entry(plan.netns.clone()).or_insert(plan);
        }
        self.running
            .retain(|netns, stub| by_netns.get(netns).is_some_and(|p| same(stub.config(), p)));
        self.failed.retain(|netns, _| by_netns.contains_key(netns));
        for (netns, plan) in by_netns {
            if self.running.contains_key(&netns) {
                continue;
            }
            match self.start(plan) {
                Ok(stub) => {
                    self.failed.remove(&netns);
                    self.running.insert(netns, Arc::new(stub));
                }
                Err(msg) => {
                    if self.failed.get(&netns) != Some(&msg) {
                        tracing::warn!(netns = %netns.display(), "cannot start the pod's DNS client: {msg}");
                        self.failed.insert(netns, msg);
                    }
                }
            }
        }
    }

    fn start(&self, plan: StubPlan) -> Result<Stub, String> {
        let runtime = self
            .runtime
            .as_ref()
            .ok_or("hnsd's data plane runs without an async runtime")?;
        let config = StubConfig {
            netns: Netns::from_path(&plan.netns),
            rules: plan.rules,
            servers: plan.servers,
            schedule: Schedule::windows(),
        };
        Stub::start(config, runtime).map_err(|e| e.to_string())
    }

    /// The stub serving namespace `netns`.
    pub fn get(&self, netns: &Path) -> Option<Arc<Stub>> {
        self.running.get(netns).cloned()
    }
}

fn same(c: &StubConfig, p: &StubPlan) -> bool {
    c.netns.path() == p.netns && c.rules == p.rules && c.servers == p.servers
}

/// Whose rules a resolve request runs.
enum Target {
    Stub(Arc<Stub>),
    Glibc(Netns, PathBuf),
}

/// The resolver the data plane registers with the service.
pub(crate) fn resolver(shared: Weak<Shared>) -> PodResolver {
    Arc::new(move |id, asked, qtype| {
        let shared = shared.clone();
        Box::pin(async move {
            let target = tokio::task::spawn_blocking(move || target(&shared, id))
                .await
                .map_err(|e| HnsError::new(HResult::E_FAIL, format!("resolve failed: {e}")))??;
            match target {
                Target::Stub(stub) => Ok(stub.explain(&asked, qtype).await),
                Target::Glibc(netns, file) => {
                    let text = std::fs::read_to_string(&file).map_err(|e| {
                        HnsError::new(
                            HResult::E_FAIL,
                            format!("cannot read the pod's {}: {e}", file.display()),
                        )
                    })?;
                    let conf = ResolvConf::parse(&text, "");
                    dnsclient::resolve::glibc_walk(&netns, &conf, &asked, qtype)
                        .await
                        .map_err(|e| HnsError::new(HResult::E_FAIL, e.to_string()))
                }
            }
        })
    })
}

/// The DNS client of endpoint `id`'s pod, found under the data plane's lock.
fn target(shared: &Weak<Shared>, id: Guid) -> Result<Target, HnsError> {
    let stopping = || HnsError::new(NO_DATAPLANE, "the data plane is stopping");
    let shared = shared.upgrade().ok_or_else(stopping)?;
    let mut found = Err(stopping());
    shared.with_state(|state, inner, _| {
        found = (|| {
            let ep = state.endpoint(id).ok_or_else(|| not_found(id, "no longer exists"))?;
            let ns = state
                .namespace(ep.host_compute_namespace)
                .ok_or_else(|| not_found(id, "is in no namespace (not attached to a pod)"))?;
            let netns = hns::state::netns_path(ns);
            let dns = pod_dns(state.profile(), ep, &netns).ok_or_else(|| {
                not_found(
                    id,
                    "has no DNS client: its Dns.ServerList is empty or its namespace has no name under /run/netns",
                )
            })?;
            if dns.stub.is_some() {
                return inner.stubs.get(&netns).map(Target::Stub).ok_or_else(|| {
                    HnsError::new(
                        NO_DATAPLANE,
                        format!("the DNS client of {} is not running (see hnsd's log)", netns.display()),
                    )
                });
            }
            let name = netns
                .file_name()
                .map(|n| Path::new(host::resolv::ETC_NETNS).join(n).join("resolv.conf"))
                .ok_or_else(|| not_found(id, "has a namespace without a name"))?;
            Ok(Target::Glibc(Netns::from_path(netns), name))
        })();
    });
    found
}

fn not_found(id: Guid, why: &str) -> HnsError {
    HnsError::new(
        HResult::HCN_E_ENDPOINT_NOT_FOUND,
        format!("Endpoint: endpoint {id} {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(domain: &str, search: &[&str], servers: &[&str], options: &[&str]) -> Endpoint {
        let mut ep = Endpoint::default();
        ep.dns.domain = domain.into();
        ep.dns.search = search.iter().map(|s| s.to_string()).collect();
        ep.dns.server_list = servers.iter().map(|s| s.to_string()).collect();
        ep.dns.options = options.iter().map(|s| s.to_string()).collect();
        ep
    }

    const SEARCH: [&str; 3] = [
        "default.svc.cluster.local",
        "svc.cluster.local",
        "cluster.local",
    ];

    #[test]
    fn the_rules_are_the_stubs_or_glibcs_over_the_pods_file() {
        let ep = endpoint("", &SEARCH, &["10.96.0.10"], &[]);
        let netns = Path::new("/run/netns/pod");
        let win = pod_dns(Profile::Ws2022, &ep, netns).expect("dns");
        assert!(matches!(
            win.rules(),
            Some(Rules::Windows { honoured: 1, .. })
        ));
        let open = pod_dns(Profile::Unrestricted, &ep, netns).expect("dns");
        let Some(Rules::Glibc { search, ndots }) = open.rules() else {
            panic!("glibc rules under unrestricted");
        };
        let search: Vec<String> = search.iter().map(ToString::to_string).collect();
        assert_eq!(search, SEARCH);
        assert_eq!(ndots, 5, "kubelet's ndots:5 when the endpoint has none");
    }

    #[test]
    fn windows_profiles_point_the_pod_at_its_stub_with_no_search_line() {
        let ep = endpoint("", &SEARCH, &["10.96.0.10"], &[]);
        for p in [Profile::Ws2019, Profile::Ws2022, Profile::Ws2025] {
            let dns = pod_dns(p, &ep, Path::new("/run/netns/pod")).expect("dns");
            assert_eq!(
                dns.file.servers,
                ["127.0.0.53".parse::<IpAddr>().expect("ip")]
            );
            assert!(dns.file.search.is_empty(), "no search line");
            assert_eq!(dns.file.options, STUB_OPTIONS);
            let stub = dns.stub.expect("a stub");
            assert_eq!(
                stub.servers,
                ["10.96.0.10:53".parse::<SocketAddr>().expect("addr")]
            );
            let Rules::Windows {
                suffixes, honoured, ..
            } = stub.rules
            else {
                panic!("Windows rules");
            };
            assert_eq!((suffixes.len(), honoured), (3, 1));
            assert_eq!(suffixes[0].to_string(), "default.svc.cluster.local");
        }
    }

    #[test]
    fn unrestricted_pods_get_kubelets_linux_file_and_no_stub() {
        let ep = endpoint("", &SEARCH, &["10.96.0.10,10.96.0.11"], &[]);
        let dns = pod_dns(Profile::Unrestricted, &ep, Path::new("/run/netns/pod")).expect("dns");
        assert_eq!(dns.stub, None);
        assert_eq!(dns.file.servers.len(), 2);
        assert_eq!(dns.file.search, SEARCH);
        assert_eq!(dns.file.options, ["ndots:5"]);
        let own = endpoint("", &SEARCH, &["10.96.0.10"], &["ndots:2"]);
        let dns = pod_dns(Profile::Unrestricted, &own, Path::new("/run/netns/p")).expect("dns");
        assert_eq!(dns.file.options, ["ndots:2"]);
    }

    #[test]
    fn the_domain_comes_first_and_repeats_and_bad_words_are_dropped() {
        let ep = endpoint(
            "default.svc.cluster.local",
            &["DEFAULT.svc.cluster.local", "a b", "", "cluster.local"],
            &["10.96.0.10"],
            &[],
        );
        assert_eq!(
            suffixes(&ep),
            ["default.svc.cluster.local", "cluster.local"]
        );
    }

    #[test]
    fn no_server_or_no_named_namespace_means_no_dns_client() {
        let ep = endpoint("", &SEARCH, &[], &[]);
        assert_eq!(
            pod_dns(Profile::Ws2022, &ep, Path::new("/run/netns/p")),
            None
        );
        let ep = endpoint("", &SEARCH, &["10.96.0.10"], &[]);
        assert_eq!(
            pod_dns(Profile::Ws2022, &ep, Path::new("/proc/1/ns/net")),
            None
        );
    }
}
