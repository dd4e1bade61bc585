//! Every verb that prints ends quietly when its reader goes away, as `ip`, `kubectl` and
//! `ripgrep` do: `winnet cluster status | head -1` prints no panic, no "Broken pipe", no
//! backtrace, and exits 141 (128 + SIGPIPE, what a shell reports for `ip` ended by the pipe),
//! never 101. Each verb runs twice: with a stdout whose reader is gone before it starts (the
//! first write fails, every time), and read for one line and then closed (`| head -1`). The
//! verbs that read a node's switch (`trace`, `vfpctrl`, `resolve`) run against the lab's node
//! (root); the rest need no root: hnsd serves objects only, the demo runs in memory.

mod lab;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn winnet(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_winnet"));
    cmd.args(args)
        .env_remove("HNS_SOCKET")
        .env("RUST_BACKTRACE", "1");
    cmd
}

/// Runs the verb with a stdout nobody reads (the pipe's reader closed before it starts).
fn with_reader_gone(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    winnet(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run winnet")
}

/// Runs the verb, reads one line of its stdout and closes it.
fn with_head_1(args: &[&str]) -> (String, Output) {
    let mut child = winnet(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run winnet");
    let mut first = String::new();
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout)
        .read_line(&mut first)
        .expect("read a line");
    (first, child.wait_with_output().expect("wait"))
}

/// The verb prints, and ends quietly both ways: with its usual exit status (when it wrote
/// everything before the reader left; `--help`, whose printing clap ends quietly) or with 141.
fn ends_quietly(args: &[&str]) {
    let usual = winnet(args).output().expect("run winnet");
    assert!(!usual.stdout.is_empty(), "{args:?} printed nothing");
    let (first, out) = with_head_1(args);
    assert!(!first.is_empty(), "{args:?} printed nothing");
    quiet(args, "| head -1", &out, &usual);
    quiet(args, "reader gone", &with_reader_gone(args), &usual);
}

fn quiet(args: &[&str], how: &str, out: &Output, usual: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    for noise in ["panicked", "Broken pipe", "backtrace", "failed printing"] {
        assert!(
            !err.contains(noise),
            "{args:?} {how}: {noise:?} on stderr:\n{err}"
        );
    }
    assert!(
        out.status.code() == Some(141) || out.status.code() == usual.status.code(),
        "{args:?} {how}: exit {:?}, want 141 or the usual {:?}:\n{err}",
        out.status,
        usual.status
    );
}

#[test]
fn help_of_every_verb_ends_quietly() {
    ends_quietly(&["--help"]);
    for verb in [
        "hnsd",
        "hns",
        "flanneld",
        "proxy",
        "dns",
        "install-cni",
        "trace",
        "vfpctrl",
        "resolve",
        "demo",
        "doctor",
        "collect",
        "cluster",
    ] {
        ends_quietly(&[verb, "--help"]);
    }
}

#[test]
fn the_simulated_demo_ends_quietly_in_every_form() {
    for form in [&[][..], &["--markdown"], &["--json"]] {
        let mut args = vec!["demo", "--simulate"];
        args.extend_from_slice(form);
        ends_quietly(&args);
        let out = with_reader_gone(&args);
        assert_eq!(
            out.status.code(),
            Some(141),
            "{args:?}: the matrix was not written"
        );
    }
}

#[test]
fn install_cni_ends_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().to_str().expect("path");
    ends_quietly(&["install-cni", d]);
    let out = with_reader_gone(&["install-cni", d]);
    assert_eq!(out.status.code(), Some(141));
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/hns")
        .join(name)
        .to_str()
        .expect("path")
        .to_string()
}

fn stdout_of(args: &[&str]) -> String {
    let out = winnet(args).output().expect("run winnet");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

#[test]
fn hnsd_repair_ends_quietly() {
    // An empty store: the first run says what it dropped and makes a whole one, the next say
    // the store is whole; each prints its report.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(hns::store::FILE_NAME), b"").expect("write the store");
    let d = dir.path().to_str().expect("path");
    ends_quietly(&["hnsd", "--repair", "--state-dir", d]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verbs_that_ask_hnsd_end_quietly() {
    let hnsd = testkit::hnsd::Hnsd::start(hns::Profile::Ws2022).await;
    let socket = hnsd.socket();
    let s = socket.to_str().expect("path");
    let hns = |rest: &[&str]| {
        let mut a = vec!["hns", "--hns-socket", s];
        a.extend_from_slice(rest);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let net = stdout_of(&as_str(&hns(&[
        "create",
        "networks",
        "-f",
        &example("network.json"),
        "-o",
        "id",
    ])));
    let set = format!("HostComputeNetwork={}", net.trim());
    stdout_of(&as_str(&hns(&[
        "create",
        "endpoints",
        "-f",
        &example("endpoint.json"),
        "--set",
        &set,
    ])));
    for rest in [
        &["list", "networks"][..],
        &["list", "endpoints", "-o", "json"],
        &["list", "endpoints", "-o", "id"],
        &["dump"],
    ] {
        ends_quietly(&as_str(&hns(rest)));
    }
    let bundle = hnsd.dir().join("bundle.tar");
    let b = bundle.to_str().expect("path");
    let collect = ["collect", "--node", "n1", "--hns-socket", s, "-o", b];
    ends_quietly(&collect);
    let out = with_reader_gone(&collect);
    assert_eq!(
        out.status.code(),
        Some(141),
        "collect wrote its bundle but not its line"
    );
    ends_quietly(&["doctor", "--bundle", b, "--all"]);
    ends_quietly(&["doctor", "--bundle", b, "--all", "-o", "json"]);
}

fn as_str(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn the_verbs_that_read_a_nodes_switch_end_quietly() {
    testkit::require_root("the lab's node (namespaces, TAPs)");
    let mut c = lab::cluster::Cluster::new("cs", 1, lab::cluster::Mode::L2Bridge, "ws2022");
    let ns = c.pod(0, "pa", 10);
    c.pod(0, "pb", 11);
    let h = &c.lab.hnsds[0];
    let node = h.node().expect("a node's hnsd").to_string();
    let s = h.socket().to_str().expect("path").to_string();
    let trace = [
        "trace",
        "--node",
        &node,
        "--hns-socket",
        &s,
        "--from",
        "pa",
        "--to",
        "10.244.1.11:80",
    ];
    ends_quietly(&trace);
    for form in ["--summary", "--json"] {
        ends_quietly(&[&trace[..], &[form]].concat());
    }
    ends_quietly(&["vfpctrl", "--hns-socket", &s, "--list-port"]);
    let rules = [
        "vfpctrl",
        "--hns-socket",
        &s,
        "--port",
        "pa_cbr0",
        "--list-rule",
    ];
    ends_quietly(&rules);
    ends_quietly(&[&rules[..], &["--json"]].concat());
    // A Linux pod's walk (glibc's rules, by the namespace's resolv.conf, which the lab removes
    // with the namespace); it prints as a Windows pod's walk does.
    let conf = std::path::Path::new("/etc/netns").join(&ns);
    std::fs::create_dir_all(&conf).expect("mkdir /etc/netns/NS");
    std::fs::write(
        conf.join("resolv.conf"),
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
    )
    .expect("write resolv.conf");
    ends_quietly(&["resolve", "web", "--netns", &ns]);
    ends_quietly(&["resolve", "web", "--netns", &ns, "--json"]);
}
