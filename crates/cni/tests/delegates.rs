//! Plugins that run other plugins (flannel its delegate, every plugin its IPAM), without root
//! or hnsd: a plugin name from a config names a file on `CNI_PATH`, never a path (libcni's
//! `FindInPath` refuses a name with a path separator: "invalid plugin name: ..."), and the
//! program such a name points at never runs; and a failed flannel ADD leaves no saved delegate
//! config behind. flannel reaches its delegate before anything talks to HNS.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use cni::{Env, run};
use serde_json::{Value, json};

/// A scratch node: `CNI_PATH` (`bin/`), flanneld's `subnet.env`, flannel's data dir, and
/// programs that log each verb they run to `verbs`.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin");
        std::fs::write(
            dir.path().join("subnet.env"),
            "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
        )
        .expect("subnet.env");
        Scratch { dir }
    }

    /// A program at `at` (under the scratch dir) that logs its verb and answers ADD and DEL
    /// with success, or with a CNI error when told to fail.
    fn program(&self, at: &str, add_fails: bool, del_fails: bool) {
        let answer = |fails: bool| {
            if fails {
                r#"echo '{"code":11,"msg":"boom"}'; exit 1"#
            } else {
                "exit 0"
            }
        };
        let script = format!(
            "#!/bin/sh\necho \"$CNI_COMMAND\" >> {}\nif [ \"$CNI_COMMAND\" = ADD ]; then {}; fi\nif [ \"$CNI_COMMAND\" = DEL ]; then {}; fi\nexit 0\n",
            self.path("verbs").display(),
            answer(add_fails),
            answer(del_fails)
        );
        let path = self.path(at);
        std::fs::write(&path, script).expect("write the program");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn env(&self, command: &str) -> Env {
        Env::from_pairs([
            ("CNI_COMMAND", command.to_string()),
            ("CNI_CONTAINERID", "pod1".to_string()),
            ("CNI_NETNS", "none".to_string()),
            ("CNI_IFNAME", "eth0".to_string()),
            ("CNI_PATH", self.path("bin").display().to_string()),
            (
                "HNS_SOCKET",
                self.path("no-hnsd.sock").display().to_string(),
            ),
            (
                "WINNET_CNI_STATE_DIR",
                self.path("state").display().to_string(),
            ),
        ])
    }

    fn flannel_conf(&self, delegate: Value) -> String {
        json!({
            "cniVersion": "1.0.0", "name": "cbr0", "type": "flannel",
            "subnetFile": self.path("subnet.env"), "dataDir": self.path("data"),
            "delegate": delegate,
        })
        .to_string()
    }

    /// flannel ADD with `delegate.type` = `delegate`.
    fn add(&self, delegate: &str) -> cni::Output {
        let flannel = cni::plugins::by_name("flannel").expect("flannel");
        let conf = self.flannel_conf(json!({ "type": delegate }));
        run(flannel.as_ref(), &self.env("ADD"), conf.as_bytes())
    }

    fn saved(&self) -> PathBuf {
        self.path("data").join("pod1")
    }

    /// The verbs the programs ran, in order.
    fn verbs(&self) -> String {
        std::fs::read_to_string(self.path("verbs")).unwrap_or_default()
    }
}

