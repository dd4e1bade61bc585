//! Running another plugin (IPAM, or flannel's delegate) as a runtime would: the binary named by
//! `type` on `CNI_PATH`, this call's environment with the verb and IDs set, the config on stdin.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};

use serde_json::Value;

use crate::error::{CniError, Code};
use crate::protocol::{Args, Command, Env};
use crate::result::CniResult;
use crate::version::CniVersion;

/// One call of a delegate plugin.
#[derive(Clone, Debug)]
pub struct Call<'a> {
    /// The plugin's `type`: a file name on `CNI_PATH`.
    pub plugin: &'a str,
    pub command: Command,
    pub container_id: &'a str,
    pub ifname: &'a str,
    pub netns: &'a str,
    pub stdin: &'a [u8],
}

/// Checks a plugin name from a config (`field`) as libcni's `FindInPath` does: a file name on
/// `CNI_PATH`, so never empty and never with a path separator (`/`, or Windows' `\\`) that
/// would run a program elsewhere.
pub fn check_plugin_name(field: &str, plugin: &str) -> Result<(), CniError> {
    if plugin.is_empty() {
        return Err(CniError::config(field, "no plugin name provided").details(
            "name a plugin installed on CNI_PATH, e.g. \"host-local\" or \"win-bridge\"",
        ));
    }
    if plugin.contains(['/', '\\', '\0']) {
        return Err(
            CniError::config(field, format!("invalid plugin name: {plugin}")).details(
                "a plugin is a file name on CNI_PATH, without a path: install the program in a CNI_PATH directory and name it there, e.g. \"host-local\" or \"win-bridge\"",
            ),
        );
    }
    Ok(())
}

/// Finds `plugin` in the directories of `CNI_PATH`.
pub fn find(plugin: &str, args: &Args) -> Result<PathBuf, CniError> {
    check_plugin_name("type", plugin)?;
    let dirs = args.cni_path();
    dirs.iter()
        .map(|d| d.join(plugin))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            CniError::config(
                "type",
                format!(
                    "no plugin \"{plugin}\" in CNI_PATH ({}); install it there (Debian: apt-get install containernetworking-plugins puts host-local in /usr/lib/cni) or fix the type",
                    args.path
                ),
            )
        })
}

/// Runs the call; the plugin's stdout on success, its error object as a [`CniError`] otherwise.
pub fn exec(env: &Env, args: &Args, call: &Call<'_>) -> Result<Vec<u8>, CniError> {
    let path = find(call.plugin, args)?;
    let mut child = Process::new(&path)
        .env_clear()
        .envs(env.vars())
        .env("CNI_COMMAND", call.command.as_str())
        .env("CNI_CONTAINERID", call.container_id)
        .env("CNI_NETNS", call.netns)
        .env("CNI_IFNAME", call.ifname)
        .env("CNI_ARGS", &args.args)
        .env("CNI_PATH", &args.path)
        .env_remove("CNI_NETNS_OVERRIDE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CniError::io("run", &path, e))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin that exits without reading its stdin (VERSION) closes the pipe: not an error.
        let _ = stdin.write_all(call.stdin);
    }
    let out = child
        .wait_with_output()
        .map_err(|e| CniError::io("wait for", &path, e))?;
    let context = format!("{} {}", call.plugin, call.command);
    if out.status.success() {
        return Ok(out.stdout);
    }
    let parsed = serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| CniError::from_json(&v));
    Err(match parsed {
        Some(e) => e.context(&context),
        None => CniError::new(
            Code::IO_FAILURE,
            format!("{context}: exited with {} and no CNI error", out.status),
        )
        .details(String::from_utf8_lossy(&out.stderr).trim().to_string()),
    })
}

/// The versions a plugin speaks (its VERSION answer).
pub fn versions(
    env: &Env,
    args: &Args,
    plugin: &str,
    asking: CniVersion,
) -> Result<Vec<CniVersion>, CniError> {
    let stdin = format!("{{\"cniVersion\":\"{asking}\"}}");
    let out = exec(
        env,
        args,
        &Call {
            plugin,
            command: Command::Version,
            container_id: "",
            ifname: "",
            netns: "",
            stdin: stdin.as_bytes(),
        },
    )?;
    let v: Value = serde_json::from_slice(&out).map_err(|e| {
        CniError::new(
            Code::DECODING_FAILURE,
            format!("{plugin} VERSION: not JSON: {e}"),
        )
    })?;
    Ok(v.get("supportedVersions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str()?.parse().ok())
        .collect())
}

/// As [`exec`], and when the plugin refuses the config's version (code 1) it is asked for its
/// versions and called again with the newest both speak. So a 1.1.0 config works with Debian's
/// host-local, which stops at 1.0.0.
pub fn exec_negotiated(
    env: &Env,
    args: &Args,
    call: &Call<'_>,
    version: CniVersion,
) -> Result<Vec<u8>, CniError> {
    match exec(env, args, call) {
        Err(e) if e.code == Code::INCOMPATIBLE_VERSION => {
            let theirs = versions(env, args, call.plugin, version)?;
            let Some(common) = version.best_common(&theirs).filter(|v| *v != version) else {
                return Err(e);
            };
            let stdin = with_version(call.stdin, common);
            exec(
                env,
                args,
                &Call {
                    stdin: &stdin,
                    ..call.clone()
                },
            )
        }
        other => other,
    }
}

/// The config with `cniVersion` set to `v` and a `prevResult` rewritten in v's shape.
pub fn with_version(stdin: &[u8], v: CniVersion) -> Vec<u8> {
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(stdin) else {
        return stdin.to_vec();
    };
    let key = map
        .keys()
        .find(|k| k.eq_ignore_ascii_case("cniVersion"))
        .cloned()
        .unwrap_or_else(|| "cniVersion".into());
    map.insert(key, Value::String(v.to_string()));
    if let Some(prev) = map.get_mut("prevResult")
        && let Ok(r) = CniResult::parse(prev)
    {
        *prev = r.to_json(v);
    }
    serde_json::to_vec(&Value::Object(map)).unwrap_or_else(|_| stdin.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_version_rewrites_version_and_prev_result() {
        let out = with_version(
            br#"{"cniVersion":"1.1.0","name":"n","prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.0.0.5/24"}],"dns":{}}}"#,
            CniVersion::new(0, 2, 0),
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["cniVersion"], "0.2.0");
        assert_eq!(v["prevResult"]["ip4"]["ip"], "10.0.0.5/24");
        assert_eq!(v["name"], "n");
    }

    #[test]
    fn a_plugin_not_on_cni_path_names_type_and_path() {
        let env = Env::from_pairs([
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_NETNS", "none"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/nonexistent"),
        ]);
        let args = Args::from_env(&env).unwrap();
        let e = find("host-local", &args).unwrap_err();
        assert_eq!(e.code, Code::INVALID_NETWORK_CONFIG);
        assert!(e.msg.contains("/nonexistent"), "{}", e.msg);
    }

    #[test]
    fn a_plugin_name_with_a_separator_is_never_looked_up() {
        let env = Env::from_pairs([
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_NETNS", "none"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/usr/lib/cni"),
        ]);
        let args = Args::from_env(&env).unwrap();
        for bad in ["../bin/sh", "/bin/sh", "a\\b", "x\0y"] {
            let e = find(bad, &args).unwrap_err();
            assert_eq!(e.code, Code::INVALID_NETWORK_CONFIG);
            assert_eq!(e.msg, format!("type: invalid plugin name: {bad}"));
        }
        assert_eq!(
            find("", &args).unwrap_err().msg,
            "type: no plugin name provided"
        );
    }
}
