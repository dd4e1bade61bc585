//! winnet's win-bridge driven by a real engine: Debian's podman 4.3 with its CNI backend and
//! runc, a conflist of win-bridge + host-local, on a Windows node (hnsd serving a namespace
//! with a NIC) whose network is made through the HNS API as flanneld makes it. Podman gets
//! its own root, run root, tmp dir and config (CONTAINERS_CONF), so it does not touch the
//! machine's podman state. Root only (CI is).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::Node;
use common::engines::{NODE_IP, OUTSIDE_IP, busybox_rootfs, peer_address, require};

const NET: &str = "wntpod";
const IMAGE: &str = "localhost/wnt-eng-busybox:latest";

/// Podman keeps the lock of every container on the machine in one shared memory segment
/// (root's is this one), whatever `--root` says. Each podman opens it, and when it is missing
/// creates it exclusively, with nothing between finding it missing and creating it: podmans
/// started together on a machine where podman never ran all find it missing, and all but one
/// fail ("failed to create 2048 locks in /libpod_lock: file exists"); one that opens it while
/// it is being made reads it half made. On a machine, podman's first command runs alone and
/// makes it, and every later podman opens it. The tests do the same: see `Podman::first`.
const LOCK_SEGMENT: &str = "/dev/shm/libpod_lock";

/// A node with hnsd and a podman of its own; `Drop` removes every container first (so their
/// DELs reach hnsd), then the node goes.
struct Podman {
    node: Node,
    /// Container namespaces seen (their `SandboxKey`), to check they are gone.
    netns: Vec<String>,
}

impl Podman {
    fn start() -> Podman {
        for (program, package) in [
            ("podman", "podman"),
            ("runc", "runc"),
            ("conmon", "conmon"),
            ("tar", "tar"),
        ] {
            require(program, package);
        }
        let node = Node::start();
        node.host_gw(NET);
        let p = Podman {
            node,
            netns: Vec::new(),
        };
        let conf_dir = p.dir().join("cni-conf");
        std::fs::create_dir_all(&conf_dir).expect("cni conf dir");
        std::fs::write(
            conf_dir.join(format!("{NET}.conflist")),
            p.node.engine_conflist(NET).to_string(),
        )
        .expect("write the conflist");
        std::fs::write(p.dir().join("containers.conf"), p.containers_conf()).expect("conf");
        let tar = busybox_rootfs(p.dir());
        p.first(&["import", "--quiet", &tar.to_string_lossy(), IMAGE]);
        p
    }

    /// The test's first podman command, which must succeed. Whether the machine has podman's
    /// lock segment is asked under a lock every podman test takes; when it has none, this
    /// podman makes it alone, still under the lock, as the first podman on a machine does.
    fn first(&self, args: &[&str]) -> String {
        let mut alone = Some(testkit::lock::exclusive("winnet-tests-podman"));
        if Path::new(LOCK_SEGMENT).exists() {
            alone = None;
        }
        let out = self.ok(args);
        drop(alone);
        out
    }

    fn dir(&self) -> &Path {
        self.node.dir.path()
    }

    /// podman's configuration: the CNI backend on our plugin dir and conflist dir, runc, no
    /// systemd, and limits this machine allows (podman's defaults for nofile and nproc can
    /// exceed the hard limits of a sandboxed CI machine).
    fn containers_conf(&self) -> String {
        format!(
            "[containers]\n\
             default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
             [engine]\n\
             cgroup_manager = \"cgroupfs\"\n\
             events_logger = \"file\"\n\
             runtime = \"runc\"\n\
             [network]\n\
             network_backend = \"cni\"\n\
             cni_plugin_dirs = [\"{}\", \"{}\"]\n\
             network_config_dir = \"{}\"\n\
             default_network = \"{NET}\"\n",
            self.node.plugin_dir().display(),
            common::DEBIAN_CNI,
            self.dir().join("cni-conf").display(),
        )
    }

