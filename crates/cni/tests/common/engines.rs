//! What the container-engine tests (podman, containerd) share: the node's network as flanneld's
//! host-gw backend makes it (through the HNS API), a machine outside the node, a small image
//! made from the host's own static busybox (no registry is reachable), and the checks that
//! nothing is left behind.

use std::path::{Path, PathBuf};
use std::process::Command;

use hcn::{Endpoint, Namespace, NamespaceType};
use serde_json::{Value, json};

use super::{DEBIAN_CNI, Node, ip};

/// Debian's busybox-static: every tool the test images need, in one static binary.
pub const BUSYBOX: &str = "/bin/busybox";
/// The node's address on its NIC (what `-p` mappings listen on) and the outside machine's.
pub const NODE_IP: &str = "192.168.99.11";
pub const OUTSIDE_IP: &str = "192.168.99.1";
/// The pod subnet of the node, its gateway (the host endpoint `cbr0_ep`, `.2` as win-bridge
/// expects) and where host-local starts.
pub const POD_SUBNET: &str = "10.244.1.0/24";
pub const POD_GATEWAY: &str = "10.244.1.2";

/// Fails loudly when a Debian package the engine tests need is missing.
#[track_caller]
pub fn require(program: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .any(|d| d.join(program).is_file());
    assert!(
        found,
        "{program} is missing: apt-get install -y {package} (.ci/run installs it)"
    );
}

impl Node {
    /// The L2Bridge network `name` as flanneld's host-gw backend makes it: the pod subnet with
    /// gateway `.1`, and the host endpoint `cbr0_ep` with `.2` attached to the host, which is
    /// the gateway win-bridge gives pods (their way to the node and out of it).
    pub fn host_gw(&self, name: &str) {
        let net = self.l2bridge(name, POD_SUBNET, "10.244.1.1");
        let client = self.client();
        let ep: Endpoint = serde_json::from_value(json!({
            "Name": "cbr0_ep", "HostComputeNetwork": net.to_string(),
            "IpConfigurations": [{"IpAddress": POD_GATEWAY, "PrefixLength": 24}]
        }))
        .expect("endpoint document");
        let ep = self
            .hns(client.create_endpoint(&ep))
            .expect("create cbr0_ep");
        let host = Namespace {
            namespace_type: Some(NamespaceType::Host),
            ..Namespace::default()
        };
        let host = self
            .hns(client.create_namespace(&host))
            .expect("host namespace");
        self.hns(client.add_namespace_endpoint(host.id, ep.id))
            .expect("attach cbr0_ep to the host");
    }

    /// A machine outside the node: a namespace holding the far end of the node's NIC, with
    /// the address the node routes through. Its name.
    pub fn outside(&self) -> String {
        let path = self.netns("out");
        let out = path.rsplit('/').next().unwrap_or_default().to_string();
        ip(&["-n", &self.node_ns, "link", "set", "wire0", "netns", &out]);
        ip(&[
            "-n",
            &out,
            "addr",
            "add",
            &format!("{OUTSIDE_IP}/24"),
            "dev",
            "wire0",
        ]);
        ip(&["-n", &out, "link", "set", "wire0", "up"]);
        ip(&["-n", &out, "link", "set", "lo", "up"]);
        out
    }

    /// A win-bridge + host-local conflist for an engine: `hnsSocket` and `stateDir` in the
    /// config (an engine passes no environment of ours), host-local's data in the scratch dir.
    pub fn engine_conflist(&self, network: &str) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "name": network,
            "plugins": [{
                "type": "win-bridge",
                "apiVersion": 2,
                "hnsSocket": self.socket(),
                "stateDir": self.state_dir(),
                "capabilities": {"portMappings": true, "dns": true},
                "ipMasqNetwork": "10.244.0.0/16",
                "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]},
                "policies": [{"name": "EndpointPolicy", "value": {"Type": "OutBoundNAT",
                    "Settings": {"Exceptions": ["10.244.0.0/16"]}}}],
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "rangeStart": "10.244.1.10"}]],
                    "dataDir": self.ipam_dir(),
                },
            }],
        })
    }

    /// Asserts that no pod is left on the node: only `cbr0_ep` and its host namespace in HNS,
    /// no host-local reservation, no plugin record, and none of `netns` (the pods' namespace
    /// paths) nor their `/etc/netns` entries.
    #[track_caller]
    pub fn assert_no_pods_left(&self, network: &str, netns: &[String]) {
        let eps: Vec<String> = self.endpoints().into_iter().map(|e| e.name).collect();
        assert_eq!(eps, ["cbr0_ep"], "HNS endpoints left behind");
        let nss = self.namespaces();
        assert!(
            nss.iter()
                .all(|n| n.namespace_type == Some(NamespaceType::Host)),
            "HNS namespaces left behind: {nss:?}"
        );
        assert_eq!(
            self.allocations(network),
            Vec::<(String, String)>::new(),
            "host-local reservations left behind"
        );
        assert_eq!(self.records(), Vec::<String>::new(), "plugin records left");
        for ns in netns {
            assert!(!Path::new(ns).exists(), "namespace {ns} left behind");
            let name = ns.rsplit('/').next().unwrap_or_default();
            let etc = Path::new("/etc/netns").join(name);
            assert!(!etc.exists(), "{} left behind", etc.display());
        }
    }

    /// `CNI_PATH` as one directory (containerd takes one): our plugins, and Debian's
    /// host-local (our IPAM) and loopback (which containerd's CRI runs for every pod's `lo`).
    pub fn single_plugin_dir(&self) -> PathBuf {
        let dir = self.plugin_dir();
        for plugin in ["host-local", "loopback"] {
            let link = dir.join(plugin);
            if !link.exists() {
                std::os::unix::fs::symlink(Path::new(DEBIAN_CNI).join(plugin), &link)
                    .expect("link Debian's plugin into the plugin dir");
            }
        }
        dir
    }
}

/// A root filesystem of the host's static busybox with the tools the tests use, and a CGI
/// script that answers with the address the request came from (`/www/cgi-bin/peer` under
/// `busybox httpd -h /www`), packed as a tarball; its path.
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    require("busybox", "busybox-static");
    let root = dir.join("rootfs");
    for d in ["bin", "etc", "tmp", "proc", "sys", "dev", "www/cgi-bin"] {
        std::fs::create_dir_all(root.join(d)).expect("rootfs dir");
    }
    std::fs::copy(BUSYBOX, root.join("bin/busybox")).expect("copy busybox");
    for tool in [
        "sh", "cat", "sleep", "httpd", "wget", "ip", "echo", "hostname",
    ] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(tool)).expect("tool link");
    }
    let peer = root.join("www/cgi-bin/peer");
    std::fs::write(
        &peer,
        "#!/bin/sh\necho 'Content-Type: text/plain'\necho\necho \"$REMOTE_ADDR\"\n",
    )
    .expect("cgi script");
    let exec = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&peer, exec).expect("chmod the cgi script");
    let tar = dir.join("rootfs.tar");
    let status = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .expect("run tar");
    assert!(status.success(), "tar of the rootfs failed");
    tar
}

/// The address busybox httpd reports for a peer (`[::ffff:10.244.1.10]` on a dual socket).
pub fn peer_address(body: &str) -> String {
    let s = body.trim().trim_start_matches('[').trim_end_matches(']');
    s.strip_prefix("::ffff:").unwrap_or(s).to_string()
}
