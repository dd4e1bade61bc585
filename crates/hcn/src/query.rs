//! HostComputeQuery: the document of enumerate calls, with its `Filter` (a JSON string).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::serde_util::is_default;
use crate::types::SchemaVersion;

/// A query. `Filter` is a JSON object *as a string*, e.g. `{"Name":"cbr0"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Query {
    pub schema_version: SchemaVersion,
    /// 0 none, 1 detailed.
    #[serde(skip_serializing_if = "is_default")]
    pub flags: u32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub filter: String,
}

/// A parsed filter: every key must match the object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter(Map<String, Value>);

impl Filter {
    /// Parses a filter string. The v1 key `VirtualNetwork` (hcsshim's `ListEndpointsOfNetwork`)
    /// means the endpoint's `HostComputeNetwork`.
    pub fn parse(filter: &str) -> Result<Filter, String> {
        if filter.trim().is_empty() {
            return Ok(Filter::default());
        }
        let value: Value = serde_json::from_str(filter).map_err(|e| {
            format!("Filter is not a JSON object string ({e}); write e.g. {{\"Name\":\"cbr0\"}}")
        })?;
        let Value::Object(map) = crate::keys::normalise(value) else {
            return Err("Filter must be a JSON object, e.g. {\"Name\":\"cbr0\"}".into());
        };
        let map = map
            .into_iter()
            .map(|(k, v)| match k.as_str() {
                "VirtualNetwork" => ("HostComputeNetwork".to_string(), v),
                _ => (k, v),
            })
            .collect();
        Ok(Filter(map))
    }

    /// True when every filter key equals the object's value (strings case-insensitively, as
    /// GUIDs are).
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(k, want)| {
            let have = object.get(k).unwrap_or(&Value::Null);
            match (want, have) {
                (Value::String(a), Value::String(b)) => a.eq_ignore_ascii_case(b),
                (Value::String(a), Value::Null) => a.is_empty(),
                (a, b) => a == b,
            }
        })
    }

    /// True when the filter has no keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn filter_matches_case_insensitively() {
        let f = Filter::parse(r#"{"name":"CBR0"}"#).unwrap();
        assert!(f.matches(&json!({"Name": "cbr0", "ID": "x"})));
        assert!(!f.matches(&json!({"Name": "vxlan0"})));
    }

    #[test]
    fn v1_virtual_network_key_is_host_compute_network() {
        let f = Filter::parse(r#"{"VirtualNetwork":"abc"}"#).unwrap();
        assert!(f.matches(&json!({"HostComputeNetwork": "ABC"})));
    }

    #[test]
    fn bad_filter_says_how_to_write_one() {
        let e = Filter::parse("{name:").unwrap_err();
        assert!(e.contains("Filter"), "{e}");
    }
}
