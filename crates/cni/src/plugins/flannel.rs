//! The flannel meta plugin, Windows code path (flannel-io/cni-plugin `flannel_windows.go`):
//! reads flanneld's `subnet.env`, builds the delegate config (win-bridge by default, or
//! win-overlay / sdnoverlay), saves it per sandbox and runs the delegate from `CNI_PATH`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::config::{NetConf, Obj};
use crate::error::{CniError, Code};
use crate::invoke::{self, Call};
use crate::netns::NetNs;
use crate::protocol::{Command, Plugin, Request};
use crate::result::CniResult;
use crate::subnet_env::SubnetEnv;

/// Where flanneld writes `subnet.env` unless `subnetFile` says otherwise.
pub const DEFAULT_SUBNET_FILE: &str = "/run/flannel/subnet.env";
/// Where the delegate configs are saved unless `dataDir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/flannel";

/// The flannel plugin.
pub struct Flannel;

/// The field that names the delegate plugin.
const DELEGATE_TYPE: &str = "delegate.type";

/// A flannel config.
#[derive(Clone, Debug)]
pub struct FlannelConf {
    pub conf: NetConf,
    pub subnet_file: PathBuf,
    pub data_dir: PathBuf,
    /// `delegate`, as written (keys kept as given).
    pub delegate: Map<String, Value>,
}

impl FlannelConf {
    pub fn parse(conf: &NetConf) -> Result<FlannelConf, CniError> {
        let root = conf.root();
        let path = |key: &str, default: &str| -> Result<PathBuf, CniError> {
            Ok(PathBuf::from(
                root.str(key)?.filter(|s| !s.is_empty()).unwrap_or(default),
            ))
        };
        let delegate = root
            .obj("delegate")?
            .map(|d| d.map().clone())
            .unwrap_or_default();
        let d = Obj::root(&delegate);
        match d.get("type") {
            Some(Value::String(t)) => invoke::check_plugin_name(DELEGATE_TYPE, t)?,
            Some(_) => {
                return Err(CniError::config(
                    DELEGATE_TYPE,
                    "must be a string, e.g. \"win-bridge\"",
                ));
            }
            None => {}
        }
        for key in ["name", "ipam"] {
            if d.has(key) {
                return Err(CniError::config(
                    &format!("delegate.{key}"),
                    "remove it: it'll be set by flannel (name from the top-level name, ipam host-local on FLANNEL_SUBNET)".to_string(),
                ));
            }
        }
        Ok(FlannelConf {
            subnet_file: path("subnetFile", DEFAULT_SUBNET_FILE)?,
            data_dir: path("dataDir", DEFAULT_DATA_DIR)?,
            delegate,
            conf: conf.clone(),
        })
    }

    /// The delegate config for this node's lease (reference §3.1 steps 2-6), keys sorted as Go
    /// marshals a map.
    pub fn delegate_conf(&self, env: &SubnetEnv) -> Result<Map<String, Value>, CniError> {
        let root = self.conf.root();
        let mut d = self.delegate.clone();
        if let Some(rc) = root.get("runtimeConfig") {
            d.insert("runtimeConfig".into(), rc.clone());
        }
        d.insert("name".into(), json!(self.conf.name));
        if !Obj::root(&d).has("type") {
            d.insert("type".into(), json!("win-bridge"));
        }
        // Not inverted: on Windows the CNI, not flanneld, masquerades.
        d.insert("ipMasq".into(), json!(env.ipmasq));
        if let Some(net) = env.networks.first().or(env.ipv6_networks.first()) {
            d.insert("ipMasqNetwork".into(), json!(net.to_string()));
        }
        let version = root
            .str("cniVersion")?
            .filter(|v| !v.is_empty())
            .unwrap_or("0.2.0");
        d.insert("cniVersion".into(), json!(version));
        let subnet = env.subnet.or(env.ipv6_subnet).ok_or_else(|| {
            CniError::new(
                Code::INVALID_NETWORK_CONFIG,
                "subnet.env has no FLANNEL_SUBNET",
            )
        })?;
        d.insert(
            "ipam".into(),
            json!({"type": "host-local", "subnet": subnet.to_string()}),
        );
        // Our own keys reach the delegate when only the flannel level names them.
        for key in ["hnsSocket", "stateDir"] {
            if let (Some(v), false) = (root.get(key), Obj::root(&d).has(key)) {
                d.insert(key.into(), v.clone());
            }
        }
        let mut sorted: Vec<(String, Value)> = d.into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(sorted.into_iter().collect())
    }

    fn saved_path(&self, sandbox: &str) -> PathBuf {
        self.data_dir.join(sandbox)
    }
}

/// The sandbox of a call, as `hns.GetSandboxContainerID`.
fn sandbox(req: &Request<'_>) -> String {
    NetNs::parse(&req.args.netns)
        .unwrap_or(NetNs::Empty)
        .sandbox(&req.args.container_id)
        .to_string()
}

