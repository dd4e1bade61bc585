//! The configs Windows clusters really use (tests/configs), run unchanged through the winnet
//! binary: microsoft/SDN's flannel cni.conf files, the containernetworking/plugins samples, and
//! the sig-windows-tools flannel -> sdnoverlay config. Only where a file names a Windows path
//! by default (flannel's subnetFile and dataDir) is the path pointed at the test's scratch dir.
//!
//! Configs without an `ipam.dataDir` make host-local use /var/lib/cni/networks, as on a real
//! node, so these tests need root (CI runs as root) and use unique container IDs.

mod common;

use common::{Node, allocations_in, result_ip, with};
use serde_json::{Value, json};

fn config(name: &str) -> String {
    // Built as a test of crates/winnet (see its Cargo.toml); the files are beside this one.
    let path = format!("{}/../cni/tests/configs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// host-local's default data dir for `network`, which configs without `dataDir` use. The tests
/// of this file share it (several use `cbr0`); the last one done removes it if none of them found
/// it there, so a run leaves no `/var/lib/cni/networks/<name>` behind.
struct IpamDir {
    network: String,
    path: std::path::PathBuf,
}

/// Per network: how many tests hold its dir, and whether it was there before the first one.
static IPAM_DIRS: std::sync::Mutex<std::collections::BTreeMap<String, (usize, bool)>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn default_ipam_dir(network: &str) -> IpamDir {
    let base = std::path::Path::new("/var/lib/cni/networks");
    std::fs::create_dir_all(base).unwrap_or_else(|e| {
        panic!(
            "this test needs root: host-local writes {} for configs without dataDir: {e}",
            base.display()
        )
    });
    let path = base.join(network);
    let mut held = IPAM_DIRS.lock().unwrap_or_else(|p| p.into_inner());
    let entry = held
        .entry(network.to_string())
        .or_insert_with(|| (0, path.exists()));
    entry.0 += 1;
    IpamDir {
        network: network.to_string(),
        path,
    }
}

impl std::ops::Deref for IpamDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for IpamDir {
    fn drop(&mut self) {
        let mut held = IPAM_DIRS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = held.get_mut(&self.network) {
            entry.0 -= 1;
            if entry.0 == 0 {
                let existed = entry.1;
                held.remove(&self.network);
                if !existed {
                    let _ = std::fs::remove_dir_all(&self.path);
                }
            }
        }
    }
}

fn unique(id: &str) -> String {
    format!("{id}-{}", std::process::id())
}

/// The flannel config with its Linux-side paths in the node's scratch dir.
fn flannel_conf(node: &Node, file: &str, subnet_env: &str) -> String {
    let env_path = node.dir.path().join("subnet.env");
    std::fs::write(&env_path, subnet_env).unwrap();
    let conf = with(&config(file), "subnetFile", json!(env_path));
    with(&conf, "dataDir", json!(node.dir.path().join("flannel")))
}

fn saved_delegates(node: &Node) -> usize {
    std::fs::read_dir(node.dir.path().join("flannel")).map_or(0, |d| d.count())
}

#[test]
fn sdn_l2bridge_cni_conf_through_flannel_and_win_bridge() {
    let node = Node::start();
    node.l2bridge("cbr0", "10.244.1.0/24", "10.244.1.1");
    let conf = flannel_conf(
        &node,
        "sdn-l2bridge-cni.conf",
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
    );
    let ipam = default_ipam_dir("cbr0");
    let id = unique("sdn-l2bridge");
    let ns = node.netns("pod");
    let r = node.verb("flannel", "ADD", &id, &ns, &conf).ok().clone();
    // cniVersion 0.2.0: the ip4 shape, gateway .2.
    assert_eq!(r["cniVersion"], "0.2.0");
    let ip = r["ip4"]["ip"].as_str().expect("ip4.ip").to_string();
    assert!(ip.starts_with("10.244.1.") && ip.ends_with("/24"), "{ip}");
    assert_eq!(r["ip4"]["gateway"], "10.244.1.2");
    assert_eq!(r["dns"]["nameservers"], json!(["10.96.0.10"]));

    let ep = node.endpoints().remove(0);
    assert_eq!(ep.name, format!("{id}_cbr0"));
    assert_eq!(ep.dns.server_list, ["10.96.0.10"]);
    assert_eq!(ep.dns.search, ["svc.cluster.local"]);
    let pol = serde_json::to_value(&ep.policies).unwrap();
    // ipMasqNetwork 10.244.0.0/16 is already excepted: no fourth policy.
    assert_eq!(
        pol,
        json!([
            {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12", "10.127.130.0/24"]}},
            {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}},
            {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.127.130.38/32", "NeedEncap": true}},
        ])
    );
    let held: Vec<_> = allocations_in(&ipam.join(""))
        .into_iter()
        .filter(|(_, c)| *c == id)
        .collect();
    assert_eq!(held.len(), 1);
    assert_eq!(saved_delegates(&node), 1);
    // 0.2.0 has no CHECK.
    assert_eq!(node.check("flannel", &id, &ns, &conf, &r).err_code(), 1);

    node.verb("flannel", "DEL", &id, &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
    assert!(allocations_in(&ipam).iter().all(|(_, c)| *c != id));
    assert_eq!(saved_delegates(&node), 0);
    node.verb("flannel", "DEL", &id, &ns, &conf).ok();
}

#[test]
fn sdn_overlay_cni_conf_through_flannel_and_win_overlay() {
    let node = Node::start();
    node.overlay("vxlan0", "192.168.3.0/24", "192.168.3.1", "10.0.0.4");
    let conf = flannel_conf(
        &node,
        "sdn-overlay-cni.conf",
        "FLANNEL_NETWORK=192.168.0.0/16\nFLANNEL_SUBNET=192.168.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
    );
    let ipam = default_ipam_dir("vxlan0");
    let id = unique("sdn-overlay");
    let ns = node.netns("pod");
    let r = node.verb("flannel", "ADD", &id, &ns, &conf).ok().clone();
    let ip: std::net::Ipv4Addr = r["ip4"]["ip"]
        .as_str()
        .unwrap()
        .trim_end_matches("/24")
        .parse()
        .unwrap();
    // The overlay gateway is the network's (.1), not .2.
    assert_eq!(r["ip4"]["gateway"], "192.168.3.1");
    let ep = node.endpoints().remove(0);
    let o = ip.octets();
    assert_eq!(
        ep.mac_address.unwrap().to_string(),
        format!("0E-2A-{:02X}-{:02X}-{:02X}-{:02X}", o[0], o[1], o[2], o[3])
    );
    let pol = serde_json::to_value(&ep.policies).unwrap();
    assert_eq!(
        pol,
        json!([
            {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.0.0/16", "11.0.0.0/8"]}},
            {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "11.0.0.0/8", "NeedEncap": true}},
            // The network's provider address, then ipMasq's exception for the network's subnet.
            {"Type": "ProviderAddress", "Settings": {"ProviderAddress": "10.0.0.4"}},
            {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.3.0/24"]}},
        ])
    );
    node.verb("flannel", "DEL", &id, &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
    assert!(allocations_in(&ipam).iter().all(|(_, c)| *c != id));
}

#[test]
fn win_bridge_sample_v1_with_hns_ipam_and_loopback_dsr() {
    let node = Node::start();
    node.l2bridge("cbr0", "10.244.2.0/24", "10.244.2.1");
    let conf = config("win-bridge-sample-v1.conf");
    let ns = node.netns("pod");
    let r = node
        .verb("win-bridge", "ADD", "v1pod", &ns, &conf)
        .ok()
        .clone();
    // No cniVersion: 0.1.0, printed in the ip4 shape.
    assert_eq!(r["cniVersion"], "0.1.0");
    let ip = r["ip4"]["ip"]
        .as_str()
        .unwrap()
        .trim_end_matches("/24")
        .to_string();
    let ep = node.endpoints().remove(0);
    let pol = serde_json::to_value(&ep.policies).unwrap();
    assert_eq!(
        pol[0],
        json!({"Type": "OutBoundNAT", "Settings": {"Exceptions": ["192.168.0.0/16", "11.0.0.0/8", "10.137.196.0/23"]}})
    );
    assert_eq!(
        pol[3],
        json!({"Type": "OutBoundNAT", "Settings": {"Destinations": [ip]}})
    );
    node.verb("win-bridge", "DEL", "v1pod", &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
}

#[test]
fn win_bridge_sample_v2_through_flannel() {
    let node = Node::start();
    node.l2bridge("cbr0", "10.244.4.0/24", "10.244.4.1");
    let conf = flannel_conf(
        &node,
        "win-bridge-sample-v2.conf",
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.4.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n",
    );
    let ipam = default_ipam_dir("cbr0");
    let id = unique("sample-v2");
    let ns = node.netns("pod");
    let r = node.verb("flannel", "ADD", &id, &ns, &conf).ok().clone();
    assert_eq!(r["ip4"]["gateway"], "10.244.4.2");
    let ep = node.endpoints().remove(0);
    let types: Vec<&str> = ep.policies.iter().map(|p| p.type_name()).collect();
    // Config policies, ipMasqNetwork (always set by flannel), loopback DSR.
    assert_eq!(
        types,
        [
            "OutBoundNAT",
            "SDNRoute",
            "SDNRoute",
            "OutBoundNAT",
            "OutBoundNAT"
        ]
    );
    node.verb("flannel", "DEL", &id, &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
    assert!(allocations_in(&ipam).iter().all(|(_, c)| *c != id));
}

#[test]
fn win_overlay_sample_with_hns_ipam_gets_the_prefix_mac() {
    let node = Node::start();
    node.overlay("vxlan0", "192.168.5.0/24", "192.168.5.1", "10.0.0.6");
    let conf = config("win-overlay-sample.conf");
    let ns = node.netns("pod");
    let r = node
        .verb("win-overlay", "ADD", "ovpod", &ns, &conf)
        .ok()
        .clone();
    let ip: std::net::Ipv4Addr = r["ip4"]["ip"]
        .as_str()
        .unwrap()
        .trim_end_matches("/24")
        .parse()
        .unwrap();
    let ep = node.endpoints().remove(0);
    let o = ip.octets();
    assert_eq!(
        ep.mac_address.unwrap().to_string(),
        format!("0E-2A-{:02X}-{:02X}-{:02X}-{:02X}", o[0], o[1], o[2], o[3])
    );
    assert_eq!(
        node.endpoints().len(),
        1,
        "the first HNS-IPAM endpoint was replaced, not kept"
    );
    node.verb("win-overlay", "DEL", "ovpod", &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
}

#[test]
fn win_overlay_sample_v2_keeps_its_own_provider_address_and_adds_the_networks() {
    let node = Node::start();
    node.overlay(
        "OVNKubernetesHybridOverlayNetwork",
        "10.132.0.0/24",
        "10.132.0.1",
        "10.0.0.7",
    );
    let conf = config("win-overlay-sample-v2.conf");
    let ipam = default_ipam_dir("OVNKubernetesHybridOverlayNetwork");
    let id = unique("ovn");
    let ns = node.netns("pod");
    let r = node
        .verb("win-overlay", "ADD", &id, &ns, &conf)
        .ok()
        .clone();
    assert_eq!(r["ip4"]["gateway"], "10.132.0.1");
    let ep = node.endpoints().remove(0);
    let pas: Vec<Value> = serde_json::to_value(&ep.policies)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["Type"] == "ProviderAddress")
        .cloned()
        .collect();
    // The config's PA is kept, and the network's (another address) is appended after it:
    // upstream's `ApplyDefaultPAPolicy` only skips a PA for the same address (pkg/hns
    // netconf_windows_test.go "append different IP"); this test used to expect the config's alone.
    assert_eq!(
        pas,
        [
            json!({"Type": "ProviderAddress", "Settings": {"ProviderAddress": "10.0.133.170"}}),
            json!({"Type": "ProviderAddress", "Settings": {"ProviderAddress": "10.0.0.7"}}),
        ]
    );
    node.verb("win-overlay", "DEL", &id, &ns, &conf).ok();
    assert!(allocations_in(&ipam).iter().all(|(_, c)| *c != id));
}

#[test]
fn sig_windows_tools_flannel_to_sdnoverlay() {
    let node = Node::start();
    node.overlay(
        "flannel.4096",
        "10.244.3.0/24",
        "10.244.3.1",
        "192.168.1.20",
    );
    let conf = flannel_conf(
        &node,
        "sig-windows-tools-flannel-sdnoverlay.conf",
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
    );
    let ipam = default_ipam_dir("flannel.4096");
    let id = unique("sigwin");
    let ns = node.netns("pod");
    let r = node
        .call(
            "flannel",
            &[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", &id),
                ("CNI_NETNS", &ns),
                ("CNI_IFNAME", "eth0"),
                (
                    "CNI_ARGS",
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web",
                ),
            ],
            &conf,
        )
        .ok()
        .clone();
    assert!(result_ip(&r).starts_with("10.244.3."), "{r}");
    assert_eq!(r["ip4"]["gateway"], "10.244.3.1");
    let ep = node.endpoints().remove(0);
    let types: Vec<&str> = ep.policies.iter().map(|p| p.type_name()).collect();
    assert_eq!(types, ["OutBoundNAT", "SDNRoute", "ProviderAddress"]);
    node.verb("flannel", "DEL", &id, &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
    assert!(allocations_in(&ipam).iter().all(|(_, c)| *c != id));
}

#[test]
fn flannel_on_1_1_0_forwards_check_and_gc() {
    let node = Node::start();
    node.l2bridge("cbr0", "10.244.6.0/24", "10.244.6.1");
    let conf = flannel_conf(
        &node,
        "sdn-l2bridge-cni.conf",
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.6.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
    );
    let conf = with(&conf, "cniVersion", json!("1.1.0"));
    let ipam = default_ipam_dir("cbr0");
    let (keep, leak) = (unique("fl-keep"), unique("fl-leak"));
    let (ns1, ns2) = (node.netns("keep"), node.netns("leak"));
    let kept = node.verb("flannel", "ADD", &keep, &ns1, &conf).ok().clone();
    node.verb("flannel", "ADD", &leak, &ns2, &conf).ok();
    node.check("flannel", &keep, &ns1, &conf, &kept).ok();
    node.call("flannel", &[("CNI_COMMAND", "STATUS")], &conf)
        .ok();
    node.gc("flannel", &conf, &[&keep]).ok();
    let names: Vec<String> = node.endpoints().into_iter().map(|e| e.name).collect();
    assert_eq!(names, [format!("{keep}_cbr0")]);
    assert!(allocations_in(&ipam).iter().all(|(_, c)| *c != leak));
    assert_eq!(saved_delegates(&node), 1);
    node.verb("flannel", "DEL", &keep, &ns1, &conf).ok();
    assert!(allocations_in(&ipam).iter().all(|(_, c)| *c != keep));
}

#[test]
fn nat_creates_its_network_and_names_the_cni_interface() {
    let node = Node::start();
    let conf = json!({
        "cniVersion": "1.0.0", "name": "nat", "type": "nat",
        "ipam": {"subnet": "172.28.0.0/24", "routes": [{"GW": "172.28.0.1"}]},
        "dns": {"Nameservers": ["172.28.0.1"]},
        "optionalFlags": {"allowAclPortMapping": true},
        "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
    })
    .to_string();
    let ns = node.netns("pod");
    let r = node.verb("nat", "ADD", "natpod", &ns, &conf).ok().clone();
    assert_eq!(r["interfaces"][0]["name"], "eth0");
    assert_eq!(r["ips"][0]["interface"], 0);
    assert_eq!(r["ips"][0]["gateway"], "172.28.0.1");
    let net = node
        .hns(node.client().get_network_by_name("nat"))
        .unwrap()
        .expect("nat network created");
    assert_eq!(net.network_type, hcn::NetworkType::Nat);
    let types: Vec<&str> = node.endpoints()[0]
        .policies
        .iter()
        .map(|p| p.type_name())
        .collect();
    assert_eq!(types, ["PortMapping", "ACL"]);
    // A repeated ADD prints the same result (idempotent, as windows-container-networking).
    assert_eq!(node.verb("nat", "ADD", "natpod", &ns, &conf).ok(), &r);
    node.verb("nat", "DEL", "natpod", &ns, &conf).ok();
    assert!(node.endpoints().is_empty());
    assert!(
        node.hns(node.client().get_network_by_name("nat"))
            .unwrap()
            .is_some(),
        "the network stays"
    );
}
