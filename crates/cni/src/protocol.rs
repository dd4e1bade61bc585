//! The CNI protocol (spec 1.1): the `CNI_*` environment, the verbs, what goes to stdout and the
//! exit code. Plugins see a parsed [`Request`] and answer with a result or a [`CniError`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::config::{NetConf, is_valid_name, parse_object};
use crate::error::{CniError, Code};
use crate::result::CniResult;
use crate::version::{CniVersion, SUPPORTED};

/// The environment the runtime ran the plugin with (a snapshot, so tests can give their own).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    /// This process's environment; names or values that are not UTF-8 are skipped.
    pub fn from_process() -> Env {
        let vars = std::env::vars_os()
            .filter_map(|(k, v): (OsString, OsString)| {
                Some((k.into_string().ok()?, v.into_string().ok()?))
            })
            .collect();
        Env { vars }
    }

    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Env {
        Env {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// A variable's value; empty counts as unset, as skel reads them.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Every variable, for a delegate's environment.
    pub fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }
}

/// `CNI_COMMAND`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Status => "STATUS",
            Command::Gc => "GC",
            Command::Version => "VERSION",
        }
    }

    /// The variables the spec (and skel) require for this verb.
    fn required(self) -> &'static [&'static str] {
        match self {
            Command::Add | Command::Check => {
                &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]
            }
            Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
            Command::Gc => &["CNI_PATH"],
            Command::Status | Command::Version => &[],
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `CNI_*` variables of one call, checked for the verb.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    pub command: Command,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    /// `CNI_ARGS`: `K=V;K=V`.
    pub args: String,
    /// `CNI_PATH`: directories separated by `:`.
    pub path: String,
}

impl Args {
    /// Reads and checks the variables: missing ones are code 4 and all named at once.
    pub fn from_env(env: &Env) -> Result<Args, CniError> {
        let raw = env.get("CNI_COMMAND").ok_or_else(|| {
            CniError::new(
                Code::INVALID_ENVIRONMENT,
                "required env variables [CNI_COMMAND] missing",
            )
        })?;
        let command = Command::parse(raw).ok_or_else(|| {
            CniError::new(
                Code::INVALID_ENVIRONMENT,
                format!("CNI_COMMAND: unknown command \"{raw}\"; use ADD, DEL, CHECK, STATUS, GC or VERSION"),
            )
        })?;
        let missing: Vec<&str> = command
            .required()
            .iter()
            .copied()
            .filter(|k| env.get(k).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(CniError::new(
                Code::INVALID_ENVIRONMENT,
                format!("required env variables [{}] missing", missing.join(",")),
            ));
        }
        let var = |k: &str| env.get(k).unwrap_or_default().to_string();
        let args = Args {
            command,
            container_id: var("CNI_CONTAINERID"),
            netns: env
                .get("CNI_NETNS_OVERRIDE")
                .map_or_else(|| var("CNI_NETNS"), String::from),
            ifname: var("CNI_IFNAME"),
            args: var("CNI_ARGS"),
            path: var("CNI_PATH"),
        };
        if matches!(command, Command::Add | Command::Del | Command::Check) {
            if !is_valid_name(&args.container_id) {
                return Err(CniError::new(
                    Code::INVALID_ENVIRONMENT,
                    "CNI_CONTAINERID: invalid characters; a container ID is letters, digits, '_', '.' and '-', starting with a letter or digit",
                )
                .details(args.container_id.clone()));
            }
            check_ifname(&args.ifname)?;
        }
        Ok(args)
    }

    /// The directories of `CNI_PATH`.
    pub fn cni_path(&self) -> Vec<PathBuf> {
        self.path
            .split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect()
    }

    /// One key of `CNI_ARGS` (e.g. `K8S_POD_NAMESPACE`).
    pub fn cni_arg(&self, key: &str) -> Option<&str> {
        self.args
            .split(';')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim())
    }
}

/// skel's interface-name rules: 1-15 bytes, not `.`/`..`, no `/`, `:` or whitespace.
fn check_ifname(name: &str) -> Result<(), CniError> {
    let bad = |why: &str| {
        Err(
            CniError::new(Code::INVALID_ENVIRONMENT, format!("CNI_IFNAME: {why}"))
                .details(name.to_string()),
        )
    };
    if name.len() > 15 {
        return bad("interface name is too long; at most 15 characters");
    }
    if name == "." || name == ".." {
        return bad("interface name is . or ..");
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return bad("interface name contains / or : or whitespace characters");
    }
    Ok(())
}

/// One call as a plugin sees it.
pub struct Request<'a> {
    pub env: &'a Env,
    pub args: &'a Args,
    pub conf: NetConf,
    /// The hnsd the plugin talks to: the socket its config and environment name, or the
    /// in-process hnsd a caller gave [`run_with_hns`].
    pub hns: hns_client::Client,
}