/// The error object of a failed run.
#[track_caller]
fn error_of(out: &cni::Output) -> Value {
    assert_eq!(
        out.exit_code,
        1,
        "the plugin succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("a CNI error object")
}

/// Every way to write a path to `x.sh` from `bin/`.
fn paths_to_the_program(s: &Scratch) -> Vec<String> {
    vec![
        "../x.sh".to_string(),
        "../../../../../../../..".to_string() + &s.path("x.sh").display().to_string(),
        s.path("x.sh").display().to_string(),
        "./../x.sh".to_string(),
    ]
}

#[test]
fn a_delegate_type_with_a_path_separator_is_refused_as_libcni_does_and_never_runs() {
    let s = Scratch::new();
    s.program("x.sh", false, false);
    let flannel = cni::plugins::by_name("flannel").expect("flannel");
    for name in paths_to_the_program(&s) {
        let out = run(
            flannel.as_ref(),
            &s.env("ADD"),
            s.flannel_conf(json!({"type": name})).as_bytes(),
        );
        let e = error_of(&out);
        assert!(s.verbs().is_empty(), "flannel ran {name}");
        assert_eq!(e["code"], 7, "{e}");
        let msg = e["msg"].as_str().unwrap_or_default();
        assert_eq!(
            msg,
            format!("delegate.type: invalid plugin name: {name}"),
            "{e}"
        );
        assert!(
            e["details"]
                .as_str()
                .unwrap_or_default()
                .contains("CNI_PATH"),
            "the details say what to write instead: {e}"
        );
        assert!(
            !s.path("data").join("pod1").exists(),
            "a delegate config was saved for {name}"
        );
    }
}

#[test]
fn a_saved_delegate_config_naming_a_path_is_not_run_by_del_check_or_status() {
    let s = Scratch::new();
    s.program("x.sh", false, false);
    let flannel = cni::plugins::by_name("flannel").expect("flannel");
    // A saved config (from an older version, or edited on the node) that names a path.
    std::fs::create_dir(s.path("data")).expect("data dir");
    let saved = json!({"cniVersion": "1.0.0", "name": "cbr0", "type": "../x.sh"});
    std::fs::write(s.path("data").join("pod1"), saved.to_string()).expect("saved");
    for verb in ["DEL", "CHECK"] {
        let conf = serde_json::from_str::<Value>(&s.flannel_conf(json!({})))
            .map(|mut c| {
                c["prevResult"] = json!({"cniVersion": "1.0.0", "ips": []});
                c.to_string()
            })
            .expect("conf");
        let out = run(flannel.as_ref(), &s.env(verb), conf.as_bytes());
        let e = error_of(&out);
        assert!(
            s.verbs().is_empty(),
            "flannel {verb} ran the saved delegate type"
        );
        assert!(
            e["msg"]
                .as_str()
                .unwrap_or_default()
                .contains("invalid plugin name: ../x.sh"),
            "{verb}: {e}"
        );
    }
}

#[test]
fn an_ipam_type_with_a_path_separator_is_refused_as_libcni_does_and_never_runs() {
    let s = Scratch::new();
    s.program("x.sh", false, false);
    for plugin in ["win-bridge", "win-overlay", "sdnbridge"] {
        let p = cni::plugins::by_name(plugin).expect("plugin");
        for name in paths_to_the_program(&s) {
            let conf = json!({
                "cniVersion": "1.0.0", "name": "cbr0", "type": plugin,
                "ipam": {"type": name, "subnet": "10.244.1.0/24"},
            });
            let out = run(p.as_ref(), &s.env("ADD"), conf.to_string().as_bytes());
            let e = error_of(&out);
            assert!(s.verbs().is_empty(), "{plugin} ran {name}");
            assert_eq!(e["code"], 7, "{e}");
            assert_eq!(
                e["msg"],
                format!("ipam.type: invalid plugin name: {name}"),
                "{plugin}: {e}"
            );
        }
    }
}

#[test]
fn a_plain_name_is_still_found_on_cni_path() {
    // The same program, installed on CNI_PATH under a plain name, is what runs.
    let s = Scratch::new();
    s.program("bin/x-delegate", false, false);
    let flannel = cni::plugins::by_name("flannel").expect("flannel");
    let out = run(
        flannel.as_ref(),
        &s.env("ADD"),
        s.flannel_conf(json!({"type": "x-delegate"})).as_bytes(),
    );
    // It prints no result, so the ADD fails, but it ran.
    error_of(&out);
    assert!(
        !s.verbs().is_empty(),
        "the delegate on CNI_PATH did not run"
    );
}

#[test]
fn a_failed_delegate_add_of_a_new_pod_leaves_no_saved_config() {
    let s = Scratch::new();
    s.program("bin/fake", true, false);
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
    let s = Scratch::new();
    s.program("bin/fake", true, true);
    error_of(&s.add("fake"));
    assert_eq!(s.verbs(), "ADD\nDEL\n");
    assert!(
        s.saved().is_file(),
        "DEL could not clean up: its config must stay"
    );
}

#[test]
fn a_failed_repeated_add_keeps_the_pods_saved_config_and_runs_no_del() {
    let s = Scratch::new();
    s.program("bin/fake", true, false);
    std::fs::create_dir(s.path("data")).expect("data");
    std::fs::write(s.saved(), r#"{"type":"fake","name":"cbr0"}"#).expect("saved");
    error_of(&s.add("fake"));
    assert_eq!(s.verbs(), "ADD\n", "a DEL would tear down the running pod");
    assert!(s.saved().is_file());
}

#[test]
fn a_delegate_not_on_cni_path_saves_nothing() {
    let s = Scratch::new();
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
