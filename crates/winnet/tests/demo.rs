//! The main job end to end (issue 8): `winnet demo` builds the mixed Windows + Linux cluster,
//! runs the flow matrix with real traffic and takes everything down, for both modes and for
//! a Windows build with its limitations and for `unrestricted`; the Linux node speaks standard
//! VXLAN (or plain routed frames) made by the Linux kernel itself. Root only (CI is root).

use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The local cluster has fixed names: one test at a time.
static CLUSTER: Mutex<()> = Mutex::new(());

fn winnet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_winnet"))
        .args(args)
        .output()
        .expect("run winnet")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the demo test builds namespaces and devices: run it as root (CI does)"
    );
}

/// What the cluster may leave behind: namespaces named wn-*, its directory.
fn leftovers() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let mut left: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with("wn-"))
        .map(String::from)
        .collect();
    if std::path::Path::new("/run/winnet/cluster").exists() {
        left.push("/run/winnet/cluster".into());
    }
    left
}

/// Takes the cluster down when dropped (a failing test leaves nothing).
struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        let _ = winnet(&["cluster", "down"]);
    }
}

#[test]
fn the_demo_matches_every_cell_in_both_modes_and_leaves_nothing_behind() {
    require_root();
    let _one = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let _down = Down;
    for mode in ["l2bridge", "overlay"] {
        for profile in ["ws2022", "unrestricted"] {
            let start = Instant::now();
            let out = winnet(&["demo", "--mode", mode, "--profile", profile, "--markdown"]);
            let t = text(&out);
            assert!(out.status.success(), "demo {mode} {profile} failed:\n{t}");
            assert!(!t.contains("MISMATCH"), "{t}");
            assert!(t.contains("| pod -> pod, across Windows nodes |"), "{t}");
            assert!(t.contains("| Windows pod -> Linux pod |"), "{t}");
            if profile == "ws2022" {
                assert!(
                    t.contains("fails (IcmpThroughOutboundNat)"),
                    "ws2022 shows its limitations as expected failures:\n{t}"
                );
                assert!(t.contains("fails (NodePortFromNode)"), "{t}");
            } else {
                assert!(
                    !t.contains("fails ("),
                    "unrestricted lifts every limitation:\n{t}"
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the demo took {:?}",
                start.elapsed()
            );
            assert_eq!(
                leftovers(),
                Vec::<String>::new(),
                "demo {mode} {profile} left something behind"
            );
        }
    }
}

#[test]
fn without_root_the_demo_runs_in_memory_and_says_so() {
    for mode in ["l2bridge", "overlay"] {
        let out = winnet(&["demo", "--simulate", "--mode", mode]);
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert!(t.contains("SIMULATED"), "{t}");
        assert!(t.contains("pod -> ClusterIP"), "{t}");
        assert!(!t.contains("MISMATCH"), "{t}");
    }
}

/// Frames the nodes behind fabric ports `ports` send while `during` runs.
fn capture(ports: &[&str], during: impl FnOnce() -> Output) -> (Output, Vec<Vec<u8>>) {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = ports
        .iter()
        .map(|port| {
            let sock = host::netns::Netns::named("wn-fabric")
                .run(|| host::packet_socket::PacketSocket::bind(port))
                .expect("capture on the fabric");
            let stop = done.clone();
            std::thread::spawn(move || {
                let mut frames = Vec::new();
                let mut buf = vec![0u8; 70_000];
                let end = Instant::now() + Duration::from_secs(15);
                while Instant::now() < end && !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    match sock.recv(&mut buf) {
                        Ok(n) if n > 10 => frames.push(buf[10..n].to_vec()),
                        _ => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
                frames
            })
        })
        .collect();
    let out = during();
    std::thread::sleep(Duration::from_millis(100));
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let frames = threads
        .into_iter()
        .flat_map(|t| t.join().expect("capture thread"))
        .collect();
    (out, frames)
}

/// An IPv4 packet's transport bytes, source, destination and protocol.
type Ipv4View<'a> = (&'a [u8], [u8; 4], [u8; 4], u8);

fn ipv4(f: &[u8]) -> Option<Ipv4View<'_>> {
    if f.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = f.get(14..)?;
    let ihl = usize::from(ip.first()? & 0xf) * 4;
    let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
    let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
    Some((ip.get(ihl..)?, src, dst, *ip.get(9)?))
}

