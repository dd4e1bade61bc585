//! Network namespaces (root): made as `ip netns add` makes them, entered by a thread, run in,
//! and removed; and the resolv.conf `ip netns exec` shows inside one.

mod common;

use std::net::IpAddr;

use common::{TestNs, ip, require_root};
use host::HostError;
use host::netlink::Netlink;
use host::netns::Netns;

#[test]
fn a_new_namespace_has_only_lo_up_and_iproute2_sees_it() {
    let t = TestNs::new("lo");
    assert!(t.ns.exists());
    assert_eq!(t.ns.name(), Some(t.name.as_str()));
    assert!(!t.ns.is_current(), "the test thread stays where it was");

    let (inside, links) =
        t.ns.run(|| Ok((t.ns.is_current(), Netlink::open()?.links()?)))
            .expect("run in the namespace");
    assert!(inside, "run's thread is in the namespace");
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].name, "lo");
    assert!(links[0].up, "lo is brought up");

    assert!(ip(&["netns", "list"]).contains(&t.name));
    let seen = ip(&["netns", "exec", &t.name, "ip", "-o", "link", "show"]);
    assert_eq!(seen.lines().count(), 1, "{seen}");
    assert!(seen.contains("lo:") && seen.contains("UP"), "{seen}");
}

#[test]
fn creating_a_namespace_twice_is_refused() {
    let t = TestNs::new("twice");
    let e = Netns::create(&t.name).expect_err("second create");
    assert!(matches!(e, HostError::AlreadyExists(_)), "{e}");
    assert!(e.to_string().contains(&t.name), "{e}");
    assert!(t.ns.exists(), "the first one is untouched");
}

#[test]
fn run_borrows_returns_errors_and_resumes_panics() {
    let t = TestNs::new("run");
    let mut seen = Vec::new();
    t.ns.run(|| {
        seen.push(Netlink::open()?.links()?.len());
        Ok(())
    })
    .expect("run");
    assert_eq!(seen, [1]);

    let e =
        t.ns.run(|| Err::<(), _>(HostError::Invalid("from inside".into())))
            .expect_err("error from the closure");
    assert_eq!(e.to_string(), "from inside");

    let panicked =
        std::panic::catch_unwind(|| t.ns.run(|| -> Result<(), HostError> { panic!("boom") }));
    assert!(panicked.is_err(), "a panic inside reaches the caller");
}

#[test]
fn sockets_made_inside_stay_inside() {
    let t = TestNs::new("sock");
    let mut nl = t.ns.run(Netlink::open).expect("netlink in the namespace");
    // Used from the test thread, the socket still reads the namespace's tables.
    let links = nl.links().expect("links");
    assert_eq!(
        links.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["lo"]
    );
}

#[test]
fn enter_moves_the_calling_thread() {
    let t = TestNs::new("enter");
    let ns = t.ns.clone();
    let links = std::thread::spawn(move || -> Result<_, HostError> {
        ns.enter()?;
        assert!(ns.is_current());
        Netlink::open()?.links()
    })
    .join()
    .expect("thread")
    .expect("enter and list");
    assert_eq!(links.len(), 1);
    assert!(!t.ns.is_current());
}

#[test]
fn delete_is_idempotent_and_a_deleted_namespace_cannot_be_entered() {
    require_root();
    let name = format!("hosttest-{}-del", std::process::id());
    let ns = Netns::create(&name).expect("create");
    ns.delete().expect("delete");
    assert!(!ns.exists());
    ns.delete().expect("delete again");
    let e = ns.run(|| Ok(())).expect_err("run in a deleted namespace");
    assert!(matches!(e, HostError::NotFound(_)), "{e}");
    assert!(e.to_string().contains(&name), "{e}");
}

#[test]
fn a_file_that_is_not_a_namespace_is_refused() {
    require_root();
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let e = Netns::from_path(file.path())
        .run(|| Ok(()))
        .expect_err("not a namespace");
    assert!(matches!(e, HostError::Invalid(_)), "{e}");
    assert!(e.to_string().contains("not a network namespace"), "{e}");
}

#[test]
fn bad_names_are_refused_before_anything_is_made() {
    for bad in ["", "..", "a/b"] {
        let e = Netns::create(bad).expect_err(bad);
        assert!(matches!(e, HostError::Invalid(_)), "{bad:?}: {e}");
    }
}

#[test]
fn ip_netns_exec_shows_the_namespace_its_resolv_conf() {
    let t = TestNs::new("dns");
    let servers: Vec<IpAddr> = vec!["10.96.0.10".parse().expect("ip")];
    host::resolv::write(
        &t.name,
        &servers,
        &["svc.cluster.local".into()],
        &["ndots:5".into()],
    )
    .expect("write resolv.conf");
    let seen = ip(&["netns", "exec", &t.name, "cat", "/etc/resolv.conf"]);
    assert_eq!(
        seen,
        "nameserver 10.96.0.10\nsearch svc.cluster.local\noptions ndots:5\n"
    );
    host::resolv::remove(&t.name).expect("remove");
    assert!(!std::path::Path::new("/etc/netns").join(&t.name).exists());
}