/// A plugin: what each verb does. Version checks, stdout and exit codes are [`run`]'s.
pub trait Plugin {
    /// The name the plugin is installed under (`win-bridge`, ...).
    fn name(&self) -> &'static str;
    fn add(&self, req: &Request<'_>) -> Result<CniResult, CniError>;
    fn del(&self, req: &Request<'_>) -> Result<(), CniError>;
    fn check(&self, req: &Request<'_>) -> Result<(), CniError>;
    fn status(&self, req: &Request<'_>) -> Result<(), CniError>;
    fn gc(&self, req: &Request<'_>) -> Result<(), CniError>;
}

/// What a run prints on stdout and how the process exits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub exit_code: i32,
}

impl Output {
    fn ok(v: Option<Value>) -> Output {
        let stdout = v.map(|v| format!("{v}\n").into_bytes()).unwrap_or_default();
        Output {
            stdout,
            exit_code: 0,
        }
    }

    fn err(e: &CniError, version: Option<&str>) -> Output {
        Output {
            stdout: format!("{}\n", e.to_json(version)).into_bytes(),
            exit_code: 1,
        }
    }
}

/// Runs one CNI call: checks the environment and the config's version, calls the plugin and
/// prints its answer in the config's version. Never panics on any input.
pub fn run(plugin: &dyn Plugin, env: &Env, stdin: &[u8]) -> Output {
    run_on(plugin, env, stdin, None)
}

/// [`run`] with the plugin talking to `hns` (e.g. an hnsd in this process) instead of the
/// socket its config names. Call it off any async runtime: a plugin runs its own.
pub fn run_with_hns(
    plugin: &dyn Plugin,
    env: &Env,
    stdin: &[u8],
    hns: hns_client::Client,
) -> Output {
    run_on(plugin, env, stdin, Some(hns))
}

fn run_on(plugin: &dyn Plugin, env: &Env, stdin: &[u8], hns: Option<hns_client::Client>) -> Output {
    let args = match Args::from_env(env) {
        Ok(a) => a,
        Err(e) => return Output::err(&e, None),
    };
    if args.command == Command::Version {
        return Output::ok(Some(version_answer(stdin)));
    }
    let conf = match parse_for(args.command, stdin) {
        Ok(c) => c,
        Err((e, version)) => return Output::err(&e, version.as_deref()),
    };
    let version = conf.cni_version;
    let hns = hns.unwrap_or_else(|| hns_client::Client::new(conf.hns_socket(env)));
    let req = Request {
        env,
        args: &args,
        conf,
        hns,
    };
    let answer = match args.command {
        Command::Add => plugin.add(&req).map(|r| Some(r.to_json(version))),
        Command::Del => plugin.del(&req).map(|()| None),
        Command::Check => plugin.check(&req).map(|()| None),
        Command::Status => plugin.status(&req).map(|()| None),
        Command::Gc => plugin.gc(&req).map(|()| None),
        Command::Version => Ok(Some(version_answer(stdin))),
    };
    match answer {
        Ok(v) => Output::ok(v),
        Err(e) => Output::err(&e, Some(&version.to_string())),
    }
}

/// Parses the config and checks that its version allows the verb. On error, also gives the
/// version to print the error in, when it could be read.
fn parse_for(command: Command, stdin: &[u8]) -> Result<NetConf, (CniError, Option<String>)> {
    // The version is checked first, as skel does, so an old config gets code 1 and not a
    // complaint about a field it never had.
    let given = parse_object(stdin).ok().and_then(|m| {
        m.get("cniVersion")
            .and_then(Value::as_str)
            .map(String::from)
    });
    let conf = NetConf::parse(stdin).map_err(|e| (e, given.clone()))?;
    let v = conf.cni_version;
    let refuse = |what: &str| {
        Err((
            CniError::new(
                Code::INCOMPATIBLE_VERSION,
                format!(
                    "config version does not allow {what}; set cniVersion to {} or later",
                    match what {
                        "CHECK" => "0.4.0",
                        _ => "1.1.0",
                    }
                ),
            )
            .details(format!("config is \"{v}\"")),
            Some(v.to_string()),
        ))
    };
    match command {
        Command::Check if !v.allows_check() => refuse("CHECK"),
        Command::Status | Command::Gc if !v.allows_status_and_gc() => refuse(command.as_str()),
        _ => Ok(conf),
    }
}

/// VERSION: the versions this plugin speaks, reported in the asker's version when it is one.
fn version_answer(stdin: &[u8]) -> Value {
    let asked = parse_object(stdin)
        .ok()
        .and_then(|m| {
            m.get("cniVersion")
                .and_then(Value::as_str)
                .map(String::from)
        })
        .and_then(|s| s.parse::<CniVersion>().ok())
        .filter(|v| v.is_supported() && *v >= CniVersion::new(0, 3, 0));
    let list: Vec<String> = SUPPORTED.iter().map(|v| v.to_string()).collect();
    json!({
        "cniVersion": asked.unwrap_or(CniVersion::CURRENT).to_string(),
        "supportedVersions": list,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;
    impl Plugin for Nothing {
        fn name(&self) -> &'static str {
            "nothing"
        }
        fn add(&self, _: &Request<'_>) -> Result<CniResult, CniError> {
            Ok(CniResult::default())
        }
        fn del(&self, _: &Request<'_>) -> Result<(), CniError> {
            Ok(())
        }
        fn check(&self, _: &Request<'_>) -> Result<(), CniError> {
            Ok(())
        }
        fn status(&self, _: &Request<'_>) -> Result<(), CniError> {
            Ok(())
        }
        fn gc(&self, _: &Request<'_>) -> Result<(), CniError> {
            Ok(())
        }
    }

    fn env(cmd: &str) -> Env {
        Env::from_pairs([
            ("CNI_COMMAND", cmd),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/usr/lib/cni"),
        ])
    }

    fn out(o: &Output) -> Value {
        serde_json::from_slice(&o.stdout).unwrap()
    }

    #[test]
    fn missing_variables_are_code_4_and_all_named() {
        let o = run(&Nothing, &Env::from_pairs([("CNI_COMMAND", "ADD")]), b"{}");
        assert_eq!(o.exit_code, 1);
        assert_eq!(
            out(&o),
            json!({"code": 4, "msg": "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"})
        );
        let o = run(&Nothing, &Env::default(), b"");
        assert_eq!(out(&o)["code"], 4);
    }

    #[test]
    fn bad_container_id_and_ifname_are_code_4() {
        let mut e = env("ADD");
        e.vars.insert("CNI_CONTAINERID".into(), "a/b".into());
        assert_eq!(out(&run(&Nothing, &e, br#"{"name":"n"}"#))["code"], 4);
        let mut e = env("DEL");
        e.vars
            .insert("CNI_IFNAME".into(), "a-very-long-interface".into());
        let o = out(&run(&Nothing, &e, br#"{"name":"n"}"#));
        assert_eq!(o["code"], 4);
        assert!(o["msg"].as_str().unwrap().starts_with("CNI_IFNAME"));
    }

    #[test]
    fn version_lists_everything_from_0_1_0_to_1_1_0() {
        let o = run(
            &Nothing,
            &Env::from_pairs([("CNI_COMMAND", "VERSION")]),
            b"",
        );
        assert_eq!(
            out(&o),
            json!({"cniVersion": "1.1.0", "supportedVersions": ["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]})
        );
        let o = run(
            &Nothing,
            &Env::from_pairs([("CNI_COMMAND", "VERSION")]),
            br#"{"cniVersion":"1.0.0"}"#,
        );
        assert_eq!(out(&o)["cniVersion"], "1.0.0");
    }

    #[test]
    fn check_needs_0_4_0_and_status_gc_need_1_1_0() {
        let o = out(&run(
            &Nothing,
            &env("CHECK"),
            br#"{"cniVersion":"0.3.1","name":"n"}"#,
        ));
        assert_eq!(o["code"], 1);
        assert_eq!(o["cniVersion"], "0.3.1");
        let o = out(&run(
            &Nothing,
            &env("STATUS"),
            br#"{"cniVersion":"1.0.0","name":"n"}"#,
        ));
        assert_eq!(o["code"], 1);
        let o = run(
            &Nothing,
            &env("GC"),
            br#"{"cniVersion":"1.1.0","name":"n"}"#,
        );
        assert_eq!(o.exit_code, 0);
        assert!(o.stdout.is_empty());
    }

    #[test]
    fn results_are_printed_in_the_config_version() {
        let o = out(&run(
            &Nothing,
            &env("ADD"),
            br#"{"cniVersion":"0.2.0","name":"n"}"#,
        ));
        assert_eq!(o, json!({"cniVersion": "0.2.0", "dns": {}}));
    }

    #[test]
    fn unsupported_version_is_code_1() {
        let o = out(&run(
            &Nothing,
            &env("ADD"),
            br#"{"cniVersion":"9.9.9","name":"n"}"#,
        ));
        assert_eq!(o["code"], 1);
        assert_eq!(o["cniVersion"], "9.9.9");
    }

    #[test]
    fn cni_args_are_split() {
        let mut e = env("ADD");
        e.vars.insert(
            "CNI_ARGS".into(),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web".into(),
        );
        let a = Args::from_env(&e).unwrap();
        assert_eq!(a.cni_arg("K8S_POD_NAMESPACE"), Some("default"));
        assert_eq!(a.cni_arg("nope"), None);
    }
}
