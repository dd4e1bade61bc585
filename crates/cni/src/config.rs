//! Reading network configurations the way the Go plugins read theirs: object keys match
//! case-insensitively (an exact match wins), `null` is as good as absent, unknown keys are
//! ignored, and every error names the field and what to write instead.

use std::path::PathBuf;
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::error::{CniError, Code};
use crate::version::CniVersion;

/// Where the plugins keep their per-pod records unless the config's `stateDir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/cni/winnet";

/// One JSON object of a config, with the path that leads to it (for error messages).
#[derive(Clone, Debug)]
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    /// The top-level object of a config.
    pub fn root(map: &'a Map<String, Value>) -> Obj<'a> {
        Obj {
            map,
            path: String::new(),
        }
    }

    /// The dotted path of `key` in the document, as error messages name it.
    pub fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value under `key`, matched exactly or else case-insensitively; `null` is none.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        let v = self.map.get(key).or_else(|| {
            self.map
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        })?;
        (!v.is_null()).then_some(v)
    }

    /// True when `key` is present (in any case) and not null.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn str(&self, key: &str) -> Result<Option<&'a str>, CniError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(wrong_type(&self.field(key), "a string", other)),
        }
    }

    /// A string, empty when absent.
    pub fn string(&self, key: &str) -> Result<String, CniError> {
        Ok(self.str(key)?.unwrap_or_default().to_string())
    }

    pub fn bool(&self, key: &str) -> Result<bool, CniError> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(wrong_type(&self.field(key), "true or false", other)),
        }
    }

    pub fn uint(&self, key: &str) -> Result<Option<u64>, CniError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
                wrong_type(
                    &self.field(key),
                    "a whole number >= 0",
                    &Value::Number(n.clone()),
                )
            }),
            Some(other) => Err(wrong_type(&self.field(key), "a number", other)),
        }
    }

    pub fn obj(&self, key: &str) -> Result<Option<Obj<'a>>, CniError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj {
                map,
                path: self.field(key),
            })),
            Some(other) => Err(wrong_type(&self.field(key), "an object", other)),
        }
    }

    /// The elements of an array, none when absent.
    pub fn array(&self, key: &str) -> Result<&'a [Value], CniError> {
        match self.get(key) {
            None => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(wrong_type(&self.field(key), "a list", other)),
        }
    }

    /// The objects of an array, each with its indexed path.
    pub fn objects(&self, key: &str) -> Result<Vec<Obj<'a>>, CniError> {
        let at = self.field(key);
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Object(map) => Ok(Obj {
                    map,
                    path: format!("{at}[{i}]"),
                }),
                other => Err(wrong_type(&format!("{at}[{i}]"), "an object", other)),
            })
            .collect()
    }

    /// A list of strings, empty when absent.
    pub fn strings(&self, key: &str) -> Result<Vec<String>, CniError> {
        let at = self.field(key);
        self.array(key)?
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(wrong_type(&format!("{at}[{i}]"), "a string", other)),
            })
            .collect()
    }

    /// A string parsed as `T`; a parse error is code 7 naming the field.
    pub fn parse<T: FromStr>(&self, key: &str) -> Result<Option<T>, CniError>
    where
        T::Err: std::fmt::Display,
    {
        match self.str(key)?.map(str::trim) {
            None | Some("") => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|e| CniError::config(&self.field(key), e)),
        }
    }

    /// The object itself.
    pub fn map(&self) -> &'a Map<String, Value> {
        self.map
    }

    /// The path of this object in the document.
    pub fn path(&self) -> &str {
        &self.path
    }
}

fn wrong_type(field: &str, want: &str, got: &Value) -> CniError {
    let kind = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    };
    CniError::decode(field, format!("must be {want}, not {kind}"))
}