    fn command(&self, args: &[&str]) -> Command {
        let d = self.dir();
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_CONF", d.join("containers.conf"))
            .arg("--root")
            .arg(d.join("root"))
            .arg("--runroot")
            .arg(d.join("run"))
            .arg("--tmpdir")
            .arg(d.join("tmp"))
            .args(["--storage-driver", "vfs", "--cni-config-dir"])
            .arg(d.join("cni-conf"))
            .args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run podman")
    }

    /// `podman ARGS`, which must succeed; its standard output.
    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {args:?}: {}\nhnsd: {}",
            String::from_utf8_lossy(&out.stderr),
            self.node.hnsd_log()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `podman inspect --format F NAME`.
    fn inspect(&self, name: &str, format: &str) -> String {
        self.ok(&["inspect", "--format", format, name])
    }

    /// Starts a detached container `name` running `cmd`, with `extra` options; notes its
    /// namespace.
    fn start_container(&mut self, name: &str, extra: &[&str], cmd: &[&str]) -> String {
        let mut args = vec!["run", "-d", "--name", name];
        args.extend_from_slice(extra);
        args.push(IMAGE);
        args.extend_from_slice(cmd);
        self.ok(&args);
        self.note_netns(name)
    }

    /// Notes `name`'s namespace path (its SandboxKey) and returns its IP address.
    fn note_netns(&mut self, name: &str) -> String {
        let key = self.inspect(name, "{{.NetworkSettings.SandboxKey}}");
        if !key.is_empty() && !self.netns.contains(&key) {
            self.netns.push(key);
        }
        self.inspect(name, "{{.NetworkSettings.IPAddress}}")
    }

    /// The address HNS gave the endpoint of container `name`.
    fn hns_ip(&self, name: &str) -> String {
        let id = self.inspect(name, "{{.Id}}");
        let ep = self
            .node
            .endpoints()
            .into_iter()
            .find(|e| e.name == format!("{id}_{NET}"))
            .unwrap_or_else(|| panic!("no HNS endpoint for {name}"));
        ep.ips().next().expect("endpoint address").to_string()
    }

    #[track_caller]
    fn assert_nothing_left(&self) {
        assert_eq!(self.ok(&["ps", "-aq"]), "", "containers left");
        self.node.assert_no_pods_left(NET, &self.netns);
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let ids = self.run(&["ps", "-aq"]);
        for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
            let key = self.run(&["inspect", "--format", "{{.NetworkSettings.SandboxKey}}", id]);
            let key = String::from_utf8_lossy(&key.stdout).trim().to_string();
            if !key.is_empty() && !self.netns.contains(&key) {
                self.netns.push(key);
            }
        }
        let _ = self.run(&["rm", "-af", "-t", "0"]);
        // Whatever a failed test or a broken DEL left of the containers' namespaces.
        for ns in &self.netns {
            let name = ns.rsplit('/').next().unwrap_or_default();
            if name.is_empty() {
                continue;
            }
            if Path::new(ns).exists() {
                let _ = Command::new("ip").args(["netns", "del", name]).status();
            }
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(name));
        }
    }
}

const HTTPD: &[&str] = &["httpd", "-f", "-p", "80", "-h", "/www"];
const SLEEP: &[&str] = &["sleep", "100000"];

