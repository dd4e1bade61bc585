//! The Windows DNS client of pods on a Windows node (issue 12, items 2 and 3), over real
//! namespaces: an hnsd node, a DNS server pod (Debian's knotd, authoritative for
//! cluster.local) reached through the switch, and a client pod whose endpoint carries the
//! `Dns` a CNI plugin gives it. glibc (`getent`) in the pod must see the Windows DNS Client's
//! rules under ws2022 and Linux's under unrestricted; `winnet resolve` must explain each walk.
//! Run as root (CI is).

#[path = "../../dnsclient/tests/common/knot.rs"]
mod knot;
mod lab;

use std::process::Command;
use std::time::{Duration, Instant};

use dnsclient::{End, Outcome, Reason, Walk};
use knot::{Knot, ROOT_ZONE, cluster_zone};
use lab::cluster::{Cluster, Mode, pod_ip};
use serde_json::json;

const WEB_IP: &str = "10.244.1.20";
const SEARCH: [&str; 3] = [
    "default.svc.cluster.local",
    "svc.cluster.local",
    "cluster.local",
];

/// Removes the resolv.conf files hnsd wrote for the test's pods (the namespaces go with the
/// lab).
struct ResolvFiles(Vec<String>);

impl Drop for ResolvFiles {
    fn drop(&mut self) {
        for ns in &self.0 {
            let _ = host::resolv::remove(ns);
        }
    }
}

/// A one-node cluster under `profile` with a DNS server pod and a client pod.
struct Setup {
    knot: Knot,
    client: String,
    _files: ResolvFiles,
    c: Cluster,
}

fn setup(tag: &str, profile: &str) -> Setup {
    setup_in(tag, Mode::L2Bridge, profile)
}

fn setup_in(tag: &str, mode: Mode, profile: &str) -> Setup {
    let mut c = Cluster::new(tag, 1, mode, profile);
    let (dns_ns, _) = c.pod_with_id(0, "dns", 53);
    let dns_ip = pod_ip(0, 53);
    let zone = cluster_zone(WEB_IP);
    let knot = Knot::start(
        &dns_ns,
        c.addr(&dns_ip, 53),
        &[("cluster.local", &zone), (".", ROOT_ZONE)],
    );
    // The endpoint DNS a win-bridge ADD writes from kubelet's runtimeConfig.dns.
    let dns = json!({"Dns": {"Search": SEARCH, "ServerList": [dns_ip]}});
    let (client, _) = c.pod_with(0, "cli", 10, dns);
    let files = ResolvFiles(vec![client.clone(), dns_ns]);
    Setup {
        knot,
        client,
        _files: files,
        c,
    }
}

