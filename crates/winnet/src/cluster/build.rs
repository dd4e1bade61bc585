//! `winnet cluster up`: the fabric (a Linux bridge in its own namespace), the external host,
//! Windows nodes (hnsd with its data plane, the network made as flannel makes it, pods added by
//! the CNI plugins exactly as a runtime calls them, `winnet proxy` on the manifests), Linux
//! nodes (a kernel bridge made by Debian's `bridge` plugin with host-local, and for overlay a
//! kernel VXLAN device with FDB and neighbour entries for the Windows nodes), servers in every
//! pod and on the external host.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::topology::{
    self, CLUSTER_CIDR, EXTERNAL_IP, FABRIC, HTTP_PORT, Mode, OUTSIDE_IP, Os, SERVICE_CIDR,
    Topology, UDP_PORT, dr_mac, hns_mac, linux_mac, pod_host, pod_subnet,
};
use super::{NS_PREFIX, NodeState, PodState, State, sh};

/// Debian's CNI plugins.
pub const DEBIAN_CNI: &str = "/usr/lib/cni";
/// The Linux node's VXLAN device (flannel's name for VNI 4096).
const VXLAN_DEV: &str = "flannel.4096";

/// Builds the cluster; `progress` is told what is happening.
pub fn up(t: &Topology, dir: &Path, progress: &mut dyn FnMut(&str)) -> anyhow::Result<State> {
    if State::load(dir)?.is_some() {
        bail!(
            "a cluster is already up ({}); run `winnet cluster down` first",
            dir.display()
        );
    }
    let mut b = Builder {
        dir: dir.to_path_buf(),
        state: State {
            topology: Some(t.clone()),
            ..State::default()
        },
        t: t.clone(),
    };
    b.state.save(dir)?;
    let winnet = std::env::current_exe().context("cannot find the winnet binary")?;
    let plugins = dir.join("cni-bin");
    sh(&[
        &winnet.to_string_lossy(),
        "install-cni",
        &plugins.to_string_lossy(),
    ])?;
    progress("fabric and external host");
    b.fabric()?;
    b.external(&winnet)?;
    let mut win = 0;
    let mut lin = 0;
    for (i, n) in t.nodes.iter().enumerate() {
        let ip = match n.os {
            Os::Windows => {
                win += 1;
                topology::node_ip(i, Os::Windows, win - 1)
            }
            Os::Linux => {
                lin += 1;
                topology::node_ip(i, Os::Linux, lin - 1)
            }
        };
        progress(&format!("node {} ({:?}, {ip})", n.name, n.os));
        b.node(i, &n.name, n.os, ip)?;
    }
    for i in 0..t.nodes.len() {
        progress(&format!("network on {} ({})", t.nodes[i].name, t.mode));
        b.network(i, &winnet)?;
    }
    for i in 0..t.nodes.len() {
        for pod in t.nodes[i].pods.clone() {
            progress(&format!("pod {pod} on {}", t.nodes[i].name));
            b.pod(i, &pod, &plugins, &winnet)?;
        }
    }
    progress("Services (manifests) and kube-proxy");
    b.services()?;
    for i in 0..t.nodes.len() {
        if t.nodes[i].os == Os::Windows {
            b.proxy(i, &winnet)?;
        }
    }
    b.wait_programmed(progress)?;
    b.state.ready = true;
    b.state.save(dir)?;
    Ok(b.state)
}

struct Builder {
    dir: PathBuf,
    state: State,
    t: Topology,
}

impl Builder {
    fn ns(&mut self, name: &str) -> anyhow::Result<String> {
        let full = format!("{NS_PREFIX}{name}");
        let _ = sh(&["ip", "netns", "del", &full]);
        sh(&["ip", "netns", "add", &full])?;
        self.state.namespaces.push(full.clone());
        self.state.save(&self.dir)?;
        sh(&["ip", "-n", &full, "link", "set", "lo", "up"])?;
        Ok(full)
    }