#[test]
fn two_containers_talk_through_the_switch_and_a_port_mapping_reaches_one_from_outside() {
    let mut p = Podman::start();
    let outside = p.node.outside();
    let server = p.start_container("server", &["-p", "18080:80"], HTTPD);
    let client = p.start_container("client", &[], SLEEP);

    // podman knows each address (from the ADD result's pod interface), and it is HNS's.
    assert_eq!(server, p.hns_ip("server"));
    assert_eq!(client, p.hns_ip("client"));
    assert_ne!(server, client);
    assert!(server.starts_with("10.244.1."), "{server}");
    let hosts = p.ok(&["exec", "client", "cat", "/etc/hosts"]);
    assert!(
        hosts
            .lines()
            .any(|l| l.starts_with(&client) && l.contains("client")),
        "no /etc/hosts entry for the container's address {client}:\n{hosts}"
    );
    // The pod's vNIC is the TAP hnsd made: eth0 with the address.
    let addr = p.ok(&["exec", "client", "ip", "-o", "-4", "addr", "show", "eth0"]);
    assert!(addr.contains(&format!("{client}/24")), "{addr}");

    // Container to container through winnet's switch: the server sees the client itself.
    let url = format!("http://{server}/cgi-bin/peer");
    let body = p.ok(&["exec", "client", "wget", "-q", "-O", "-", &url]);
    assert_eq!(peer_address(&body), client);

    // `-p 18080:80` from a machine outside the node: the PortMapping policy on the node's
    // address, the source kept.
    let url = format!("http://{NODE_IP}:18080/cgi-bin/peer");
    let out = Command::new("ip")
        .args(["netns", "exec", &outside, "curl", "-sS", "-m", "10", &url])
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {url} from outside: {}\nhnsd: {}",
        String::from_utf8_lossy(&out.stderr),
        p.node.hnsd_log()
    );
    assert_eq!(
        peer_address(&String::from_utf8_lossy(&out.stdout)),
        OUTSIDE_IP
    );

    p.ok(&["rm", "-f", "-t", "0", "server", "client"]);
    p.assert_nothing_left();
}

#[test]
fn restart_stop_and_rm_leave_no_hns_object_reservation_namespace_or_file() {
    let mut p = Podman::start();
    p.start_container("web", &["-p", "18081:80"], HTTPD);
    p.ok(&["restart", "-t", "0", "web"]);
    let ip = p.note_netns("web");
    assert_eq!(ip, p.hns_ip("web"), "after a restart");
    assert_eq!(
        p.node.allocations(NET).len(),
        1,
        "one address after restart"
    );
    assert_eq!(p.node.endpoints().len(), 2, "cbr0_ep and the container's");

    p.ok(&["stop", "-t", "0", "web"]);
    p.node.assert_no_pods_left(NET, &p.netns);

    p.ok(&["start", "web"]);
    p.note_netns("web");
    assert_eq!(p.node.endpoints().len(), 2);
    p.ok(&["rm", "-f", "-t", "0", "web"]);
    p.assert_nothing_left();
}

/// Runs `podman <args of name>` for every name at once; each must succeed.
fn in_parallel(p: &Podman, names: &[String], args: impl Fn(&str) -> Vec<String>) {
    let outs: Vec<Output> = std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|n| {
                let a = args(n);
                let mut cmd = p.command(&a.iter().map(String::as_str).collect::<Vec<_>>());
                s.spawn(move || cmd.output().expect("run podman"))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    for (n, out) in names.iter().zip(&outs) {
        assert!(
            out.status.success(),
            "podman {:?}: {}",
            args(n),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn ten_containers_started_and_removed_in_parallel_leave_nothing() {
    let mut p = Podman::start();
    let names: Vec<String> = (0..10).map(|i| format!("par{i}")).collect();
    in_parallel(&p, &names, |n| {
        ["run", "-d", "--name", n, IMAGE, "sleep", "100000"]
            .map(String::from)
            .to_vec()
    });
    let mut ips: Vec<String> = names.iter().map(|n| p.note_netns(n)).collect();
    for (n, ip) in names.iter().zip(&ips) {
        assert_eq!(*ip, p.hns_ip(n), "{n}");
    }
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 10, "ten distinct addresses: {ips:?}");
    assert_eq!(p.node.allocations(NET).len(), 10);

    in_parallel(&p, &names, |n| {
        ["rm", "-f", "-t", "0", n].map(String::from).to_vec()
    });
    p.assert_nothing_left();
}
