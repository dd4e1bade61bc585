//! The bodies of hnsd's own requests (`POST /trace`, `POST /resolve`): a JSON object of string
//! fields, keys matched in any case as HNS matches its own.

use hcn::error::{HResult, HnsError};
use serde_json::Value;

/// The values of `fields` (as the documentation spells them) in `body`, in that order, `None`
/// where absent. An error says what `what` (e.g. "trace request") should look like, or names
/// the field that is unknown or not a string.
pub fn string_fields<const N: usize>(
    body: &[u8],
    what: &str,
    fields: [&str; N],
) -> Result<[Option<String>; N], HnsError> {
    let list = fields.join(", ");
    let doc: Value = serde_json::from_slice(body).map_err(|e| {
        HnsError::new(
            HResult::HCN_E_INVALID_JSON,
            format!("the {what} is not JSON ({e}); send an object with {list}"),
        )
    })?;
    let Value::Object(object) = doc else {
        return Err(HnsError::new(
            HResult::HCN_E_INVALID_JSON,
            format!("the {what} must be a JSON object with {list}"),
        ));
    };
    let mut values: [Option<String>; N] = std::array::from_fn(|_| None);
    for (key, value) in object {
        let Some(i) = fields.iter().position(|f| f.eq_ignore_ascii_case(&key)) else {
            return Err(invalid(
                &key,
                &format!("is not a field of a {what}; the fields are {list}"),
            ));
        };
        let Value::String(s) = value else {
            return Err(invalid(&key, &format!("must be a string, not {value}")));
        };
        values[i] = Some(s);
    }
    Ok(values)
}

/// A bad value of `field`, as HNS reports an invalid argument.
pub fn invalid(field: &str, message: &str) -> HnsError {
    HnsError::new(HResult::E_INVALIDARG, format!("{field}: {message}"))
}
