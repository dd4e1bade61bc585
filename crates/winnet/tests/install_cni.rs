//! `winnet install-cni DIR`: every plugin name becomes a link to winnet, the links run the
//! plugin they are named after, installing twice is harmless, and a foreign file is kept
//! unless --force.

use std::process::{Command, Stdio};

fn winnet() -> &'static str {
    env!("CARGO_BIN_EXE_winnet")
}

#[test]
fn links_every_plugin_name_and_each_answers_version() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    for _ in 0..2 {
        let out = Command::new(winnet())
            .arg("install-cni")
            .arg(&bin)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for name in [
        "win-bridge",
        "win-overlay",
        "flannel",
        "sdnbridge",
        "sdnoverlay",
        "nat",
    ] {
        let link = bin.join(name);
        let target = std::fs::read_link(&link).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            target,
            std::path::Path::new(winnet()).canonicalize().unwrap()
        );
        let out = Command::new(&link)
            .env_clear()
            .env("CNI_COMMAND", "VERSION")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["cniVersion"], "1.1.0", "{name}");
    }
}

#[test]
fn a_foreign_file_is_kept_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("win-bridge"), b"#!/bin/sh\n").unwrap();
    let out = Command::new(winnet())
        .arg("install-cni")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert!(
        std::fs::symlink_metadata(dir.path().join("win-bridge"))
            .unwrap()
            .is_file()
    );
    let out = Command::new(winnet())
        .arg("install-cni")
        .arg("--force")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        std::fs::symlink_metadata(dir.path().join("win-bridge"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}
