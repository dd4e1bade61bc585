//! Property tests: whatever the environment and stdin, a plugin answers with exit code 0 and a
//! JSON result (or nothing), or exit code 1 and a CNI error object — never a panic. hnsd is
//! unreachable and CNI_PATH empty, so nothing is created anywhere. The documents flannel reads
//! (`subnet.env`, the `delegate` section) never make it panic either; a bad one is an error
//! naming the field.

use cni::config::NetConf;
use cni::plugins::flannel::FlannelConf;
use cni::subnet_env::SubnetEnv;
use cni::{Env, run};
use proptest::prelude::*;
use serde_json::{Value, json};

fn check_output(o: &cni::Output) -> Result<(), TestCaseError> {
    prop_assert!(
        o.exit_code == 0 || o.exit_code == 1,
        "exit code {}",
        o.exit_code
    );
    let text = String::from_utf8_lossy(&o.stdout);
    if o.exit_code == 1 {
        let v: Value =
            serde_json::from_str(&text).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        prop_assert!(v["code"].is_u64(), "no code: {text}");
        prop_assert!(v["msg"].is_string(), "no msg: {text}");
    } else if !text.trim().is_empty() {
        serde_json::from_str::<Value>(&text)
            .map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
    }
    Ok(())
}

fn scratch() -> &'static tempfile::TempDir {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
}

fn env_for(command: &str, container: &str, netns: &str, ifname: &str) -> Env {
    let dir = scratch().path();
    Env::from_pairs([
        ("CNI_COMMAND", command.to_string()),
        ("CNI_CONTAINERID", container.to_string()),
        ("CNI_NETNS", netns.to_string()),
        ("CNI_IFNAME", ifname.to_string()),
        (
            "CNI_PATH",
            dir.join("empty-cni-path").to_string_lossy().into_owned(),
        ),
        (
            "HNS_SOCKET",
            dir.join("no-hnsd.sock").to_string_lossy().into_owned(),
        ),
        (
            "WINNET_CNI_STATE_DIR",
            dir.join("state").to_string_lossy().into_owned(),
        ),
    ])
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::from),
        Just(json!("10.244.1.0/24")),
        Just(json!("EndpointPolicy")),
        Just(json!("win-bridge")),
        Just(json!("../x")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Keys the plugins read (path-like ones excluded: they name files), in any case.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "cniVersion",
            "name",
            "type",
            "ipam",
            "dns",
            "policies",
            "Policies",
            "value",
            "Value",
            "Name",
            "Type",
            "Settings",
            "ExceptionList",
            "Exceptions",
            "apiVersion",
            "runtimeConfig",
            "portMappings",
            "hostPort",
            "containerPort",
            "protocol",
            "loopbackDSR",
            "ipMasq",
            "ipMasqNetwork",
            "endpointMacPrefix",
            "delegate",
            "prevResult",
            "ips",
            "address",
            "cni.dev/valid-attachments",
            "containerID",
            "AdditionalArgs",
            "optionalFlags",
            "subnet",
        ])
        .prop_map(String::from),
        "[a-zA-Z]{1,8}",
    ]
}

fn config() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "0.1.0", "0.2.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", "9.9", "",
        ]),
        prop::sample::select(vec!["cbr0", "", "bad/name", "vxlan0"]),
        prop::collection::vec((key(), any_json()), 0..6),
    )
        .prop_map(|(v, name, extra)| {
            let mut m: serde_json::Map<String, Value> = extra.into_iter().collect();
            m.insert("cniVersion".into(), json!(v));
            m.insert("name".into(), json!(name));
            Value::Object(m)
        })
}

fn command() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"])
            .prop_map(String::from),
        "[A-Za-z]{0,6}",
    ]
}