/// The delegate's `type`, checked again: a saved config is a file on the node, not this call's.
fn delegate_type(conf: &Map<String, Value>) -> Result<String, CniError> {
    let t = Obj::root(conf)
        .str("type")
        .map_err(|e| CniError::new(e.code, format!("delegate.{}", e.msg)))?
        .ok_or_else(|| CniError::config(DELEGATE_TYPE, "missing in the saved delegate config"))?;
    invoke::check_plugin_name(DELEGATE_TYPE, t)?;
    Ok(t.to_string())
}

fn run_delegate(
    req: &Request<'_>,
    command: Command,
    conf: &[u8],
    plugin: &str,
) -> Result<Vec<u8>, CniError> {
    let call = Call {
        plugin,
        command,
        container_id: &req.args.container_id,
        ifname: &req.args.ifname,
        netns: &req.args.netns,
        stdin: conf,
    };
    invoke::exec(req.env, req.args, &call).map_err(|e| e.context("delegate"))
}

fn save(path: &std::path::Path, bytes: &[u8]) -> Result<(), CniError> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| CniError::io("create", dir, e))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| CniError::io("write", path, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_data())
        .map_err(|e| CniError::io("write", path, e))
}

fn load_saved(path: &std::path::Path) -> Result<Option<Map<String, Value>>, CniError> {
    match std::fs::read(path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(Value::Object(m)) => Ok(Some(m)),
            _ => Err(CniError::new(
                Code::DECODING_FAILURE,
                format!(
                    "the saved delegate config {} is not a JSON object; remove it",
                    path.display()
                ),
            )),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CniError::io("read", path, e)),
    }
}

/// After a failed delegate ADD of a new pod: the delegate's DEL (which a runtime would run
/// next, through the saved config) and then the saved config go, so the failed ADD leaves
/// nothing behind. When that DEL fails the config stays, for the runtime's DEL to retry.
fn forget(req: &Request<'_>, path: &std::path::Path, conf: &[u8], plugin: &str) {
    match run_delegate(req, Command::Del, conf, plugin) {
        Ok(_) => {
            if let Err(e) = std::fs::remove_file(path) {
                eprintln!(
                    "cannot remove the saved delegate config {}: {e}",
                    path.display()
                );
            }
        }
        Err(e) => eprintln!(
            "keeping the saved delegate config {} for DEL: the delegate's DEL failed: {e}",
            path.display()
        ),
    }
}

fn to_bytes(m: &Map<String, Value>) -> Result<Vec<u8>, CniError> {
    serde_json::to_vec(m).map_err(|e| CniError::internal(e.to_string()))
}

