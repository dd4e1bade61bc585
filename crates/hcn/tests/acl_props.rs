//! Property tests of the ACL and SetPolicy parsers: any text in any field is refused with an
//! error naming the field, or read; what is read is written back as given; v1 ACLs read as
//! the v2 ACL they mean; set members are read entry by entry, addresses in an IPSET and set
//! IDs in a NESTEDIPSET.

use hcn::modify::PolicyRequest;
use hcn::policy::{AclAddress, SetPolicyType};
use hcn::{EndpointPolicy, HResult, NetworkPolicy, decode_value};
use proptest::prelude::*;
use serde_json::{Value, json};

const ACL_FIELDS: [&str; 6] = [
    "Protocols",
    "LocalAddresses",
    "RemoteAddresses",
    "LocalPorts",
    "RemotePorts",
    "Id",
];

fn endpoint_policies(doc: Value) -> Result<Vec<EndpointPolicy>, hcn::DecodeError> {
    decode_value::<PolicyRequest<EndpointPolicy>>(json!({ "Policies": [doc] })).map(|r| r.policies)
}

fn address() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<[u8; 4]>(), 0u8..=32)
            .prop_map(|(a, l)| format!("{}.{}.{}.{}/{l}", a[0], a[1], a[2], a[3])),
        any::<[u8; 4]>().prop_map(|a| format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])),
    ]
}

fn set_id() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,20}".prop_filter("not the word any", |s| !s.eq_ignore_ascii_case("any"))
}

proptest! {
    #[test]
    fn any_text_in_an_acl_field_is_read_or_refused_naming_it(
        field in prop::sample::select(ACL_FIELDS.to_vec()),
        text in ".{0,40}",
    ) {
        let mut settings = json!({"Action": "Block", "Direction": "In", "Priority": 100});
        settings[field] = json!(text);
        match endpoint_policies(json!({"Type": "ACL", "Settings": settings})) {
            Ok(p) => prop_assert_eq!(p.len(), 1),
            Err(e) => prop_assert!(e.path.starts_with("Policies[0].Settings"), "{}", e),
        }
    }

    #[test]
    fn a_v2_acl_reads_back_as_written(
        local in prop::collection::vec(address(), 0..3),
        remote in prop::collection::vec(set_id(), 0..3),
        ports in prop::collection::vec((0u16..1000, 0u16..10), 0..3),
        id in "[A-Za-z0-9.-]{1,20}",
    ) {
        let ports: Vec<String> = ports.iter().map(|(p, w)| if *w == 0 { p.to_string() } else { format!("{p}-{}", p + w) }).collect();
        let mut settings = json!({"Id": id, "Protocols": "6,17", "Action": "Allow", "Direction": "Out",
            "RuleType": "Switch", "Priority": 222});
        for (k, v) in [("LocalAddresses", local.join(",")), ("RemoteAddresses", remote.join(",")), ("LocalPorts", ports.join(","))] {
            if !v.is_empty() {
                settings[k] = json!(v);
            }
        }
        let doc = json!({"Type": "ACL", "Settings": settings});
        let p = endpoint_policies(doc.clone()).unwrap();
        prop_assert_eq!(serde_json::to_value(&p[0]).unwrap(), doc);
        let EndpointPolicy::Acl(a) = &p[0] else { panic!("an ACL") };
        prop_assert_eq!(a.local_addresses.prefixes().count(), local.len());
        prop_assert_eq!(a.remote_addresses.sets().count(), remote.len());
    }

    #[test]
    fn a_v1_acl_is_the_v2_acl_it_means(protocol in 0u16..=256, port in 0u16..2000) {
        let v1 = json!({"Type": "ACL", "Id": "felix-1", "Protocol": protocol, "Action": "Allow",
            "Direction": "In", "LocalAddresses": "", "RemoteAddresses": "", "LocalPorts": "",
            "LocalPort": port, "RemotePorts": "", "RemotePort": 0, "InternalPort": 0,
            "RuleType": "Switch", "Priority": 1000, "ServiceName": ""});
        let p = endpoint_policies(v1).unwrap();
        let EndpointPolicy::Acl(a) = &p[0] else { panic!("an ACL") };
        prop_assert_eq!(&a.id, "felix-1");
        prop_assert_eq!(a.protocols.as_str(), protocol.to_string());
        prop_assert_eq!(a.protocols.is_any(), protocol == 256);
        prop_assert_eq!(a.local_ports.is_any(), port == 0);
        prop_assert!(a.remote_ports.is_any());
    }

    #[test]
    fn set_members_are_addresses_in_an_ipset_and_ids_in_a_nested_one(
        addresses in prop::collection::vec(address(), 0..5),
        ids in prop::collection::vec(set_id(), 1..5),
        text in ".{0,40}",
    ) {
        let net = |kind: &str, values: &str| decode_value::<PolicyRequest<NetworkPolicy>>(json!({"Policies": [
            {"Type": "SetPolicy", "Settings": {"Id": "s", "Name": "s", "PolicyType": kind, "Values": values}}]}));
        let plain = net("IPSET", &addresses.join(",")).unwrap();
        let NetworkPolicy::SetPolicy(s) = &plain.policies[0] else { panic!("a set") };
        prop_assert_eq!(s.policy_type, SetPolicyType::IpSet);
        prop_assert!(s.values.entries().iter().all(|e| matches!(e, AclAddress::Prefix(_))));
        prop_assert_eq!(s.values.entries().len(), addresses.len());
        let ids: Vec<String> = ids.into_iter().filter(|i| i != "s").collect();
        if !ids.is_empty() {
            let nested = net("NESTEDIPSET", &ids.join(",")).unwrap();
            let NetworkPolicy::SetPolicy(n) = &nested.policies[0] else { panic!("a set") };
            prop_assert_eq!(n.values.sets().count(), ids.len());
            let e = net("IPSET", &ids.join(",")).unwrap_err();
            prop_assert_eq!(e.code, HResult::HCN_E_INVALID_POLICY);
            prop_assert_eq!(e.path, "Policies[0].Settings.Values");
        }
        if let Err(e) = net("IPSET", &text) {
            prop_assert!(e.path.starts_with("Policies[0].Settings"), "{}", e);
        }
    }

    /// `Id` in any case HNS folds is the rule's name; `ID` exactly is refused.
    #[test]
    fn the_id_key_in_any_spelling_but_id(spelling in "[iI][dD]") {
        let doc = json!({"Type": "ACL", "Settings": {spelling.clone(): "r", "Action": "Allow", "Direction": "In"}});
        match endpoint_policies(doc) {
            Ok(p) => {
                prop_assert_ne!(spelling.as_str(), "ID");
                let EndpointPolicy::Acl(a) = &p[0] else { panic!("an ACL") };
                prop_assert_eq!(a.id.as_str(), "r");
            }
            Err(e) => {
                prop_assert_eq!(spelling.as_str(), "ID");
                prop_assert_eq!(e.code, HResult::HCN_E_INVALID_POLICY);
                prop_assert_eq!(e.path, "Policies[0].Settings.ID");
            }
        }
    }
}