/// True for names the spec allows: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`. Network names and container
/// IDs follow it, which also keeps them safe as file names.
pub fn is_valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The IPAM section of a config, when it names a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpamConf {
    /// `ipam.type`: the plugin run from `CNI_PATH` (e.g. `host-local`).
    pub plugin: String,
}

/// One entry of GC's `cni.dev/valid-attachments`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub container_id: String,
    pub ifname: String,
}

/// What every plugin of this crate reads from a config, plus the document for the rest.
#[derive(Clone, Debug)]
pub struct NetConf {
    pub cni_version: CniVersion,
    pub name: String,
    /// `type`: the plugin the runtime ran.
    pub plugin_type: String,
    pub ipam: Option<IpamConf>,
    pub prev_result: Option<Value>,
    /// GC: `cni.dev/valid-attachments` (or the spec-v1.1.0 tag's `cni.dev/attachments`).
    pub valid_attachments: Option<Vec<Attachment>>,
    /// `hnsSocket`: where hnsd listens when neither `--hns-socket` nor `HNS_SOCKET` says.
    pub hns_socket: Option<PathBuf>,
    /// `stateDir`: where per-pod records and locks live (see [`NetConf::state_dir`]).
    pub state_dir: Option<PathBuf>,
    /// stdin as the runtime sent it, for delegates.
    pub raw: Vec<u8>,
    pub doc: Map<String, Value>,
}

impl NetConf {
    /// Parses stdin: a JSON object (else code 6), a supported `cniVersion` (else code 1), a
    /// valid `name` (else code 7).
    pub fn parse(stdin: &[u8]) -> Result<NetConf, CniError> {
        let doc = parse_object(stdin)?;
        let root = Obj::root(&doc);
        let cni_version = CniVersion::of_config(root.str("cniVersion")?)?;
        let name = root.string("name")?;
        if name.is_empty() {
            return Err(CniError::config(
                "name",
                "missing network name; set \"name\" to the HNS network's name (e.g. \"cbr0\")",
            ));
        }
        if !is_valid_name(&name) {
            return Err(CniError::config(
                "name",
                format!(
                    "\"{name}\" has characters a network name may not have; use letters, digits, '_', '.' and '-', starting with a letter or digit"
                ),
            ));
        }
        let plugin_type = root.string("type")?;
        let ipam = match root.obj("ipam")? {
            None => None,
            Some(ipam) => {
                let plugin = ipam.string("type")?;
                if plugin.is_empty() {
                    None
                } else {
                    crate::invoke::check_plugin_name(&ipam.field("type"), &plugin)?;
                    Some(IpamConf { plugin })
                }
            }
        };
        let prev_result = root.get("prevResult").cloned();
        let valid_attachments = valid_attachments(&root)?;
        let hns_socket = root
            .str("hnsSocket")?
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let state_dir = root
            .str("stateDir")?
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        Ok(NetConf {
            cni_version,
            name,
            plugin_type,
            ipam,
            prev_result,
            valid_attachments,
            hns_socket,
            state_dir,
            raw: stdin.to_vec(),
            doc,
        })
    }

    /// The top-level object.
    pub fn root(&self) -> Obj<'_> {
        Obj::root(&self.doc)
    }

    /// Where records live: `WINNET_CNI_STATE_DIR`, else `stateDir`, else
    /// [`DEFAULT_STATE_DIR`] (the environment wins, as `HNS_SOCKET` does over `hnsSocket`).
    pub fn state_dir(&self, env: &crate::protocol::Env) -> PathBuf {
        if let Some(s) = env.get("WINNET_CNI_STATE_DIR") {
            return PathBuf::from(s);
        }
        self.state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
    }

    /// The socket of hnsd: `HNS_SOCKET`, else `hnsSocket`, else the default.
    pub fn hns_socket(&self, env: &crate::protocol::Env) -> PathBuf {
        if let Some(s) = env.get("HNS_SOCKET") {
            return PathBuf::from(s);
        }
        match &self.hns_socket {
            Some(p) => p.clone(),
            None => PathBuf::from(hns_client::DEFAULT_SOCKET),
        }
    }
}

