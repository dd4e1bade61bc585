//! Both rule sets against every row of the reference's "Contrast" table (windows-dns.md §B/C:
//! a pod in namespace `default`, zone `cluster.local`), with a fake cluster DNS that answers
//! as CoreDNS's kubernetes plugin does for those names.

use dnsclient::resolve::walk_with;
use dnsclient::{AskedName, End, Outcome, Reason, Rules, Walk};

const SEARCH: [&str; 3] = [
    "default.svc.cluster.local",
    "svc.cluster.local",
    "cluster.local",
];

fn names(v: &[&str]) -> Vec<AskedName> {
    v.iter()
        .map(|s| AskedName::parse(s).expect("name"))
        .collect()
}

fn windows() -> Rules {
    Rules::Windows {
        suffixes: names(&SEARCH),
        honoured: 1,
        profile: "ws2022".into(),
    }
}

fn linux() -> Rules {
    Rules::Glibc {
        search: names(&SEARCH),
        ndots: 5,
    }
}

/// The cluster DNS for A queries: the records that exist, the names that exist with no A
/// (a namespace, the zone's structure) as NODATA, everything else NXDOMAIN.
fn cluster_dns(name: &AskedName) -> Outcome {
    let fqdn = name.fqdn();
    let exists = [
        "kubernetes.default.svc.cluster.local.",
        "web.default.svc.cluster.local.",
        "web-0.web.default.svc.cluster.local.",
        "example.com.",
    ];
    let empty = [
        "default.svc.cluster.local.",
        "svc.cluster.local.",
        "cluster.local.",
    ];
    if exists.contains(&fqdn.as_str()) {
        Outcome::Answer {
            records: vec![format!("{fqdn} 30 IN A 10.96.0.1")],
        }
    } else if empty.contains(&fqdn.as_str()) {
        Outcome::NoData
    } else {
        Outcome::NxDomain
    }
}

fn walk(rules: &Rules, name: &str) -> Walk {
    let asked = AskedName::parse(name).expect("name");
    walk_with(rules, &asked, "A", "10.96.0.10:53", cluster_dns)
}

fn tried(w: &Walk) -> Vec<&str> {
    w.steps.iter().map(|s| s.name.as_str()).collect()
}

#[test]
fn kubernetes_single_label() {
    let l = walk(&linux(), "kubernetes");
    assert_eq!(tried(&l), ["kubernetes.default.svc.cluster.local."]);
    assert_eq!(l.end, End::Answered);
    let w = walk(&windows(), "kubernetes");
    assert_eq!(tried(&w), ["kubernetes.default.svc.cluster.local."]);
    assert_eq!(w.end, End::Answered);
    assert!(matches!(
        w.steps[0].reason,
        Reason::SingleLabelSuffix { index: 0, .. }
    ));
}

#[test]
fn kubernetes_dot_default() {
    let l = walk(&linux(), "kubernetes.default");
    assert_eq!(
        tried(&l),
        [
            "kubernetes.default.default.svc.cluster.local.",
            "kubernetes.default.svc.cluster.local."
        ]
    );
    assert!(l.result.is_answer());
    let w = walk(&windows(), "kubernetes.default");
    assert_eq!(tried(&w), ["kubernetes.default."]);
    assert_eq!(w.result, Outcome::NxDomain);
    assert_eq!(w.end, End::MultiLabelQueriedOnce);
}

#[test]
fn kubernetes_dot_default_dot_svc() {
    let l = walk(&linux(), "kubernetes.default.svc");
    assert_eq!(
        tried(&l),
        [
            "kubernetes.default.svc.default.svc.cluster.local.",
            "kubernetes.default.svc.svc.cluster.local.",
            "kubernetes.default.svc.cluster.local."
        ]
    );
    assert!(l.result.is_answer());
    let w = walk(&windows(), "kubernetes.default.svc");
    assert_eq!(tried(&w), ["kubernetes.default.svc."]);
    assert_eq!(
        (w.result.clone(), w.end),
        (Outcome::NxDomain, End::MultiLabelQueriedOnce)
    );
}

#[test]
fn kubernetes_fqdn_without_trailing_dot() {
    let l = walk(&linux(), "kubernetes.default.svc.cluster.local");
    assert_eq!(l.steps.len(), 4, "three suffixed queries, then as it is");
    assert_eq!(l.steps[3].reason, Reason::AsIsLast);
    assert!(l.result.is_answer());
    let w = walk(&windows(), "kubernetes.default.svc.cluster.local");
    assert_eq!(tried(&w), ["kubernetes.default.svc.cluster.local."]);
    assert!(w.result.is_answer());
}

