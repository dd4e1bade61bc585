//! winnet's win-bridge driven by containerd (Debian's 1.6) through its CRI plugin, as a
//! kubelet drives it: a pod sandbox made and removed with the plugin from the CNI config
//! directory, on a Windows node (hnsd serving a namespace with a NIC) whose network is made
//! through the HNS API as flanneld makes it. containerd runs with its own root, state and
//! socket; the pause image is built from the host's static busybox and imported with `ctr`
//! (no registry is reachable). Root only (CI is).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Node;
use common::cri::{Cri, PodSandboxConfig, PodSandboxMetadata, PortMapping};
use common::engines::{BUSYBOX, require};

const NET: &str = "wntpod";
const PAUSE: &str = "localhost/wnt-eng-pause:latest";

/// A node with hnsd and a containerd of its own. `Drop` removes the sandboxes the test made
/// (their CNI DELs reach hnsd), stops containerd, then the node goes.
struct Containerd {
    node: Node,
    daemon: Option<Child>,
    cri: Option<Cri>,
    sandboxes: Vec<String>,
    /// CRI's namespaces that existed before this containerd started (not ours to remove).
    netns_before: BTreeSet<String>,
}

impl Containerd {
    fn start() -> Containerd {
        for (program, package) in [
            ("containerd", "containerd"),
            ("ctr", "containerd"),
            ("containerd-shim-runc-v2", "containerd"),
            ("runc", "runc"),
            ("tar", "tar"),
            ("sha256sum", "coreutils"),
        ] {
            require(program, package);
        }
        let node = Node::start();
        node.host_gw(NET);
        let mut c = Containerd {
            node,
            daemon: None,
            cri: None,
            sandboxes: Vec::new(),
            netns_before: cri_netns(),
        };
        let conf_dir = c.dir().join("cni-conf");
        std::fs::create_dir_all(&conf_dir).expect("cni conf dir");
        std::fs::write(
            conf_dir.join(format!("10-{NET}.conflist")),
            c.node.engine_conflist(NET).to_string(),
        )
        .expect("write the conflist");
        std::fs::write(c.dir().join("config.toml"), c.config()).expect("containerd config");
        let log = std::fs::File::create(c.dir().join("containerd.log")).expect("log");
        c.daemon = Some(
            Command::new("containerd")
                .arg("--config")
                .arg(c.dir().join("config.toml"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start containerd"),
        );
        c.cri = Some(c.wait_for_cri());
        c.import_pause();
        c
    }

    fn dir(&self) -> &Path {
        self.node.dir.path()
    }

    fn socket(&self) -> PathBuf {
        self.dir().join("containerd/containerd.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("containerd.log")).unwrap_or_default()
    }

    /// containerd's configuration: its own root, state and sockets; CRI with the node's plugin
    /// directory and the conflist directory, the native snapshotter (no overlay mounts
    /// needed), runc with its state in ours, and the pause image the test imports.
    fn config(&self) -> String {
        let d = self.dir().join("containerd");
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        format!(
            "version = 2\n\
             root = \"{root}\"\n\
             state = \"{state}\"\n\
             disabled_plugins = [\"io.containerd.snapshotter.v1.btrfs\", \
             \"io.containerd.snapshotter.v1.zfs\", \"io.containerd.snapshotter.v1.devmapper\", \
             \"io.containerd.snapshotter.v1.aufs\", \"io.containerd.snapshotter.v1.overlayfs\"]\n\
             [grpc]\n  address = \"{sock}\"\n\
             [ttrpc]\n  address = \"{sock}.ttrpc\"\n\
             [{cri}]\n  sandbox_image = \"{PAUSE}\"\n\
             # Sandboxed machines (gVisor CI) refuse the pause container's oom_score_adj of\n\
             # -998; keep the caller's instead.\n  restrict_oom_score_adj = true\n\
             [{cri}.cni]\n  bin_dir = \"{bin}\"\n  conf_dir = \"{conf}\"\n\
             [{cri}.containerd]\n  snapshotter = \"native\"\n  default_runtime_name = \"runc\"\n\
             [{cri}.containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\
             [{cri}.containerd.runtimes.runc.options]\n  Root = \"{runc}\"\n",
            root = d.join("root").display(),
            state = d.join("state").display(),
            runc = d.join("runc").display(),
            sock = self.socket().display(),
            bin = self.node.single_plugin_dir().display(),
            conf = self.dir().join("cni-conf").display(),
        )
    }

    /// Waits until CRI answers `Version` on containerd's socket.
    fn wait_for_cri(&self) -> Cri {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = self.node.hns(async {
                let cri = Cri::connect(self.socket())
                    .await
                    .map_err(|e| e.to_string())?;
                let v = cri.version().await.map_err(|e| e.to_string())?;
                Ok::<_, String>((cri, v))
            });
            match answer {
                Ok((cri, (name, _))) => {
                    assert_eq!(name, "containerd");
                    return cri;
                }
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "containerd's CRI did not answer: {e}\n{}",
                    self.log()
                ),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Builds the pause image (a `docker save` archive: the static busybox running `sleep`)
    /// and imports it into CRI's namespace with `ctr`.
    fn import_pause(&self) {
        let archive = pause_image(self.dir());
        testkit::cmd::ok(
            Command::new("ctr")
                .arg("--address")
                .arg(self.socket())
                .args(["--namespace", "k8s.io", "images", "import"])
                .args(["--snapshotter", "native"])
                .arg(&archive),
        );
    }

    fn cri(&self) -> &Cri {
        self.cri.as_ref().expect("CRI connected")
    }

    fn run_pod(&mut self, name: &str, port_mappings: Vec<PortMapping>) -> String {
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            log_directory: String::new(),
            port_mappings,
        };
        let id = self
            .node
            .hns(self.cri().run_pod_sandbox(config))
            .unwrap_or_else(|e| {
                panic!(
                    "RunPodSandbox: {e}\ncontainerd: {}\nhnsd: {}",
                    self.log(),
                    self.node.hnsd_log()
                )
            });
        self.sandboxes.push(id.clone());
        id
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let Some(cri) = &self.cri {
            let listed = self.node.hns(cri.list_pod_sandboxes()).unwrap_or_default();
            for id in self.sandboxes.iter().chain(&listed) {
                let _ = self.node.hns(cri.stop_pod_sandbox(id));
                let _ = self.node.hns(cri.remove_pod_sandbox(id));
            }
        }
        self.cri = None;
        if let Some(mut d) = self.daemon.take() {
            // SIGTERM: containerd shuts down cleanly (its sandboxes are gone already).
            if let Ok(pid) = i32::try_from(d.id()) {
                // SAFETY: kill has no memory preconditions; pid is our own child.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(d.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
        // What a failed RunPodSandbox can leave: shims started for our socket, and the
        // namespace CRI made (it does not always remove it when the sandbox fails to start).
        kill_processes_naming(&self.socket());
        for ns in cri_netns().difference(&self.netns_before) {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(ns));
        }
    }
}

/// The namespaces containerd's CRI makes (`/run/netns/cni-<uuid>`).
fn cri_netns() -> BTreeSet<String> {
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cni-"))
        .collect()
}

/// Kills the processes whose command line names `path` (the shims of our containerd: they
/// are started with its socket's address, unique to this test).
fn kill_processes_naming(path: &Path) {
    let needle = path.to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&needle) {
            // SAFETY: kill has no memory preconditions; the process is one our containerd
            // started for this test.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A `docker save` archive of the pause image: one layer (busybox as `/bin/sleep`), a config
/// whose entrypoint sleeps, and the manifest naming it [`PAUSE`]; its path.
fn pause_image(dir: &Path) -> PathBuf {
    let img = dir.join("pause-image");
    let root = dir.join("pause-rootfs");
    std::fs::create_dir_all(root.join("bin")).expect("pause rootfs");
    std::fs::create_dir_all(&img).expect("pause image dir");
    std::fs::copy(BUSYBOX, root.join("bin/sleep")).expect("copy busybox");
    tar(&root, &img.join("layer.tar"));
    let layer = sha256(&img.join("layer.tar"));
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/bin/sleep", "2147483647"]},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{layer}")]},
    });
    std::fs::write(img.join("config.json"), config.to_string()).expect("config");
    let config_name = format!("{}.json", sha256(&img.join("config.json")));
    std::fs::rename(img.join("config.json"), img.join(&config_name)).expect("rename config");
    let manifest = serde_json::json!([{
        "Config": config_name, "RepoTags": [PAUSE], "Layers": ["layer.tar"],
    }]);
    std::fs::write(img.join("manifest.json"), manifest.to_string()).expect("manifest");
    let archive = dir.join("pause.tar");
    tar(&img, &archive);
    archive
}

