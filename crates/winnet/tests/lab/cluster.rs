//! A cluster of Windows nodes on the lab's fabric with an external host, flannel's network on
//! each node made through its hnsd as flanneld makes it, and pods made as the CNI plugin of the
//! mode makes them: what the data plane and trace tests build on.

use std::net::{IpAddr, SocketAddr};

use hcn::{Endpoint, Guid, Namespace, Network};
use serde_json::json;

use super::{Lab, ok};

pub const GATEWAY: &str = "192.168.77.1";
/// An address of the external host outside every exception list (so pods are SNATed to it).
pub const OUTSIDE: &str = "10.200.0.1";

pub fn node_ip(i: usize) -> String {
    format!("192.168.77.{}", 11 + i)
}

pub fn subnet(i: usize) -> String {
    format!("10.244.{}.0/24", i + 1)
}

pub fn pod_ip(i: usize, host: u8) -> String {
    format!("10.244.{}.{host}", i + 1)
}

pub fn dr_mac(i: usize) -> String {
    format!("00-15-5D-DD-00-{:02X}", i + 1)
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

pub fn decode<T: serde::de::DeserializeOwned + hcn::Validate>(v: serde_json::Value) -> T {
    hcn::decode_value(v).unwrap_or_else(|e| panic!("bad test document: {}", e.message))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    L2Bridge,
    Overlay,
}

/// A cluster of `n` Windows nodes on one fabric with an external host, flannel's network on
/// each (host-gw's L2Bridge `cbr0` with `cbr0_ep` and routes, or vxlan's Overlay with a
/// RemoteSubnetRoute per other node).
pub struct Cluster {
    pub lab: Lab,
    pub rt: tokio::runtime::Runtime,
    pub mode: Mode,
    pub networks: Vec<Guid>,
    pub external: String,
}

impl Cluster {
    pub fn new(tag: &str, n: usize, mode: Mode, profile: &str) -> Cluster {
        let mut lab = Lab::new(tag);
        let external = lab.add_ns("ext");
        lab.plug(&external, "ext", &format!("{GATEWAY}/24"), None);
        ok(&[
            "ip",
            "-n",
            &external,
            "addr",
            "add",
            &format!("{OUTSIDE}/32"),
            "dev",
            "lo",
        ]);
        for i in 0..n {
            lab.node(
                &format!("n{i}"),
                &format!("n{i}"),
                &format!("{}/24", node_ip(i)),
                GATEWAY,
                profile,
            );
        }
        let mut c = Cluster {
            lab,
            rt: rt(),
            mode,
            networks: Vec::new(),
            external,
        };
        for i in 0..n {
            let id = match mode {
                Mode::L2Bridge => c.host_gw(i, n),
                Mode::Overlay => c.vxlan(i, n),
            };
            c.networks.push(id);
        }
        c
    }

    pub fn node_ns(&self, i: usize) -> String {
        self.lab.hnsds[i].node().expect("a node's hnsd").to_string()
    }

    pub fn client(&self, i: usize) -> hns_client::Client {
        self.lab.hnsds[i].client()
    }

    fn host_gw(&mut self, i: usize, n: usize) -> Guid {
        let client = self.client(i);
        let net: Network = decode(json!({
            "Name": "cbr0", "Type": "L2Bridge",
            "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": subnet(i),
                "Routes": [{"NextHop": pod_ip(i, 1), "DestinationPrefix": "0.0.0.0/0"}]}]}],
            "Policies": [{"Type": "NetAdapterName", "Settings": {"NetworkAdapterName": "eth0"}}],
            "SchemaVersion": {"Major": 2, "Minor": 0}
        }));
        let net = self
            .rt
            .block_on(client.create_network(&net))
            .expect("create cbr0");
        let ep: Endpoint = decode(json!({
            "Name": "cbr0_ep", "HostComputeNetwork": net.id.to_string(),
            "IpConfigurations": [{"IpAddress": pod_ip(i, 2), "PrefixLength": 24}]
        }));
        let ep = self
            .rt
            .block_on(client.create_endpoint(&ep))
            .expect("create cbr0_ep");
        self.attach(
            i,
            json!({"Type": "Host", "SchemaVersion": {"Major": 2, "Minor": 0}}),
            ep.id,
        );
        let node = self.node_ns(i);
        for j in (0..n).filter(|j| *j != i) {
            ok(&[
                "ip",
                "-n",
                &node,
                "route",
                "add",
                &subnet(j),
                "via",
                &node_ip(j),
            ]);
        }
        net.id
    }

    fn vxlan(&mut self, i: usize, n: usize) -> Guid {
        let client = self.client(i);
        let mut policies = vec![
            json!({"Type": "NetAdapterName", "Settings": {"NetworkAdapterName": "eth0"}}),
            json!({"Type": "DrMacAddress", "Settings": {"Address": dr_mac(i)}}),
            json!({"Type": "ProviderAddress", "Settings": {"ProviderAddress": node_ip(i)}}),
            json!({"Type": "HostRoute", "Settings": {}}),
        ];
        for j in (0..n).filter(|j| *j != i) {
            policies.push(json!({"Type": "RemoteSubnetRoute", "Settings": {
                "DestinationPrefix": subnet(j), "IsolationId": 4096,
                "ProviderAddress": node_ip(j), "DistributedRouterMacAddress": dr_mac(j)}}));
        }
        let net: Network = decode(json!({
            "Name": "vxlan0", "Type": "Overlay", "Flags": 8,
            "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": subnet(i),
                "Policies": [{"Type": "VSID", "Settings": {"IsolationId": 4096}}],
                "Routes": [{"NextHop": pod_ip(i, 1), "DestinationPrefix": "0.0.0.0/0"}]}]}],
            "Policies": policies,
            "SchemaVersion": {"Major": 2, "Minor": 0}
        }));
        let net = self
            .rt
            .block_on(client.create_network(&net))
            .expect("create vxlan0");
        // flannel on Windows reaches its node's pods through the management vNIC.
        let node = self.node_ns(i);
        ok(&[
            "ip",
            "-n",
            &node,
            "route",
            "add",
            &subnet(i),
            "dev",
            "vEthernet-eth0",
        ]);
        net.id
    }

    /// A pod on node `i` with address host number `host`, its namespace made by the test as a
    /// runtime would, its endpoint made as the CNI plugin of the mode does.
    pub fn pod(&mut self, i: usize, name: &str, host: u8) -> String {
        self.pod_with_id(i, name, host).0
    }

    /// [`Cluster::pod`], with the pod's endpoint ID too.
    pub fn pod_with_id(&mut self, i: usize, name: &str, host: u8) -> (String, Guid) {
        self.pod_with(i, name, host, json!({}))
    }

    /// [`Cluster::pod_with_id`], with the endpoint fields `extra` (e.g. `Dns`) added to what
    /// the CNI plugin writes.
    pub fn pod_with(
        &mut self,
        i: usize,
        name: &str,
        host: u8,
        extra: serde_json::Value,
    ) -> (String, Guid) {
        let ns = self.lab.add_ns(name);
        let ip = pod_ip(i, host);
        let client = self.client(i);
        let doc = match self.mode {
            Mode::L2Bridge => json!({
                "Name": format!("{name}_cbr0"), "HostComputeNetwork": self.networks[i].to_string(),
                "IpConfigurations": [{"IpAddress": ip, "PrefixLength": 24}],
                "Routes": [{"NextHop": pod_ip(i, 2), "DestinationPrefix": "0.0.0.0/0"}],
                "Policies": [
                    {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12", "192.168.77.0/24"]}},
                    {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}},
                    {"Type": "SDNRoute", "Settings": {"DestinationPrefix": format!("{}/32", node_ip(i)), "NeedEncap": true}}
                ]
            }),
            Mode::Overlay => {
                let o: Vec<u8> = ip.split('.').filter_map(|s| s.parse().ok()).collect();
                json!({
                    "Name": format!("{name}_vxlan0"), "HostComputeNetwork": self.networks[i].to_string(),
                    "IpConfigurations": [{"IpAddress": ip, "PrefixLength": 24}],
                    "MacAddress": format!("0E-2A-{:02X}-{:02X}-{:02X}-{:02X}", o[0], o[1], o[2], o[3]),
                    "Routes": [{"NextHop": pod_ip(i, 1), "DestinationPrefix": "0.0.0.0/0"}],
                    "Policies": [
                        {"Type": "OutBoundNAT", "Settings": {"Exceptions": ["10.244.0.0/16", "10.96.0.0/12"]}},
                        {"Type": "SDNRoute", "Settings": {"DestinationPrefix": "10.96.0.0/12", "NeedEncap": true}},
                        {"Type": "ProviderAddress", "Settings": {"ProviderAddress": node_ip(i)}}
                    ]
                })
            }
        };
        let mut doc = doc;
        if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
            d.extend(e.clone());
        }
        let ep: Endpoint = decode(doc);
        let ep = self
            .rt
            .block_on(client.create_endpoint(&ep))
            .expect("create the pod's endpoint");
        self.attach(i, json!({"LinuxNetns": format!("/run/netns/{ns}")}), ep.id);
        (ns, ep.id)
    }

    /// Creates the HostComputeNamespace `doc` on node `i` and attaches `endpoint` to it.
    fn attach(&self, i: usize, doc: serde_json::Value, endpoint: Guid) {
        let client = self.client(i);
        let ns: Namespace = decode(doc);
        let ns = self
            .rt
            .block_on(client.create_namespace(&ns))
            .expect("create the namespace");
        self.rt
            .block_on(client.add_namespace_endpoint(ns.id, endpoint))
            .unwrap_or_else(|e| panic!("attach endpoint {endpoint}: {e}"));
    }

    pub fn addr(&self, ip: &str, port: u16) -> SocketAddr {
        SocketAddr::new(ip.parse::<IpAddr>().expect("ip"), port)
    }
}