fn plugin() -> impl Strategy<Value = &'static str> {
    prop::sample::select(cni::NAMES.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(
        name in plugin(),
        cmd in command(),
        container in "[ -~]{0,10}",
        netns in prop_oneof![Just("none".to_string()), Just("container:abc".to_string()), "[ -~]{0,12}"],
        ifname in "[ -~]{0,17}",
        stdin in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let plugin = cni::plugins::by_name(name).expect("a plugin");
        let out = run(plugin.as_ref(), &env_for(&cmd, &container, &netns, &ifname), &stdin);
        check_output(&out)?;
    }

    #[test]
    fn arbitrary_configs_never_panic(
        name in plugin(),
        cmd in command(),
        container in prop_oneof![Just("pod1".to_string()), "[ -~]{0,10}"],
        netns in prop_oneof![Just("none".to_string()), Just("container:pod1".to_string()), Just("5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D".to_string())],
        conf in config(),
    ) {
        let plugin = cni::plugins::by_name(name).expect("a plugin");
        let out = run(plugin.as_ref(), &env_for(&cmd, &container, &netns, "eth0"), conf.to_string().as_bytes());
        check_output(&out)?;
    }
}

/// A value for a `CNI_*` variable: good ones, near misses and noise.
fn env_value() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "ADD",
            "DEL",
            "CHECK",
            "STATUS",
            "GC",
            "VERSION",
            "add",
            "pod1",
            "bad/id",
            "none",
            "container:pod1",
            "container:",
            "container:a/b",
            "5A4B3C2D-1E0F-4A5B-8C7D-6E5F4A3B2C1D",
            "/proc/self/ns/net",
            "/proc/self/ns/uts",
            "/etc/passwd",
            "/tmp",
            "/dev/null",
            "/nonexistent/netns",
            "eth0",
            "eth0:1",
            "..",
            "a b",
            "averyveryverylongname",
            "/usr/lib/cni",
            "K8S_POD_NAME=p;K8S_POD_NAMESPACE=n",
            "=;;=",
            "",
        ])
        .prop_map(String::from),
        "[ -~]{0,20}",
        ".{0,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Whatever the runtime sets, reading the environment answers: valid arguments, or code 4
    /// naming the variable; and CNI_NETNS is then a shape ADD accepts or an error naming it.
    #[test]
    fn the_cni_environment_never_panics_and_errors_name_the_variable(
        vars in prop::collection::vec((prop::sample::select(vec![
            "CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH", "CNI_ARGS",
            "CNI_NETNS_OVERRIDE",
        ]), env_value()), 0..9),
    ) {
        let env = Env::from_pairs(vars);
        let args = match cni::protocol::Args::from_env(&env) {
            Ok(args) => args,
            Err(e) => {
                prop_assert_eq!(e.code, cni::Code::INVALID_ENVIRONMENT);
                prop_assert!(e.msg.contains("CNI_"), "{}", e.msg);
                return Ok(());
            }
        };
        use cni::protocol::Command;
        if matches!(args.command, Command::Add | Command::Del | Command::Check) {
            prop_assert!(cni::config::is_valid_name(&args.container_id), "{:?}", args);
            prop_assert!(!args.ifname.is_empty() && args.ifname.len() <= 15, "{:?}", args);
            prop_assert!(!args.ifname.contains(['/', ':']), "{:?}", args);
        }
        let _ = args.cni_path();
        let _ = args.cni_arg("K8S_POD_NAME");
        match cni::netns::NetNs::parse(&args.netns) {
            Ok(ns) => {
                if let Err(e) = ns.check_for_add() {
                    prop_assert!(
                        matches!(e.code, cni::Code::INVALID_ENVIRONMENT | cni::Code::INVALID_NETNS),
                        "{:?}", e
                    );
                    prop_assert!(e.msg.contains("CNI_NETNS"), "{}", e.msg);
                }
            }
            Err(e) => {
                prop_assert_eq!(e.code, cni::Code::INVALID_ENVIRONMENT);
                prop_assert!(e.msg.contains("CNI_NETNS"), "{}", e.msg);
            }
        }
    }
}