fn tar(dir: &Path, to: &Path) {
    let ok = Command::new("tar")
        .arg("-C")
        .arg(dir)
        .arg("-cf")
        .arg(to)
        .arg(".")
        .status()
        .expect("run tar")
        .success();
    assert!(ok, "tar of {} failed", dir.display());
}

fn sha256(file: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(file)
        .output()
        .expect("run sha256sum");
    assert!(out.status.success(), "sha256sum {}", file.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_cri_pod_sandbox_is_made_and_removed_with_win_bridge() {
    let mut c = Containerd::start();
    let http = PortMapping {
        protocol: 0,
        container_port: 80,
        host_port: 18090,
        host_ip: String::new(),
    };
    let id = c.run_pod("web", vec![http]);
    let status = c
        .node
        .hns(c.cri().pod_sandbox_status(&id))
        .expect("PodSandboxStatus");
    assert!(status.ready, "{status:?}");

    // The sandbox's endpoint in HNS: named after it, with the address CRI reports, in the
    // namespace containerd made, with the pod's port mapping as a PortMapping policy.
    let ep = c
        .node
        .endpoints()
        .into_iter()
        .find(|e| e.name == format!("{id}_{NET}"))
        .unwrap_or_else(|| panic!("no endpoint for sandbox {id}: {:?}", c.node.endpoints()));
    assert_eq!(status.ip, ep.ips().next().expect("address").to_string());
    let ns = c
        .node
        .hns(
            c.node
                .client()
                .get_namespace_by_id(ep.host_compute_namespace),
        )
        .expect("the endpoint's namespace");
    assert!(Path::new(&ns.linux_netns).exists(), "{}", ns.linux_netns);
    let mapped = ep.policies.iter().any(|p| {
        matches!(p, hcn::EndpointPolicy::PortMapping(m)
            if m.external_port == 18090 && m.internal_port == 80 && m.protocol == 6)
    });
    assert!(mapped, "no PortMapping 18090->80: {:?}", ep.policies);
    assert_eq!(c.node.allocations(NET).len(), 1);

    c.node
        .hns(c.cri().stop_pod_sandbox(&id))
        .expect("StopPodSandbox");
    c.node
        .assert_no_pods_left(NET, std::slice::from_ref(&ns.linux_netns));
    c.node
        .hns(c.cri().remove_pod_sandbox(&id))
        .expect("RemovePodSandbox");
    c.sandboxes.clear();
    c.node.assert_no_pods_left(NET, &[ns.linux_netns]);
}
