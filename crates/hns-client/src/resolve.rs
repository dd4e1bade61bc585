//! The request of `POST /resolve` (what a pod's resolver does with a name, step by step: the DNS
//! counterpart of `/trace`), read and written here so that hnsd and its clients agree on it.

use dnsclient::AskedName;
use hcn::error::HnsError;
use hickory_proto::rr::RecordType;
use serde_json::{Value, json};

use crate::request::invalid;

/// The record types a walk can be asked for.
const TYPES: [RecordType; 6] = [
    RecordType::A,
    RecordType::AAAA,
    RecordType::SRV,
    RecordType::PTR,
    RecordType::TXT,
    RecordType::CNAME,
];

/// A name to resolve as a pod would.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveRequest {
    /// The pod's endpoint: a name or an ID.
    pub endpoint: String,
    pub name: AskedName,
    pub qtype: RecordType,
}

impl ResolveRequest {
    /// A request from its fields as a user writes them; an error names the field.
    pub fn new(endpoint: &str, name: &str, qtype: &str) -> Result<ResolveRequest, HnsError> {
        let endpoint = endpoint.trim();
        if endpoint.is_empty() {
            return Err(invalid(
                "Endpoint",
                "is empty; give the pod's endpoint name or ID",
            ));
        }
        let name = AskedName::parse(name.trim()).map_err(|e| invalid("Name", &e.to_string()))?;
        let qtype = TYPES
            .into_iter()
            .find(|t| t.to_string().eq_ignore_ascii_case(qtype.trim()))
            .ok_or_else(|| {
                invalid(
                    "Type",
                    &format!("\"{qtype}\" is not a type a walk asks for; use A, AAAA, SRV, PTR, TXT or CNAME"),
                )
            })?;
        Ok(ResolveRequest {
            endpoint: endpoint.to_string(),
            name,
            qtype,
        })
    }

    /// Reads `{"Endpoint": ..., "Name": ..., "Type": ...}` (keys in any case, `Type` A when
    /// absent).
    pub fn from_json(body: &[u8]) -> Result<ResolveRequest, HnsError> {
        let [endpoint, name, qtype] =
            crate::request::string_fields(body, "resolve request", ["Endpoint", "Name", "Type"])?;
        let endpoint = endpoint
            .ok_or_else(|| invalid("Endpoint", "is missing; give the pod's endpoint name or ID"))?;
        let name = name.ok_or_else(|| invalid("Name", "is missing; give the name to resolve"))?;
        ResolveRequest::new(&endpoint, &name, qtype.as_deref().unwrap_or("A"))
    }

    /// The body of `POST /resolve` for this request.
    pub fn to_json(&self) -> Value {
        json!({
            "Endpoint": self.endpoint,
            "Name": self.name.to_string(),
            "Type": self.qtype.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_request_reads_in_any_case_and_defaults_to_a() {
        let r = ResolveRequest::from_json(br#"{"endpoint":"pa","NAME":"web"}"#).expect("request");
        assert_eq!((r.endpoint.as_str(), r.qtype), ("pa", RecordType::A));
        let back = ResolveRequest::from_json(r.to_json().to_string().as_bytes()).expect("again");
        assert_eq!(back, r);
    }

    #[test]
    fn bad_requests_name_the_field() {
        for (body, field) in [
            (r#"{"Name":"web"}"#, "Endpoint"),
            (r#"{"Endpoint":"pa"}"#, "Name"),
            (r#"{"Endpoint":"pa","Name":"a..b"}"#, "Name"),
            (r#"{"Endpoint":"pa","Name":"web","Type":"ANY"}"#, "Type"),
            (r#"{"Endpoint":"pa","Name":"web","Port":"53"}"#, "Port"),
            (r#"{"Endpoint":1,"Name":"web"}"#, "Endpoint"),
        ] {
            let e = ResolveRequest::from_json(body.as_bytes()).expect_err(body);
            assert!(e.detail.starts_with(field), "{body}: {}", e.detail);
        }
        assert!(ResolveRequest::from_json(b"[]").is_err());
        assert!(ResolveRequest::from_json(b"{").is_err());
    }

    proptest! {
        #[test]
        fn any_body_reads_or_errs_without_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ResolveRequest::from_json(&body);
        }

        #[test]
        fn any_fields_read_or_err_without_panic(e in "\\PC{0,20}", n in "\\PC{0,80}", t in "\\PC{0,6}") {
            let body = json!({"Endpoint": e, "Name": n, "Type": t}).to_string();
            let _ = ResolveRequest::from_json(body.as_bytes());
        }
    }
}