impl Plugin for Flannel {
    fn name(&self) -> &'static str {
        "flannel"
    }

    fn add(&self, req: &Request<'_>) -> Result<CniResult, CniError> {
        let fc = FlannelConf::parse(&req.conf)?;
        let env = SubnetEnv::load(&fc.subnet_file)?;
        let d = fc.delegate_conf(&env)?;
        let bytes = to_bytes(&d)?;
        eprintln!(
            "delegateAdd: netconf sent to delegate plugin: {}",
            String::from_utf8_lossy(&bytes)
        );
        let plugin = delegate_type(&d)?;
        // Nothing is saved for a delegate that is not there.
        invoke::find(&plugin, req.args).map_err(|e| e.context("delegate"))?;
        let path = fc.saved_path(&sandbox(req));
        let earlier = path.symlink_metadata().is_ok();
        save(&path, &bytes)?;
        let added = run_delegate(req, Command::Add, &bytes, &plugin).and_then(|out| {
            let v: Value = serde_json::from_slice(&out).map_err(|e| {
                CniError::new(
                    Code::DECODING_FAILURE,
                    format!("delegate printed a result that is not JSON: {e}"),
                )
            })?;
            CniResult::parse(&v)
                .map_err(|e| CniError::new(Code::DECODING_FAILURE, format!("delegate result: {e}")))
        });
        if added.is_err() && !earlier {
            forget(req, &path, &bytes, &plugin);
        }
        added
    }

    fn del(&self, req: &Request<'_>) -> Result<(), CniError> {
        let fc = FlannelConf::parse(&req.conf)?;
        let sandbox = sandbox(req);
        let path = fc.saved_path(&sandbox);
        // "Per spec should ignore error if resources are missing".
        let Some(saved) = load_saved(&path)? else {
            return Ok(());
        };
        run_delegate(
            req,
            Command::Del,
            &to_bytes(&saved)?,
            &delegate_type(&saved)?,
        )?;
        // A workload container leaving keeps the pod's saved config for the pod's own DEL
        // (upstream removes it on the first DEL of any container of the pod).
        if sandbox == req.args.container_id {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(CniError::io("remove", &path, e)),
            }
        }
        Ok(())
    }

    fn check(&self, req: &Request<'_>) -> Result<(), CniError> {
        let fc = FlannelConf::parse(&req.conf)?;
        let path = fc.saved_path(&sandbox(req));
        let Some(mut saved) = load_saved(&path)? else {
            return Err(CniError::new(
                Code::CHECK_FAILED,
                format!(
                    "no saved delegate config at {}: ADD did not run for this pod, or DEL did",
                    path.display()
                ),
            ));
        };
        if let Some(prev) = &req.conf.prev_result {
            saved.insert("prevResult".into(), prev.clone());
        }
        run_delegate(
            req,
            Command::Check,
            &to_bytes(&saved)?,
            &delegate_type(&saved)?,
        )
        .map(drop)
    }

    fn status(&self, req: &Request<'_>) -> Result<(), CniError> {
        let fc = FlannelConf::parse(&req.conf)?;
        let env = SubnetEnv::load(&fc.subnet_file)
            .map_err(|e| CniError::new(Code::NOT_AVAILABLE, e.msg))?;
        let d = fc.delegate_conf(&env)?;
        run_delegate(req, Command::Status, &to_bytes(&d)?, &delegate_type(&d)?).map(drop)
    }

    fn gc(&self, req: &Request<'_>) -> Result<(), CniError> {
        let fc = FlannelConf::parse(&req.conf)?;
        let valid = req.conf.valid_attachments.clone().unwrap_or_default();
        let mut errors = Vec::new();
        match SubnetEnv::load(&fc.subnet_file) {
            Ok(env) => {
                let mut d = fc.delegate_conf(&env)?;
                if let Some(list) = req.conf.root().get("cni.dev/valid-attachments") {
                    d.insert("cni.dev/valid-attachments".into(), list.clone());
                }
                if let Err(e) = run_delegate(req, Command::Gc, &to_bytes(&d)?, &delegate_type(&d)?)
                {
                    errors.push(e);
                }
            }
            Err(e) => errors.push(e),
        }
        // Saved configs of pods that are gone.
        if let Ok(entries) = std::fs::read_dir(&fc.data_dir) {
            for name in entries.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
                if crate::config::is_valid_name(&name)
                    && !valid.iter().any(|a| a.container_id == name)
                {
                    let _ = std::fs::remove_file(fc.data_dir.join(&name));
                }
            }
        }
        match errors.into_iter().next() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// microsoft/SDN Kubernetes/flannel/l2bridge/cni/config/cni.conf (reference §3.4).
    pub const SDN_L2BRIDGE: &str = include_str!("../../tests/configs/sdn-l2bridge-cni.conf");

    #[test]
    fn the_sdn_l2bridge_conf_builds_the_documented_delegate() {
        let conf = NetConf::parse(SDN_L2BRIDGE.as_bytes()).unwrap();
        let fc = FlannelConf::parse(&conf).unwrap();
        let env = SubnetEnv::parse("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n").unwrap();
        let d = Value::Object(fc.delegate_conf(&env).unwrap());
        let keys: Vec<&String> = d.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "cniVersion",
                "dns",
                "ipMasq",
                "ipMasqNetwork",
                "ipam",
                "name",
                "policies",
                "type"
            ]
        );
        assert_eq!(d["cniVersion"], "0.2.0");
        assert_eq!(d["ipMasq"], true);
        assert_eq!(d["ipMasqNetwork"], "10.244.0.0/16");
        assert_eq!(
            d["ipam"],
            json!({"type": "host-local", "subnet": "10.244.1.0/24"})
        );
        assert_eq!(d["name"], "cbr0");
        assert_eq!(d["type"], "win-bridge");
        assert_eq!(d["dns"]["Nameservers"], json!(["10.96.0.10"]));
    }

    #[test]
    fn a_delegate_may_not_name_itself_or_its_ipam() {
        for bad in [
            r#"{"name":"x","type":"flannel","delegate":{"name":"y"}}"#,
            r#"{"name":"x","delegate":{"IPAM":{}}}"#,
            r#"{"name":"x","delegate":{"type":5}}"#,
        ] {
            let conf = NetConf::parse(bad.as_bytes()).unwrap();
            let e = FlannelConf::parse(&conf).unwrap_err();
            assert_eq!(e.code, Code::INVALID_NETWORK_CONFIG, "{bad}");
            assert!(e.msg.starts_with("delegate."), "{}", e.msg);
        }
    }

    #[test]
    fn runtime_config_and_version_reach_the_delegate() {
        let conf = NetConf::parse(br#"{"cniVersion":"1.1.0","name":"flannel.4096","type":"flannel","runtimeConfig":{"portMappings":[]},"delegate":{"type":"sdnoverlay"}}"#).unwrap();
        let fc = FlannelConf::parse(&conf).unwrap();
        let env = SubnetEnv::parse("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=false\n").unwrap();
        let d = fc.delegate_conf(&env).unwrap();
        assert_eq!(d["cniVersion"], "1.1.0");
        assert_eq!(d["type"], "sdnoverlay");
        assert_eq!(d["runtimeConfig"], json!({"portMappings": []}));
        assert_eq!(d["ipMasq"], false);
    }
}