/// stdin as a JSON object, or code 6.
pub fn parse_object(stdin: &[u8]) -> Result<Map<String, Value>, CniError> {
    match serde_json::from_slice::<Value>(stdin) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(CniError::new(
            Code::DECODING_FAILURE,
            "the network configuration on stdin must be a JSON object",
        )),
        Err(e) => Err(CniError::new(
            Code::DECODING_FAILURE,
            "the network configuration on stdin is not valid JSON",
        )
        .details(e.to_string())),
    }
}

fn valid_attachments(root: &Obj<'_>) -> Result<Option<Vec<Attachment>>, CniError> {
    let key = if root.has("cni.dev/valid-attachments") {
        "cni.dev/valid-attachments"
    } else if root.has("cni.dev/attachments") {
        "cni.dev/attachments"
    } else {
        return Ok(None);
    };
    root.objects(key)?
        .into_iter()
        .map(|a| {
            Ok(Attachment {
                container_id: a.string("containerID")?,
                ifname: a.string("ifname")?,
            })
        })
        .collect::<Result<Vec<_>, CniError>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(s: &str) -> Result<NetConf, CniError> {
        NetConf::parse(s.as_bytes())
    }

    #[test]
    fn keys_match_case_insensitively_exact_first() {
        let c = conf(r#"{"cniVersion":"0.2.0","Name":"cbr0","TYPE":"win-bridge","IPAM":{"Type":"host-local"}}"#)
            .unwrap();
        assert_eq!(c.name, "cbr0");
        assert_eq!(c.plugin_type, "win-bridge");
        assert_eq!(c.ipam.unwrap().plugin, "host-local");
        let doc = parse_object(br#"{"Name":"a","name":"b"}"#).unwrap();
        assert_eq!(Obj::root(&doc).str("name").unwrap(), Some("b"));
    }

    #[test]
    fn missing_name_is_code_7_naming_it() {
        let e = conf(r#"{"cniVersion":"1.0.0","type":"win-bridge"}"#).unwrap_err();
        assert_eq!(e.code, Code::INVALID_NETWORK_CONFIG);
        assert!(e.msg.starts_with("name:"), "{}", e.msg);
        let e = conf(r#"{"cniVersion":"1.0.0","name":"../etc"}"#).unwrap_err();
        assert_eq!(e.code, Code::INVALID_NETWORK_CONFIG);
    }

    #[test]
    fn bad_json_and_wrong_types_are_code_6() {
        assert_eq!(conf("{").unwrap_err().code, Code::DECODING_FAILURE);
        assert_eq!(conf("[1]").unwrap_err().code, Code::DECODING_FAILURE);
        let e = conf(r#"{"name":5}"#).unwrap_err();
        assert_eq!(e.code, Code::DECODING_FAILURE);
        assert!(e.msg.contains("name"), "{}", e.msg);
        let e = conf(r#"{"name":"n","ipam":{"type":["host-local"]}}"#).unwrap_err();
        assert!(e.msg.starts_with("ipam.type"), "{}", e.msg);
    }

    #[test]
    fn ipam_type_may_not_be_a_path() {
        let e = conf(r#"{"name":"n","ipam":{"type":"../../bin/sh"}}"#).unwrap_err();
        assert_eq!(e.code, Code::INVALID_NETWORK_CONFIG);
        assert!(conf(r#"{"name":"n","ipam":{}}"#).unwrap().ipam.is_none());
    }

    #[test]
    fn valid_attachments_are_read() {
        let c = conf(r#"{"cniVersion":"1.1.0","name":"n","cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}"#).unwrap();
        assert_eq!(
            c.valid_attachments,
            Some(vec![Attachment {
                container_id: "a".into(),
                ifname: "eth0".into()
            }])
        );
    }
}