fn mac(ns: &str, dev: &str) -> Vec<u8> {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "link", "show", dev])
        .output()
        .expect("ip");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    v[0]["address"]
        .as_str()
        .unwrap_or_default()
        .split(':')
        .filter_map(|h| u8::from_str_radix(h, 16).ok())
        .collect()
}

#[test]
fn the_linux_node_talks_to_windows_nodes_in_standard_frames_its_kernel_makes() {
    require_root();
    let _one = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let _down = Down;
    let curl = || {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                "wn-linux-1-web-3",
                "curl",
                "-sS",
                "--max-time",
                "5",
                "http://10.244.1.10:8080/",
            ])
            .output()
            .expect("curl")
    };
    // Overlay: the Linux kernel's VXLAN device encapsulates (VNI 4096, UDP 4789) toward the
    // Windows node's provider address and decapsulates what the Windows switch sends back.
    let up = winnet(&["cluster", "up", "--mode", "overlay"]);
    assert!(up.status.success(), "{}", text(&up));
    let (out, frames) = capture(&["linux-1", "win-1"], curl);
    assert!(
        out.status.success(),
        "Linux pod -> Windows pod over VXLAN: {}",
        text(&out)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "from 10.244.3.10"
    );
    let vxlan: Vec<(&[u8], [u8; 4], [u8; 4])> = frames
        .iter()
        .filter_map(|f| ipv4(f))
        .filter(|(l4, _, _, p)| *p == 17 && l4.get(2..4) == Some(&[0x12, 0xb5]))
        .map(|(l4, s, d, _)| (l4, s, d))
        .collect();
    let from_linux: Vec<_> = vxlan
        .iter()
        .filter(|(_, s, _)| *s == [192, 168, 77, 21])
        .collect();
    assert!(
        !from_linux.is_empty(),
        "no VXLAN from the Linux node ({} frames)",
        frames.len()
    );
    for (l4, _, d) in &from_linux {
        assert_eq!(*d, [192, 168, 77, 11], "to win-1's provider address");
        assert_eq!(&l4[8..12], &[0x08, 0, 0, 0], "VXLAN flags: VNI present");
        assert_eq!(&l4[12..15], &[0x00, 0x10, 0x00], "VNI 4096");
        let inner = ipv4(&l4[16..]).expect("inner IPv4");
        assert_eq!(
            inner.1,
            [10, 244, 3, 10],
            "the Linux pod's own address inside"
        );
        assert_eq!(
            &l4[16..22],
            &[0x00, 0x15, 0x5d, 0xdd, 0x00, 0x01],
            "inner destination is win-1's DR MAC"
        );
    }
    assert!(
        vxlan
            .iter()
            .any(|(_, s, d)| *s == [192, 168, 77, 11] && *d == [192, 168, 77, 21]),
        "the Windows switch answered in VXLAN to the Linux node"
    );
    let down = winnet(&["cluster", "down"]);
    assert!(down.status.success(), "{}", text(&down));

    // L2Bridge (host-gw): plain routed frames, the Linux node's MAC to win-1's host MAC.
    let up = winnet(&["cluster", "up", "--mode", "l2bridge"]);
    assert!(up.status.success(), "{}", text(&up));
    let linux_mac = mac("wn-linux-1", "eth0");
    let win_mac = mac("wn-win-1", "vEthernet-eth0");
    let (out, frames) = capture(&["linux-1", "win-1"], curl);
    assert!(
        out.status.success(),
        "Linux pod -> Windows pod, routed: {}",
        text(&out)
    );
    let routed: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|f| ipv4(f).is_some_and(|(_, s, _, _)| s == [10, 244, 3, 10]))
        .collect();
    assert!(
        !routed.is_empty(),
        "no frame from the Linux pod on the fabric"
    );
    for f in routed {
        assert_eq!(f[6..12], linux_mac[..], "routed by the Linux node");
        assert_eq!(
            f[0..6],
            win_mac[..],
            "to win-1's host MAC (its host-gw route)"
        );
    }
}