#[test]
fn an_unreachable_hnsd_is_try_again_later_and_nothing_is_written() {
    let plugin = cni::plugins::by_name("win-bridge").unwrap();
    let conf = json!({"cniVersion": "1.0.0", "name": "cbr0", "type": "win-bridge"}).to_string();
    let dir = tempfile::tempdir().unwrap();
    let mut env = env_for("ADD", "pod1", "none", "eth0");
    env = Env::from_pairs(env.vars().iter().map(|(k, v)| {
        let v = if k == "WINNET_CNI_STATE_DIR" {
            dir.path().join("state").to_string_lossy().into_owned()
        } else {
            v.clone()
        };
        (k.clone(), v)
    }));
    let out = run(plugin.as_ref(), &env, conf.as_bytes());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["code"], 11, "{v}");
    assert!(!dir.path().join("state").exists());
}

/// A `subnet.env`: lines of flannel's keys (and others) with good and bad values, or noise.
fn subnet_env_text() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        (
            prop::sample::select(vec![
                "FLANNEL_NETWORK",
                "FLANNEL_IPV6_NETWORK",
                "FLANNEL_SUBNET",
                "FLANNEL_IPV6_SUBNET",
                "FLANNEL_MTU",
                "FLANNEL_IPMASQ",
                "OTHER",
                " FLANNEL_MTU ",
            ]),
            prop_oneof![
                Just("10.244.0.0/16".to_string()),
                Just("10.244.1.1/24".to_string()),
                Just("10.244.0.0/16,fd00::/56, 10.245.0.0/16".to_string()),
                Just("fd00:1::1/64".to_string()),
                Just("1450".to_string()),
                Just("true".to_string()),
                Just("99999999999".to_string()),
                "[ -~]{0,20}",
            ],
        )
            .prop_map(|(k, v)| format!("{k}={v}")),
        "[ -~]{0,30}",
    ];
    prop::collection::vec(line, 0..8).prop_map(|lines| lines.join("\n"))
}

/// A message names its field: `field: problem`, the field one token of a JSON path.
fn names_a_field(msg: &str) -> bool {
    msg.split_once(": ")
        .is_some_and(|(field, _)| !field.is_empty() && !field.contains(char::is_whitespace))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn subnet_env_never_panics_and_names_the_key_it_refuses(text in subnet_env_text()) {
        match SubnetEnv::parse(&text) {
            Ok(env) => {
                prop_assert!(env.subnet.is_some() || env.ipv6_subnet.is_some());
                prop_assert!(!env.networks.is_empty() || !env.ipv6_networks.is_empty());
                // A subnet is a network: no host bits.
                for s in env.subnet.iter().chain(env.ipv6_subnet.iter()) {
                    prop_assert_eq!(*s, s.trunc());
                }
            }
            Err(e) => prop_assert!(e.contains("FLANNEL_"), "{}", e),
        }
    }

    #[test]
    fn the_delegate_config_never_panics_and_errors_name_the_field(
        delegate in any_json(),
        top in prop::collection::vec((prop::sample::select(vec![
            "cniVersion", "runtimeConfig", "hnsSocket", "stateDir", "subnetFile", "dataDir", "ipam",
        ]), any_json()), 0..3),
        text in subnet_env_text(),
    ) {
        let mut conf = json!({"cniVersion": "1.0.0", "name": "cbr0", "type": "flannel", "delegate": delegate});
        for (k, v) in top {
            conf[k] = v;
        }
        let parsed = NetConf::parse(conf.to_string().as_bytes())
            .and_then(|c| FlannelConf::parse(&c));
        let fc = match parsed {
            Ok(fc) => fc,
            Err(e) => {
                prop_assert!(names_a_field(&e.msg), "{}", e.msg);
                return Ok(());
            }
        };
        // A delegate type that parsed is a plain name on CNI_PATH.
        if let Some(Value::String(t)) = fc.delegate.get("type") {
            prop_assert!(!t.contains('/') && !t.is_empty(), "{}", t);
        }
        let Ok(env) = SubnetEnv::parse(&text) else {
            return Ok(());
        };
        match fc.delegate_conf(&env) {
            Ok(d) => {
                prop_assert_eq!(d.get("name"), Some(&json!("cbr0")));
                prop_assert!(d.get("type").is_some_and(Value::is_string));
                prop_assert_eq!(&d["ipam"]["type"], &json!("host-local"));
            }
            Err(e) => prop_assert!(names_a_field(&e.msg), "{}", e.msg),
        }
    }
}
