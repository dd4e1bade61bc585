//! The flannel plugin around its delegate, without root or hnsd: a failed ADD leaves no saved
//! delegate config behind, and the documents it reads (`subnet.env`, the `delegate` section)
//! never make it panic, whatever they hold; a bad one is an error naming the field.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use cni::config::NetConf;
use cni::plugins::flannel::FlannelConf;
use cni::subnet_env::SubnetEnv;
use cni::{Env, run};
use proptest::prelude::*;
use serde_json::{Value, json};

/// `CNI_PATH` with one delegate, `fake`, a shell script that logs each verb it runs and
/// answers ADD and DEL as told.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new(add_fails: bool, del_fails: bool) -> Scratch {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin");
        let log = dir.path().join("verbs");
        let answer = |fails: bool| {
            if fails {
                r#"echo '{"code":11,"msg":"boom"}'; exit 1"#
            } else {
                "exit 0"
            }
        };
        let script = format!(
            "#!/bin/sh\necho \"$CNI_COMMAND\" >> {}\nif [ \"$CNI_COMMAND\" = ADD ]; then {}; fi\nif [ \"$CNI_COMMAND\" = DEL ]; then {}; fi\nexit 0\n",
            log.display(),
            answer(add_fails),
            answer(del_fails)
        );
        let fake = dir.path().join("bin/fake");
        std::fs::write(&fake, script).expect("write the delegate");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(
            dir.path().join("subnet.env"),
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        )
        .expect("subnet.env");
        Scratch { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn add(&self, delegate: &str) -> cni::Output {
        let env = Env::from_pairs([
            ("CNI_COMMAND", "ADD".to_string()),
            ("CNI_CONTAINERID", "pod1".to_string()),
            ("CNI_NETNS", "none".to_string()),
            ("CNI_IFNAME", "eth0".to_string()),
            ("CNI_PATH", self.path("bin").display().to_string()),
        ]);
        let conf = json!({
            "cniVersion": "1.0.0", "name": "cbr0", "type": "flannel",
            "subnetFile": self.path("subnet.env"), "dataDir": self.path("data"),
            "delegate": {"type": delegate},
        });
        let flannel = cni::plugins::by_name("flannel").expect("flannel");
        run(flannel.as_ref(), &env, conf.to_string().as_bytes())
    }

    fn saved(&self) -> PathBuf {
        self.path("data").join("pod1")
    }

    fn verbs(&self) -> String {
        std::fs::read_to_string(self.path("verbs")).unwrap_or_default()
    }
}

#[track_caller]
fn error_of(out: &cni::Output) -> Value {
    assert_eq!(out.exit_code, 1, "{}", String::from_utf8_lossy(&out.stdout));
    serde_json::from_slice(&out.stdout).expect("a CNI error object")
}

#[test]
fn a_failed_delegate_add_of_a_new_pod_leaves_no_saved_config() {
    let s = Scratch::new(true, false);
    let e = error_of(&s.add("fake"));
    assert_eq!(e["code"], 11, "{e}");
    assert_eq!(e["msg"], "delegate: fake ADD: boom");
    // The delegate's DEL ran (as the runtime's DEL would have, through the saved config),
    // then the saved config went.
    assert_eq!(s.verbs(), "ADD\nDEL\n");
    assert!(!s.saved().exists(), "the saved delegate config stayed");
}

#[test]
fn when_the_delegates_del_fails_too_the_saved_config_stays_for_the_runtimes_del() {
    let s = Scratch::new(true, true);
    error_of(&s.add("fake"));
    assert_eq!(s.verbs(), "ADD\nDEL\n");
    assert!(
        s.saved().is_file(),
        "DEL could not clean up: its config must stay"
    );
}

#[test]
fn a_failed_repeated_add_keeps_the_pods_saved_config_and_runs_no_del() {
    let s = Scratch::new(true, false);
    std::fs::create_dir(s.path("data")).expect("data");
    std::fs::write(s.saved(), r#"{"type":"fake","name":"cbr0"}"#).expect("saved");
    error_of(&s.add("fake"));
    assert_eq!(s.verbs(), "ADD\n", "a DEL would tear down the running pod");
    assert!(s.saved().is_file());
}

#[test]
fn a_delegate_not_on_cni_path_saves_nothing() {
    let s = Scratch::new(false, false);
    let e = error_of(&s.add("no-such-delegate"));
    assert_eq!(e["code"], 7, "{e}");
    assert!(
        e["msg"]
            .as_str()
            .is_some_and(|m| m.contains("no plugin \"no-such-delegate\" in CNI_PATH")),
        "{e}"
    );
    assert!(!s.path("data").exists(), "a config was saved");
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::from),
        Just(json!("win-bridge")),
        Just(json!("../x")),
        Just(json!("10.244.0.0/16")),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Keys the flannel plugin and its delegate read, in any case, and others.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "type",
            "Type",
            "name",
            "ipam",
            "IPAM",
            "dns",
            "policies",
            "cniVersion",
            "runtimeConfig",
            "hnsSocket",
            "stateDir",
            "ipMasq",
        ])
        .prop_map(String::from),
        "[a-zA-Z]{1,8}",
    ]
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