impl Setup {
    fn getent(&self, name: &str) -> Option<String> {
        let out = self.c.lab.exec(&self.client, &["getent", "hosts", name]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn resolves(&self, name: &str) -> bool {
        self.getent(name).is_some_and(|s| s.contains(WEB_IP))
    }

    fn context(&self) -> String {
        let conf = std::fs::read_to_string(format!("/etc/netns/{}/resolv.conf", self.client))
            .unwrap_or_default();
        format!(
            "resolv.conf:\n{conf}\n{}\n--- knotd:\n{}",
            self.c.lab.logs(),
            self.knot.log()
        )
    }

    /// `winnet resolve` for the client pod, through its node's hnsd: the walk (`--json`) and
    /// the text.
    fn resolve(&self, name: &str) -> (Walk, String) {
        let socket = self.c.lab.hnsds[0].socket();
        let command = |extra: &[&str]| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_winnet"));
            cmd.arg("resolve")
                .args(extra)
                .args(["--netns", &self.client, "--hns-socket"])
                .arg(socket)
                .arg(name);
            cmd
        };
        let walk: Walk = serde_json::from_str(&run(command(&["--json"])))
            .unwrap_or_else(|e| panic!("winnet resolve --json {name}: {e}"));
        (walk, run(command(&[])))
    }
}

fn run(mut cmd: Command) -> String {
    let out = cmd.output().expect("run winnet resolve");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_ws2022_pod_resolves_by_the_windows_dns_client_rules_and_resolve_explains_them() {
    let s = setup("dcw", "ws2022");
    let conf = std::fs::read_to_string(format!("/etc/netns/{}/resolv.conf", s.client))
        .expect("hnsd wrote the pod's resolv.conf");
    assert_eq!(
        conf, "nameserver 127.0.0.53\noptions timeout:11 attempts:1\n",
        "the stub, no search line"
    );

    assert!(s.resolves("web"), "web: {}", s.context());
    assert_eq!(s.getent("web.default"), None, "{}", s.context());
    assert_eq!(s.getent("web-0.web"), None, "{}", s.context());
    assert!(
        s.resolves("web-0.web.default.svc.cluster.local"),
        "{}",
        s.context()
    );

    let (walk, text) = s.resolve("web");
    assert_eq!(walk.steps.len(), 1, "{text}");
    assert_eq!(walk.steps[0].name, "web.default.svc.cluster.local.");
    assert!(matches!(
        walk.steps[0].reason,
        Reason::SingleLabelSuffix { index: 0, .. }
    ));
    assert_eq!(
        walk.steps[0].server.as_deref(),
        Some(format!("{}:53", pod_ip(0, 53)).as_str()),
        "the query crossed the switch to the DNS pod"
    );
    assert_eq!(walk.end, End::Answered, "{text}");
    assert!(text.contains("Windows DNS Client (ws2022)"), "{text}");

    let (walk, text) = s.resolve("web-0.web");
    assert_eq!(walk.steps.len(), 1, "{text}");
    assert_eq!(walk.steps[0].name, "web-0.web.");
    assert_eq!(walk.steps[0].reason, Reason::MultiLabelAsIs);
    assert_eq!(
        (walk.end, walk.result.clone()),
        (End::MultiLabelQueriedOnce, Outcome::NxDomain),
        "{text}"
    );
    assert!(text.contains("Windows appends no suffix"), "{text}");

    let (walk, _) = s.resolve("web.default");
    assert_eq!(walk.end, End::MultiLabelQueriedOnce);

    // A namespace this hnsd has no endpoint in is named in the error.
    let out = Command::new(env!("CARGO_BIN_EXE_winnet"))
        .args(["resolve", "--netns", "wnt-dns-nothere", "--hns-socket"])
        .arg(s.c.lab.hnsds[0].socket())
        .arg("web")
        .output()
        .expect("run winnet resolve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(
            "no endpoint of this hnsd is in the network namespace /run/netns/wnt-dns-nothere"
        ),
        "{err}"
    );
}

#[test]
fn on_overlay_the_queries_cross_the_switch_the_same_way() {
    let s = setup_in("dco", Mode::Overlay, "ws2022");
    assert!(s.resolves("web"), "{}", s.context());
    assert_eq!(s.getent("web-0.web"), None, "{}", s.context());
    let (walk, text) = s.resolve("web");
    assert_eq!(walk.end, End::Answered, "{text}");
}

#[test]
fn the_pods_dns_client_comes_back_with_a_restarted_hnsd() {
    let mut s = setup("dcr", "ws2025");
    assert!(s.resolves("web"), "{}", s.context());
    s.c.lab.hnsds[0].restart();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.resolves("web") {
        assert!(
            Instant::now() < deadline,
            "the stub did not come back within 20 s: {}",
            s.context()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(s.getent("web-0.web"), None, "still the Windows rules");
}

#[test]
fn an_unrestricted_pod_resolves_as_a_linux_pod() {
    let s = setup("dcu", "unrestricted");
    let conf = std::fs::read_to_string(format!("/etc/netns/{}/resolv.conf", s.client))
        .expect("hnsd wrote the pod's resolv.conf");
    assert_eq!(
        conf,
        format!(
            "nameserver {}\nsearch {}\noptions ndots:5\n",
            pod_ip(0, 53),
            SEARCH.join(" ")
        )
    );
    for name in [
        "web",
        "web.default",
        "web-0.web",
        "web-0.web.default.svc.cluster.local",
    ] {
        assert!(s.resolves(name), "{name}: {}", s.context());
    }
    let (walk, text) = s.resolve("web-0.web");
    assert!(text.contains("glibc res_search"), "{text}");
    assert_eq!(walk.steps[0].name, "web-0.web.default.svc.cluster.local.");
    assert!(matches!(
        walk.steps[0].reason,
        Reason::Search { index: 0, .. }
    ));
    assert_eq!(walk.end, End::Answered);

    // A Linux pod outside hnsd: the same rules, walked by winnet from the pod's namespace.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_winnet"));
    cmd.args([
        "resolve",
        "--json",
        "--netns",
        &s.client,
        "kubernetes.default",
    ]);
    let walk: Walk = serde_json::from_str(&run(cmd)).expect("walk");
    let tried: Vec<&str> = walk.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        tried,
        [
            "kubernetes.default.default.svc.cluster.local.",
            "kubernetes.default.svc.cluster.local."
        ]
    );
    assert!(walk.result.is_answer());
}

#[test]
fn resolve_names_what_is_wrong_with_its_arguments() {
    for (args, needle) in [
        (vec!["resolve", "--netns", "a/b", "web"], "--netns"),
        (vec!["resolve", "--netns", "x", "a..b"], "NAME"),
        (
            vec!["resolve", "--netns", "x", "--type", "ANY", "web"],
            "--type",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_winnet"))
            .args(&args)
            .output()
            .expect("run winnet");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
