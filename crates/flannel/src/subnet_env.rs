//! `subnet.env`, the file the flannel CNI plugin reads: the cluster network, this node's subnet
//! (its first address and length), the MTU and whether the CNI plugin should masquerade.
//! Written atomically (a temporary file renamed over it), so a plugin never reads half of it.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;

use ipnet::Ipv4Net;

/// What subnet.env says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubnetEnv {
    pub network: Ipv4Net,
    pub subnet: Ipv4Net,
    pub mtu: u32,
    pub ip_masq: bool,
}

impl SubnetEnv {
    /// The file's text, in flannel's order.
    pub fn render(&self) -> String {
        let first = Ipv4Addr::from(u32::from(self.subnet.network()).saturating_add(1));
        format!(
            "FLANNEL_NETWORK={}\nFLANNEL_SUBNET={}/{}\nFLANNEL_MTU={}\nFLANNEL_IPMASQ={}\n",
            self.network,
            first,
            self.subnet.prefix_len(),
            self.mtu,
            self.ip_masq
        )
    }

    /// Reads the `FLANNEL_SUBNET` of an earlier run (the subnet to ask for again).
    pub fn previous_subnet(text: &str) -> Option<Ipv4Net> {
        text.lines()
            .find_map(|l| l.strip_prefix("FLANNEL_SUBNET="))
            .and_then(|s| s.trim().parse::<Ipv4Net>().ok())
            .map(|n| n.trunc())
    }

    /// Writes the file atomically, creating its directory; unchanged content is not rewritten.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = self.render();
        if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
            return Ok(());
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "subnet.env".into());
        let tmp = path.with_file_name(format!(".{name}.tmp"));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_last_runs_subnet_reads_back_and_no_text_makes_it_panic(
            addr in any::<u32>(),
            len in 8u8..=30,
            noise in proptest::collection::vec("[ -~]{0,30}|FLANNEL_SUBNET=[ -~]{0,20}", 0..6),
            mtu in any::<u32>(),
            ip_masq in any::<bool>(),
        ) {
            let text = noise.join("\n");
            if let Some(s) = SubnetEnv::previous_subnet(&text) {
                prop_assert_eq!(s, s.trunc());
            }
            let subnet = Ipv4Net::new(Ipv4Addr::from(addr), len).expect("len <= 32").trunc();
            let network = Ipv4Net::new(subnet.network(), len - 4).expect("len <= 32").trunc();
            let env = SubnetEnv { network, subnet, mtu, ip_masq };
            prop_assert_eq!(SubnetEnv::previous_subnet(&env.render()), Some(subnet));
        }
    }

    #[test]
    fn the_file_is_flannels_and_replaced_whole() {
        let env = SubnetEnv {
            network: "10.244.0.0/16".parse().expect("net"),
            subnet: "10.244.1.0/24".parse().expect("net"),
            mtu: 1450,
            ip_masq: true,
        };
        assert_eq!(
            env.render(),
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
        );
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("run/flannel/subnet.env");
        env.write(&path).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, env.render());
        assert_eq!(SubnetEnv::previous_subnet(&text), Some(env.subnet));
        assert_eq!(
            std::fs::read_dir(path.parent().expect("dir"))
                .expect("ls")
                .count(),
            1
        );
    }
}
