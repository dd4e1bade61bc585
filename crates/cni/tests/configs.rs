//! Config parsing, in process: every real Windows config in tests/configs parses unchanged into
//! what the plugins act on.

use cni::CniVersion;
use cni::config::NetConf;
use cni::plugins::flannel::FlannelConf;
use cni::plugins::win_bridge::WinBridge;
use cni::plugins::win_overlay::WinOverlay;
use cni::subnet_env::SubnetEnv;
use hcn::EndpointPolicy;

fn file(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/configs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn lease(subnet: &str) -> SubnetEnv {
    SubnetEnv::parse(&format!(
        "FLANNEL_NETWORK=10.0.0.0/8\nFLANNEL_SUBNET={subnet}\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    ))
    .unwrap()
}

/// The delegate flannel would run, parsed as that plugin parses it.
fn delegate_of(name: &str, subnet: &str) -> NetConf {
    let conf = NetConf::parse(&file(name)).unwrap();
    let fc = FlannelConf::parse(&conf).unwrap();
    let d = fc.delegate_conf(&lease(subnet)).unwrap();
    NetConf::parse(&serde_json::to_vec(&d).unwrap()).unwrap()
}

#[test]
fn sdn_l2bridge_conf_crlf_and_capitalised_keys() {
    let raw = file("sdn-l2bridge-cni.conf");
    assert!(
        raw.windows(2).any(|w| w == b"\r\n"),
        "the fixture keeps the original CRLF"
    );
    let conf = NetConf::parse(&raw).unwrap();
    assert_eq!(conf.cni_version, CniVersion::new(0, 2, 0));
    assert_eq!(conf.name, "cbr0");
    let d = delegate_of("sdn-l2bridge-cni.conf", "10.244.1.1/24");
    assert_eq!(d.plugin_type, "win-bridge");
    assert_eq!(d.ipam.as_ref().unwrap().plugin, "host-local");
    let wb = WinBridge::parse(&d).unwrap();
    assert_eq!(wb.win.dns.server_list, ["10.96.0.10"]);
    assert_eq!(wb.win.dns.search, ["svc.cluster.local"]);
    assert_eq!(wb.win.policies.len(), 3);
    assert!(
        matches!(&wb.win.policies[0], EndpointPolicy::OutBoundNat(s) if s.exceptions.len() == 3)
    );
    assert!(matches!(&wb.win.policies[2], EndpointPolicy::SdnRoute(s) if s.need_encap));
    assert_eq!(wb.ip_masq_network, Some("10.0.0.0/8".parse().unwrap()));
}

#[test]
fn sdn_overlay_conf_with_capital_policies_key() {
    let d = delegate_of("sdn-overlay-cni.conf", "192.168.3.1/24");
    let wo = WinOverlay::parse(&d).unwrap();
    assert_eq!(wo.win.policies.len(), 2, "\"Policies\" is read as policies");
    assert!(wo.ip_masq);
    assert_eq!(wo.mac_prefix, [0x0E, 0x2A]);
    assert_eq!(
        wo.mac_for("192.168.3.7".parse().unwrap()).to_string(),
        "0E-2A-C0-A8-03-07"
    );
}

#[test]
fn upstream_samples_parse_unchanged() {
    let v1 = NetConf::parse(&file("win-bridge-sample-v1.conf")).unwrap();
    assert_eq!(
        v1.cni_version,
        CniVersion::new(0, 1, 0),
        "no cniVersion means 0.1.0"
    );
    assert!(v1.ipam.is_none(), "no ipam: HNS assigns the address");
    let wb = WinBridge::parse(&v1).unwrap();
    assert!(wb.win.loopback_dsr);
    assert_eq!(wb.win.api_version, 0);

    let v2 = delegate_of("win-bridge-sample-v2.conf", "10.244.4.1/24");
    let wb2 = WinBridge::parse(&v2).unwrap();
    assert_eq!(wb2.win.api_version, 2);
    // v1 ExceptionList/ROUTE and v2 Settings/SDNRoute are the same policies.
    assert_eq!(wb.win.policies, wb2.win.policies);

    let ov = NetConf::parse(&file("win-overlay-sample.conf")).unwrap();
    assert_eq!(WinOverlay::parse(&ov).unwrap().win.policies.len(), 2);
    let ov2 = NetConf::parse(&file("win-overlay-sample-v2.conf")).unwrap();
    let wo2 = WinOverlay::parse(&ov2).unwrap();
    assert!(wo2.win.policies.iter().any(|p| matches!(p, EndpointPolicy::ProviderAddress(s) if s.provider_address.to_string() == "10.0.133.170")));
}

#[test]
fn sig_windows_tools_sdnoverlay_delegate() {
    let d = delegate_of("sig-windows-tools-flannel-sdnoverlay.conf", "10.244.3.1/24");
    assert_eq!(d.plugin_type, "sdnoverlay");
    let sdn = cni::plugins::sdn::Sdn::parse(&d).unwrap();
    assert_eq!(sdn.network_type, hcn::NetworkType::Overlay);
    assert_eq!(sdn.subnet, Some("10.244.3.0/24".parse().unwrap()));
    let types: Vec<&str> = sdn
        .endpoint_policies
        .iter()
        .map(EndpointPolicy::type_name)
        .collect();
    assert_eq!(types, ["OutBoundNAT", "SDNRoute", "ProviderAddress"]);
}

#[test]
fn the_unfilled_sig_windows_tools_template_is_refused_naming_the_blank() {
    // start.ps1 fills ProviderAddress; left blank, HNS would refuse it, so the plugin does.
    let conf = NetConf::parse(
        br#"{"cniVersion":"0.2.0","name":"flannel.4096","type":"sdnoverlay","AdditionalArgs":[
        {"Name":"EndpointPolicy","Value":{"Type":"ProviderAddress","Settings":{"ProviderAddress":""}}}]}"#,
    )
    .unwrap();
    let e = cni::plugins::sdn::Sdn::parse(&conf).unwrap_err();
    assert_eq!(e.code, cni::Code::INVALID_NETWORK_CONFIG);
    assert!(e.msg.starts_with("AdditionalArgs[0].value"), "{}", e.msg);
}
