//! The DNS settings a Windows CNI plugin gives a pod's HNS endpoint: the config's static `dns`
//! block, overridden by the runtime's `runtimeConfig.dns` (the CNI `dns` capability, which
//! containerd fills from kubelet's pod DNS config). One reader for every plugin; what differs
//! between plugin families is [`RuntimeOptions`].

use hcn::Dns;

use crate::config::Obj;
use crate::error::CniError;

/// Whether a plugin takes `runtimeConfig.dns.options` (kubelet's `ndots:5`) onto the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeOptions {
    /// win-bridge / win-overlay (containernetworking/plugins `pkg/hns` `RuntimeDNS` has only
    /// `servers` and `searches`): the options never reach HNS.
    Ignored,
    /// sdnbridge / sdnoverlay / nat (windows-container-networking `GetNetworkInfo`): non-empty
    /// options replace the static ones.
    Applied,
}

/// The endpoint DNS of a config: static `dns.{nameservers,domain,search,options}`, then each
/// non-empty `runtimeConfig.dns.{servers,searches}` (and `options` when `runtime_options` is
/// [`RuntimeOptions::Applied`]) replacing its static counterpart.
pub fn endpoint_dns(root: &Obj<'_>, runtime_options: RuntimeOptions) -> Result<Dns, CniError> {
    let mut dns = Dns::default();
    if let Some(d) = root.obj("dns")? {
        dns.server_list = d.strings("nameservers")?;
        dns.domain = d.string("domain")?;
        dns.search = d.strings("search")?;
        dns.options = d.strings("options")?;
    }
    let runtime = root.obj("runtimeConfig")?;
    let Some(rdns) = runtime.map(|r| r.obj("dns")).transpose()?.flatten() else {
        return Ok(dns);
    };
    let servers = rdns.strings("servers")?;
    if !servers.is_empty() {
        dns.server_list = servers;
    }
    let searches = rdns.strings("searches")?;
    if !searches.is_empty() {
        dns.search = searches;
    }
    if runtime_options == RuntimeOptions::Applied {
        let options = rdns.strings("options")?;
        if !options.is_empty() {
            dns.options = options;
        }
    }
    Ok(dns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NetConf;

    fn read(conf: &str, o: RuntimeOptions) -> Result<Dns, CniError> {
        let conf = NetConf::parse(conf.as_bytes())?;
        endpoint_dns(&conf.root(), o)
    }

    const CONF: &str = r#"{"cniVersion":"1.0.0","name":"n","type":"win-bridge",
        "dns":{"nameservers":["10.0.0.10"],"domain":"d","search":["svc.cluster.local"],"options":["a"]},
        "runtimeConfig":{"dns":{"servers":["10.96.0.10"],
          "searches":["default.svc.cluster.local","svc.cluster.local","cluster.local"],
          "options":["ndots:5"]}}}"#;

    #[test]
    fn runtime_servers_and_searches_replace_the_static_ones_for_every_plugin() {
        for o in [RuntimeOptions::Ignored, RuntimeOptions::Applied] {
            let dns = read(CONF, o).expect("dns");
            assert_eq!(dns.server_list, ["10.96.0.10"]);
            assert_eq!(
                dns.search,
                [
                    "default.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local"
                ]
            );
            assert_eq!(dns.domain, "d", "the domain has no runtime override");
        }
    }

    #[test]
    fn runtime_options_reach_the_endpoint_only_when_the_plugin_applies_them() {
        assert_eq!(
            read(CONF, RuntimeOptions::Ignored).expect("dns").options,
            ["a"]
        );
        assert_eq!(
            read(CONF, RuntimeOptions::Applied).expect("dns").options,
            ["ndots:5"]
        );
    }

    #[test]
    fn empty_runtime_lists_keep_the_static_config_and_no_dns_is_empty() {
        let conf = r#"{"cniVersion":"1.0.0","name":"n","type":"win-bridge",
            "dns":{"nameservers":["10.0.0.10"],"search":["s"]},
            "runtimeConfig":{"dns":{"servers":[],"searches":[]}}}"#;
        let dns = read(conf, RuntimeOptions::Applied).expect("dns");
        assert_eq!(
            (dns.server_list, dns.search),
            (vec!["10.0.0.10".to_string()], vec!["s".to_string()])
        );
        let none = r#"{"cniVersion":"1.0.0","name":"n","type":"win-bridge"}"#;
        assert_eq!(
            read(none, RuntimeOptions::Applied).expect("dns"),
            Dns::default()
        );
    }

    #[test]
    fn a_wrongly_typed_field_is_named() {
        let conf = r#"{"cniVersion":"1.0.0","name":"n","type":"win-bridge",
            "runtimeConfig":{"dns":{"servers":"10.96.0.10"}}}"#;
        let e = read(conf, RuntimeOptions::Ignored).expect_err("string, not list");
        assert!(e.to_string().contains("servers"), "{e}");
    }
}