    fn spawn(&mut self, netns: &str, args: &[&str], log: &str) -> anyhow::Result<u32> {
        let logf = std::fs::File::create(self.dir.join(log))
            .with_context(|| format!("create log {log}"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", netns])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .spawn()
            .with_context(|| format!("cannot start {}", args.join(" ")))?;
        let pid = child.id();
        // The child is reaped by `down` (kill) or by init when we exit; not waited on here.
        std::mem::forget(child);
        self.state.pids.push(pid);
        self.state.save(&self.dir)?;
        Ok(pid)
    }

    fn fabric(&mut self) -> anyhow::Result<()> {
        let f = self.ns("fabric")?;
        sh(&["ip", "-n", &f, "link", "add", "br0", "type", "bridge"])?;
        sh(&["ip", "-n", &f, "link", "set", "br0", "up"])?;
        Ok(())
    }

    /// Plugs `netns` into the fabric as `eth0` with `ip`; the fabric end is `port`.
    fn plug(&mut self, netns: &str, port: &str, ip: Ipv4Addr) -> anyhow::Result<String> {
        let f = format!("{NS_PREFIX}fabric");
        sh(&[
            "ip", "-n", &f, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
            netns,
        ])?;
        sh(&["ip", "-n", &f, "link", "set", port, "master", "br0", "up"])?;
        sh(&[
            "ip",
            "-n",
            netns,
            "addr",
            "add",
            &format!("{ip}/24"),
            "dev",
            "eth0",
        ])?;
        sh(&["ip", "-n", netns, "link", "set", "eth0", "up"])?;
        let mac = sh(&["ip", "-n", netns, "-j", "link", "show", "eth0"])?;
        let v: Value = serde_json::from_str(&mac).unwrap_or_default();
        Ok(v[0]["address"].as_str().unwrap_or_default().to_string())
    }

    fn external(&mut self, winnet: &Path) -> anyhow::Result<()> {
        let e = self.ns("external")?;
        self.plug(&e, "external", EXTERNAL_IP)?;
        sh(&[
            "ip",
            "-n",
            &e,
            "addr",
            "add",
            &format!("{OUTSIDE_IP}/32"),
            "dev",
            "lo",
        ])?;
        let w = winnet.to_string_lossy().into_owned();
        self.spawn(
            &e,
            &[
                &w,
                "serve",
                "--tcp",
                &HTTP_PORT.to_string(),
                "--udp",
                &UDP_PORT.to_string(),
            ],
            "external-serve.log",
        )?;
        Ok(())
    }

    fn node(&mut self, i: usize, name: &str, os: Os, ip: Ipv4Addr) -> anyhow::Result<()> {
        let ns = self.ns(name)?;
        let mac = self.plug(&ns, name, ip)?;
        sh(&[
            "ip",
            "-n",
            &ns,
            "route",
            "add",
            "default",
            "via",
            &EXTERNAL_IP.to_string(),
        ])?;
        let w = std::env::current_exe()?.to_string_lossy().into_owned();
        self.spawn(
            &ns,
            &[&w, "serve", "--tcp", &HTTP_PORT.to_string()],
            &format!("{name}-serve.log"),
        )?;
        self.state.nodes.push(NodeState {
            name: name.to_string(),
            os,
            netns: ns,
            ip,
            mac,
            subnet: pod_subnet(i),
            pods: Vec::new(),
        });
        self.state.save(&self.dir)
    }

    fn node_dir(&self, i: usize) -> PathBuf {
        self.dir.join(&self.state.nodes[i].name)
    }

    fn socket(&self, i: usize) -> PathBuf {
        self.node_dir(i).join("hns.sock")
    }

    /// Other nodes than `i`: (index, address, subnet).
    fn others(&self, i: usize) -> Vec<(usize, Ipv4Addr, ipnet::Ipv4Net)> {
        self.state
            .nodes
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(j, n)| (j, n.ip, n.subnet))
            .collect()
    }

    fn network(&mut self, i: usize, winnet: &Path) -> anyhow::Result<()> {
        let os = self.state.nodes[i].os;
        let ns = self.state.nodes[i].netns.clone();
        // What the node routes to other nodes' pods: host-gw routes via their address; on
        // overlay the Linux node needs its VXLAN device, Windows nodes their RemoteSubnetRoutes.
        match (os, self.t.mode) {
            (Os::Windows, mode) => {
                self.hnsd(i, winnet)?;
                self.flannel_windows(i, mode)?;
            }
            (Os::Linux, mode) => {
                // The Linux node routes between its pods and the fabric.
                host::netns::Netns::named(&ns)
                    .run(|| host::link::set_sysctl("net.ipv4.ip_forward", "1"))?;
                if mode == Mode::Overlay {
                    self.linux_vxlan(i)?;
                }
            }
        }
        if self.t.mode == Mode::L2bridge {
            for (_, ip, subnet) in self.others(i) {
                sh(&[
                    "ip",
                    "-n",
                    &ns,
                    "route",
                    "add",
                    &subnet.to_string(),
                    "via",
                    &ip.to_string(),
                ])?;
            }
        }
        Ok(())
    }

    fn hnsd(&mut self, i: usize, winnet: &Path) -> anyhow::Result<()> {
        let dir = self.node_dir(i);
        std::fs::create_dir_all(&dir)?;
        let ns = self.state.nodes[i].netns.clone();
        let name = self.state.nodes[i].name.clone();
        let w = winnet.to_string_lossy().into_owned();
        let sock = self.socket(i);
        let logf = std::fs::File::create(dir.join("hnsd.log"))?;
        let child = Command::new(&w)
            .args([
                "hnsd",
                "--node-netns",
                &ns,
                "--nic",
                "eth0",
                "--node-name",
                &name,
            ])
            .args(["--profile", &self.t.profile_name()])
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--socket")
            .arg(&sock)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .context("cannot start winnet hnsd")?;
        self.state.pids.push(child.id());
        std::mem::forget(child);
        self.state.save(&self.dir)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sock.exists() {
            if Instant::now() > deadline {
                bail!(
                    "hnsd of {name} did not start: see {}",
                    dir.join("hnsd.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Creates an HNS object on node `i` through `winnet hns`; its ID.
    fn hns(&self, i: usize, kind: &str, doc: &Value) -> anyhow::Result<String> {
        self.hns_call(i, &["create", kind, "-o", "id"], doc)
    }

    fn hns_modify(&self, i: usize, kind: &str, id: &str, doc: &Value) -> anyhow::Result<()> {
        self.hns_call(i, &["modify", kind, id], doc).map(|_| ())
    }

    /// Runs `winnet hns ARGS -f -` against node `i`'s hnsd with `doc` on stdin.
    fn hns_call(&self, i: usize, args: &[&str], doc: &Value) -> anyhow::Result<String> {
        let w = std::env::current_exe()?;
        let mut child = Command::new(w)
            .arg("hns")
            .args(args)
            .args(["-f", "-"])
            .env("HNS_SOCKET", self.socket(i))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(doc.to_string().as_bytes())?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "winnet hns {} on {}: {}",
                args.join(" "),
                self.state.nodes[i].name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// What flanneld makes on a Windows node.
    fn flannel_windows(&mut self, i: usize, mode: Mode) -> anyhow::Result<()> {
        let subnet = self.state.nodes[i].subnet;
        let ip = self.state.nodes[i].ip;
        let ns = self.state.nodes[i].netns.clone();
        let gw1 = pod_host(i, 1);
        let adapter = json!({"Type": "NetAdapterName", "Settings": {"NetworkAdapterName": "eth0"}});
        match mode {
            Mode::L2bridge => {
                let net = self.hns(i, "networks", &json!({
                    "Name": "cbr0", "Type": "L2Bridge",
                    "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": subnet.to_string(),
                        "Routes": [{"NextHop": gw1.to_string(), "DestinationPrefix": "0.0.0.0/0"}]}]}],
                    "Policies": [adapter]
                }))?;
                let ep = self.hns(i, "endpoints", &json!({
                    "Name": "cbr0_ep", "HostComputeNetwork": net,
                    "IpConfigurations": [{"IpAddress": pod_host(i, 2).to_string(), "PrefixLength": 24}]
                }))?;
                let host = self.hns(i, "namespaces", &json!({"Type": "Host"}))?;
                self.hns_modify(i, "namespaces", &host, &json!({
                    "ResourceType": "Endpoint", "RequestType": "Add", "Settings": {"EndpointId": ep}
                }))?;
            }
            Mode::Overlay => {
                let mut policies = vec![
                    adapter,
                    json!({"Type": "DrMacAddress", "Settings": {"Address": hns_mac(dr_mac(i))}}),
                    json!({"Type": "ProviderAddress", "Settings": {"ProviderAddress": ip.to_string()}}),
                    json!({"Type": "HostRoute", "Settings": {}}),
                ];
                for (j, pa, sub) in self.others(i) {
                    policies.push(json!({"Type": "RemoteSubnetRoute", "Settings": {
                        "DestinationPrefix": sub.to_string(), "IsolationId": 4096,
                        "ProviderAddress": pa.to_string(),
                        "DistributedRouterMacAddress": hns_mac(dr_mac(j))}}));
                }
                self.hns(i, "networks", &json!({
                    "Name": "vxlan0", "Type": "Overlay", "Flags": 8,
                    "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": subnet.to_string(),
                        "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}],
                        "Routes": [{"NextHop": gw1.to_string(), "DestinationPrefix": "0.0.0.0/0"}]}]}],
                    "Policies": policies
                }))?;
                // flanneld on Windows reaches its own pods through the management vNIC.
                sh(&[
                    "ip",
                    "-n",
                    &ns,
                    "route",
                    "add",
                    &subnet.to_string(),
                    "dev",
                    "vEthernet-eth0",
                ])?;
            }
        }
        Ok(())
    }

    /// flannel vxlan on a Linux node: the kernel's VXLAN device with the node's DR MAC, a route,
    /// neighbour and FDB entry per other node.
    fn linux_vxlan(&mut self, i: usize) -> anyhow::Result<()> {
        let ns = self.state.nodes[i].netns.clone();
        let ip = self.state.nodes[i].ip.to_string();
        let subnet = self.state.nodes[i].subnet;
        sh(&[
            "ip",
            "-n",
            &ns,
            "link",
            "add",
            VXLAN_DEV,
            "type",
            "vxlan",
            "id",
            "4096",
            "dstport",
            "4789",
            "local",
            &ip,
            "dev",
            "eth0",
            "nolearning",
        ])?;
        sh(&[
            "ip",
            "-n",
            &ns,
            "link",
            "set",
            VXLAN_DEV,
            "address",
            &linux_mac(dr_mac(i)),
        ])?;
        sh(&[
            "ip",
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/32", subnet.network()),
            "dev",
            VXLAN_DEV,
        ])?;
        sh(&["ip", "-n", &ns, "link", "set", VXLAN_DEV, "up"])?;
        // The kernel's VXLAN hands large segments to the NIC; the Windows nodes' AF_PACKET
        // uplinks take only plain frames, as a physical NIC would deliver them.
        sh(&[
            "ip", "netns", "exec", &ns, "ethtool", "-K", "eth0", "tso", "off", "gso", "off",
        ])?;
        for (j, pa, sub) in self.others(i) {
            let gw = sub.network().to_string();
            sh(&[
                "ip",
                "-n",
                &ns,
                "route",
                "add",
                &sub.to_string(),
                "via",
                &gw,
                "dev",
                VXLAN_DEV,
                "onlink",
            ])?;
            sh(&[
                "ip",
                "-n",
                &ns,
                "neigh",
                "replace",
                &gw,
                "lladdr",
                &linux_mac(dr_mac(j)),
                "dev",
                VXLAN_DEV,
                "nud",
                "permanent",
            ])?;
            sh(&[
                "bridge",
                "-n",
                &ns,
                "fdb",
                "append",
                &linux_mac(dr_mac(j)),
                "dev",
                VXLAN_DEV,
                "dst",
                &pa.to_string(),
            ])?;
        }
        Ok(())
    }

    fn pod(&mut self, i: usize, name: &str, plugins: &Path, winnet: &Path) -> anyhow::Result<()> {
        let node = self.state.nodes[i].name.clone();
        let ns = self.ns(&format!("{node}-{name}"))?;
        let conf = self.cni_conf(i);
        let (plugin, run_in): (PathBuf, Option<String>) = match self.state.nodes[i].os {
            Os::Windows => (
                plugins.join(match self.t.mode {
                    Mode::L2bridge => "win-bridge",
                    Mode::Overlay => "win-overlay",
                }),
                None,
            ),
            // Debian's bridge plugin makes its bridge in the namespace it runs in: the node's.
            Os::Linux => (
                Path::new(DEBIAN_CNI).join("bridge"),
                Some(self.state.nodes[i].netns.clone()),
            ),
        };
        let result = cni_add(
            &plugin,
            run_in.as_deref(),
            &conf,
            name,
            &ns,
            &self.socket(i),
            &self.node_dir(i),
            plugins,
        )?;
        let ip = result["ips"][0]["address"]
            .as_str()
            .and_then(|a| a.split('/').next())
            .and_then(|a| a.parse::<Ipv4Addr>().ok())
            .with_context(|| format!("the CNI result of {name} has no address: {result}"))?;
        self.state.nodes[i].pods.push(PodState {
            name: name.to_string(),
            netns: ns.clone(),
            ip,
        });
        self.state.save(&self.dir)?;
        let w = winnet.to_string_lossy().into_owned();
        self.spawn(
            &ns,
            &[
                &w,
                "serve",
                "--tcp",
                &HTTP_PORT.to_string(),
                "--udp",
                &UDP_PORT.to_string(),
            ],
            &format!("{node}-{name}-serve.log"),
        )?;
        Ok(())
    }

    fn cni_conf(&self, i: usize) -> Value {
        let n = &self.state.nodes[i];
        let ipam = json!({
            "type": "host-local",
            "ranges": [[{"subnet": n.subnet.to_string(), "rangeStart": pod_host(i, 10).to_string()}]],
            "dataDir": self.node_dir(i).join("ipam").to_string_lossy(),
        });
        let dns = json!({"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]});
        match (n.os, self.t.mode) {
            (Os::Windows, Mode::L2bridge) => json!({
                "cniVersion": "1.0.0", "name": "cbr0", "type": "win-bridge", "apiVersion": 2,
                "ipMasqNetwork": CLUSTER_CIDR, "dns": dns,
                "policies": [
                    {"name": "EndpointPolicy", "value": {"Type": "OutBoundNAT", "Settings": {"Exceptions": [CLUSTER_CIDR, SERVICE_CIDR, FABRIC]}}},
                    {"name": "EndpointPolicy", "value": {"Type": "SDNRoute", "Settings": {"DestinationPrefix": SERVICE_CIDR, "NeedEncap": true}}},
                    {"name": "EndpointPolicy", "value": {"Type": "SDNRoute", "Settings": {"DestinationPrefix": format!("{}/32", n.ip), "NeedEncap": true}}}
                ],
                "ipam": ipam,
            }),
            (Os::Windows, Mode::Overlay) => json!({
                "cniVersion": "1.0.0", "name": "vxlan0", "type": "win-overlay", "apiVersion": 2,
                "dns": dns,
                "policies": [
                    {"name": "EndpointPolicy", "value": {"Type": "OutBoundNAT", "Settings": {"Exceptions": [CLUSTER_CIDR, SERVICE_CIDR]}}},
                    {"name": "EndpointPolicy", "value": {"Type": "SDNRoute", "Settings": {"DestinationPrefix": SERVICE_CIDR, "NeedEncap": true}}},
                    {"name": "EndpointPolicy", "value": {"Type": "ProviderAddress", "Settings": {"ProviderAddress": n.ip.to_string()}}}
                ],
                "ipam": ipam,
            }),
            (Os::Linux, _) => json!({
                "cniVersion": "1.0.0", "name": "cbr0", "type": "bridge", "bridge": "cni0",
                "isGateway": true, "ipMasq": false, "mtu": if self.t.mode == Mode::Overlay { 1450 } else { 1500 },
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": n.subnet.to_string(), "rangeStart": pod_host(i, 10).to_string()}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": self.node_dir(i).join("ipam").to_string_lossy(),
                },
            }),
        }
    }

    /// Writes the Services and their EndpointSlices as `kubectl get -o yaml` would print them.
    fn services(&mut self) -> anyhow::Result<()> {
        let dir = self.dir.join("manifests");
        std::fs::create_dir_all(&dir)?;
        for (k, s) in self.t.services.iter().enumerate() {
            let cluster_ip = Ipv4Addr::new(10, 96, 0, 10 + k as u8);
            let mut spec = json!({
                "type": if s.load_balancer_ip.is_some() { "LoadBalancer" } else if s.node_port.is_some() { "NodePort" } else { "ClusterIP" },
                "clusterIP": cluster_ip.to_string(), "clusterIPs": [cluster_ip.to_string()],
                "ports": [{"name": "http", "protocol": "TCP", "port": s.port, "targetPort": s.target_port}],
                "selector": {"app": s.selector},
            });
            if let Some(np) = s.node_port {
                spec["ports"][0]["nodePort"] = json!(np);
            }
            let mut svc = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": s.name, "namespace": "default"},
                "spec": spec,
            });
            if let Some(lb) = s.load_balancer_ip {
                svc["status"] = json!({"loadBalancer": {"ingress": [{"ip": lb.to_string()}]}});
                // The external load balancer hands its address to the first Windows node.
                if let Some(first) = self.state.nodes.iter().find(|n| n.os == Os::Windows) {
                    let ext = format!("{NS_PREFIX}external");
                    sh(&[
                        "ip",
                        "-n",
                        &ext,
                        "route",
                        "replace",
                        &format!("{lb}/32"),
                        "via",
                        &first.ip.to_string(),
                    ])?;
                }
            }
            let endpoints: Vec<Value> = self
                .state
                .nodes
                .iter()
                .flat_map(|n| n.pods.iter().map(move |p| (n, p)))
                .filter(|(_, p)| p.name.starts_with(&s.selector))
                .map(|(n, p)| {
                    json!({
                        "addresses": [p.ip.to_string()],
                        "conditions": {"ready": true, "serving": true, "terminating": false},
                        "nodeName": n.name,
                        "targetRef": {"kind": "Pod", "name": p.name, "namespace": "default"},
                    })
                })
                .collect();
            let slice = json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": format!("{}-1", s.name), "namespace": "default",
                    "labels": {"kubernetes.io/service-name": s.name}},
                "addressType": "IPv4",
                "endpoints": endpoints,
                "ports": [{"name": "http", "protocol": "TCP", "port": s.target_port}],
            });
            std::fs::write(
                dir.join(format!("{}.json", s.name)),
                serde_json::to_vec_pretty(&json!({
                    "apiVersion": "v1", "kind": "List", "items": [svc, slice]
                }))?,
            )?;
        }
        Ok(())
    }

    fn proxy(&mut self, i: usize, winnet: &Path) -> anyhow::Result<()> {
        let n = self.state.nodes[i].clone();
        let w = winnet.to_string_lossy().into_owned();
        let sock = self.socket(i).to_string_lossy().into_owned();
        let manifests = self.dir.join("manifests").to_string_lossy().into_owned();
        let (network, extra): (&str, Vec<String>) = match self.t.mode {
            Mode::L2bridge => ("cbr0", vec![]),
            Mode::Overlay => (
                "vxlan0",
                vec![
                    "--source-vip".into(),
                    pod_host(i, 2).to_string(),
                    "--feature-gates".into(),
                    "WinOverlay=true".into(),
                ],
            ),
        };
        let mut args: Vec<String> = vec![
            w,
            "proxy".into(),
            "--network-name".into(),
            network.into(),
            "--hostname-override".into(),
            n.name.clone(),
            "--bind-address".into(),
            n.ip.to_string(),
            "--manifests".into(),
            manifests,
            "--hns-socket".into(),
            sock,
            "--cluster-cidr".into(),
            CLUSTER_CIDR.into(),
        ];
        args.extend(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.spawn(&n.netns, &refs, &format!("{}-proxy.log", n.name))?;
        Ok(())
    }

    /// Waits until every Windows node's hnsd holds a load balancer per Service frontend.
    fn wait_programmed(&self, progress: &mut dyn FnMut(&str)) -> anyhow::Result<()> {
        if self.t.services.is_empty() {
            return Ok(());
        }
        progress("waiting for kube-proxy to program the load balancers");
        let deadline = Instant::now() + Duration::from_secs(30);
        let w = std::env::current_exe()?;
        for (i, n) in self.state.nodes.iter().enumerate() {
            if n.os != Os::Windows {
                continue;
            }
            loop {
                let out = Command::new(&w)
                    .args(["hns", "list", "loadbalancers", "-o", "id"])
                    .env("HNS_SOCKET", self.socket(i))
                    .output()?;
                let count = String::from_utf8_lossy(&out.stdout).lines().count();
                if count >= self.t.services.len() {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "kube-proxy on {} programmed {count} load balancers in 30 s; see {}",
                        n.name,
                        self.dir.join(format!("{}-proxy.log", n.name)).display()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

/// Runs a CNI ADD as a runtime does and returns the result.
#[allow(clippy::too_many_arguments)]
fn cni_add(
    plugin: &Path,
    run_in: Option<&str>,
    conf: &Value,
    container: &str,
    netns: &str,
    socket: &Path,
    node_dir: &Path,
    plugins: &Path,
) -> anyhow::Result<Value> {
    let mut cmd = match run_in {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(plugin);
            c
        }
        None => Command::new(plugin),
    };
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", container)
        .env("CNI_NETNS", format!("/run/netns/{netns}"))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", format!("{}:{DEBIAN_CNI}", plugins.display()))
        .env("HNS_SOCKET", socket)
        .env("WINNET_CNI_STATE_DIR", node_dir.join("cni-state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", plugin.display()))?;
    child
        .stdin
        .take()
        .context("plugin stdin")?
        .write_all(conf.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "CNI ADD of {container} with {} failed: {text} {}",
            plugin.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_str(&text).with_context(|| format!("CNI result of {container}: {text}"))
}