#[test]
fn statefulset_pod_by_hostname_and_service() {
    let l = walk(&linux(), "web-0.web");
    assert_eq!(tried(&l), ["web-0.web.default.svc.cluster.local."]);
    assert!(l.result.is_answer());
    let w = walk(&windows(), "web-0.web");
    assert_eq!(tried(&w), ["web-0.web."]);
    assert_eq!(w.result, Outcome::NxDomain);
}

#[test]
fn external_name() {
    let l = walk(&linux(), "example.com");
    assert_eq!(
        tried(&l),
        [
            "example.com.default.svc.cluster.local.",
            "example.com.svc.cluster.local.",
            "example.com.cluster.local.",
            "example.com."
        ]
    );
    assert!(l.result.is_answer());
    let w = walk(&windows(), "example.com");
    assert_eq!(tried(&w), ["example.com."]);
    assert!(w.result.is_answer());
}

#[test]
fn a_trailing_dot_is_queried_as_it_is_only_by_both() {
    for rules in [linux(), windows()] {
        let w = walk(&rules, "web.");
        assert_eq!(tried(&w), ["web."]);
        assert_eq!(w.end, End::RootedQueriedOnce);
        assert_eq!(w.result, Outcome::NxDomain);
    }
}

#[test]
fn windows_honours_only_the_first_suffix_but_a_knob_widens_it() {
    // `svc` + svc.cluster.local would be NODATA; with one suffix honoured it is never tried.
    let w = walk(&windows(), "nothere");
    assert_eq!(tried(&w), ["nothere.default.svc.cluster.local."]);
    assert_eq!(w.end, End::SuffixesExhausted);
    let all = Rules::Windows {
        suffixes: names(&SEARCH),
        honoured: 3,
        profile: "ws2022".into(),
    };
    assert_eq!(walk(&all, "nothere").steps.len(), 3);
}

#[test]
fn a_windows_timeout_ends_the_walk_where_glibc_goes_on() {
    let asked = AskedName::parse("web").expect("name");
    let all = Rules::Windows {
        suffixes: names(&SEARCH),
        honoured: 3,
        profile: "ws2022".into(),
    };
    let w = walk_with(&all, &asked, "A", "s", |_| Outcome::Timeout);
    assert_eq!((w.steps.len(), w.end), (1, End::TimeoutEndsWalk));
    assert_eq!(w.result, Outcome::Timeout);
    let w = walk_with(&all, &asked, "A", "s", |_| Outcome::ServFail);
    assert_eq!((w.steps.len(), w.end), (1, End::ServerFailure));
    // glibc: a timeout stops the search list, then tries the name as it is.
    let l = walk_with(&linux(), &asked, "A", "s", |_| Outcome::Timeout);
    assert_eq!(tried(&l), ["web.default.svc.cluster.local.", "web."]);
    // glibc: SERVFAIL goes on to the next entry and is reported if nothing better came.
    let l = walk_with(&linux(), &asked, "A", "s", |n| {
        if n.labels().len() == 1 {
            Outcome::NxDomain
        } else {
            Outcome::ServFail
        }
    });
    assert_eq!(l.steps.len(), 4);
    assert_eq!(l.result, Outcome::ServFail);
}

#[test]
fn glibc_reports_nodata_over_a_later_nxdomain_and_stops_on_refusal() {
    let l = walk(&linux(), "svc");
    // svc.default.svc.cluster.local NX, svc.svc.cluster.local NX, svc.cluster.local NODATA, svc. NX
    assert_eq!(l.steps.len(), 4);
    assert_eq!(l.result, Outcome::NoData);
    let asked = AskedName::parse("web").expect("name");
    let l = walk_with(&linux(), &asked, "A", "s", |_| Outcome::Unreachable {
        why: "refused".into(),
    });
    assert_eq!((l.steps.len(), l.end), (1, End::ConnectionRefused));
}

#[test]
fn a_single_label_without_a_suffix_is_not_sent_by_windows() {
    let none = Rules::Windows {
        suffixes: Vec::new(),
        honoured: 1,
        profile: "ws2022".into(),
    };
    let w = walk(&none, "kubernetes");
    assert!(w.steps.is_empty());
    assert_eq!((w.end, w.result), (End::NoSuffix, Outcome::NxDomain));
}

#[test]
fn a_walk_renders_and_round_trips_through_json() {
    let w = walk(&windows(), "web-0.web");
    let text = w.to_string();
    assert!(text.contains("web-0.web (A)"), "{text}");
    assert!(text.contains("name with a dot: queried as it is"), "{text}");
    assert!(text.contains("NXDOMAIN"), "{text}");
    assert!(text.contains("Windows appends no suffix"), "{text}");
    let json = serde_json::to_string(&w).expect("json");
    let back: Walk = serde_json::from_str(&json).expect("back");
    assert_eq!(back, w);
}
