//! Reading request bodies field by field, so every rejection names the field it is about.
//!
//! [`Fields`] wraps a JSON object; each accessor removes the field it reads, and [`Fields::finish`]
//! rejects whatever is left (unknown fields). A missing required field, a value of the wrong JSON type
//! and a value that fails its domain check all become a [`FieldError`] with the camelCase field name.

use serde_json::{Map, Value};

/// One rejected field.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for FieldError {}

/// A request body being taken apart.
#[derive(Debug)]
pub struct Fields {
    object: Map<String, Value>,
}

impl Fields {
    /// The body must be a JSON object.
    pub fn new(body: Value) -> Result<Self, FieldError> {
        match body {
            Value::Object(object) => Ok(Self { object }),
            _ => Err(FieldError::new("body", "must be a JSON object")),
        }
    }

    /// A field that must be present and a string.
    pub fn required_str(&mut self, field: &str) -> Result<String, FieldError> {
        self.optional_str(field)?.ok_or_else(|| FieldError::new(field, "is required"))
    }

    /// A field that may be absent or null; when present it must be a string.
    pub fn optional_str(&mut self, field: &str) -> Result<Option<String>, FieldError> {
        match self.object.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(_) => Err(FieldError::new(field, "must be a string")),
        }
    }

    /// For PATCH: absent → `None` (leave as is), null → `Some(None)` (clear), string → `Some(Some)`.
    pub fn patch_str(&mut self, field: &str) -> Result<Option<Option<String>>, FieldError> {
        match self.object.remove(field) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(Value::String(text)) => Ok(Some(Some(text))),
            Some(_) => Err(FieldError::new(field, "must be a string or null")),
        }
    }

    /// For PATCH: the raw value of `field` when present (the caller parses it; `null` included).
    pub fn take(&mut self, field: &str) -> Option<Value> {
        self.object.remove(field)
    }

    /// An optional positive integer (versions).
    pub fn optional_version(&mut self, field: &str) -> Result<Option<i32>, FieldError> {
        match self.object.remove(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(number)) => integer(&number)
                .filter(|value| (1..=i64::from(i32::MAX)).contains(value))
                .map(|value| Some(value as i32))
                .ok_or_else(|| FieldError::new(field, "must be a positive integer")),
            Some(_) => Err(FieldError::new(field, "must be a positive integer")),
        }
    }

    /// A field that may be absent; when present it must be `true` or `false` ([`boolean`]).
    pub fn optional_bool(&mut self, field: &str) -> Result<Option<bool>, FieldError> {
        boolean(field, self.object.remove(field).as_ref())
    }

    /// Rejects any field nobody asked for.
    pub fn finish(self) -> Result<(), FieldError> {
        match self.object.keys().next() {
            None => Ok(()),
            Some(field) => Err(FieldError::new(truncate(field), "is not a known field")),
        }
    }
}

/// The value of the boolean body field `field` (`None` when absent). When present it must be `true`
/// or `false`; null is neither (a boolean has nothing to clear), and is refused naming `field`.
pub fn boolean(field: &str, value: Option<&Value>) -> Result<Option<bool>, FieldError> {
    match value {
        None => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(FieldError::new(field, "must be true or false")),
    }
}

/// A JSON number that is an integer, as JSON Schema counts them: `3` and `3.0` are both the integer 3
/// (a schema's `"type": "integer"` admits both); `3.5`, and integers beyond `i64`, are not.
pub fn integer(number: &serde_json::Number) -> Option<i64> {
    if let Some(value) = number.as_i64() {
        return Some(value);
    }
    let value = number.as_f64()?;
    // 2^63 as f64 is exact; anything at or beyond it does not fit.
    (value.fract() == 0.0 && value >= i64::MIN as f64 && value < i64::MAX as f64).then_some(value as i64)
}

/// Field names echoed back are bounded, so a hostile key cannot bloat the answer.
fn truncate(field: &str) -> String {
    field.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_the_field_for_each_kind_of_mistake() {
        let mut fields = Fields::new(json!({"a": 1, "b": "x", "c": null, "z": true})).unwrap();
        assert_eq!(fields.required_str("a").unwrap_err().field, "a");
        assert_eq!(fields.required_str("b").unwrap(), "x");
        assert_eq!(fields.required_str("c").unwrap_err().message, "is required");
        assert_eq!(fields.finish().unwrap_err().field, "z");
        assert_eq!(Fields::new(json!([1])).unwrap_err().field, "body");
    }

    #[test]
    fn integers_are_counted_as_json_schema_counts_them() {
        let mut fields = Fields::new(json!({"a": 3.0, "b": 3.5, "c": 1e300, "d": 7})).unwrap();
        assert_eq!(fields.optional_version("a").unwrap(), Some(3));
        assert_eq!(fields.optional_version("b").unwrap_err().field, "b");
        assert_eq!(fields.optional_version("c").unwrap_err().field, "c");
        assert_eq!(fields.optional_version("d").unwrap(), Some(7));
    }

    #[test]
    fn a_boolean_is_absent_or_a_boolean_never_null() {
        let mut fields = Fields::new(json!({"a": true, "b": null, "c": "yes"})).unwrap();
        assert_eq!(fields.optional_bool("a").unwrap(), Some(true));
        assert_eq!(fields.optional_bool("b").unwrap_err().field, "b");
        assert_eq!(fields.optional_bool("c").unwrap_err().field, "c");
        assert_eq!(fields.optional_bool("d").unwrap(), None);
    }

    #[test]
    fn patch_distinguishes_absent_null_and_value() {
        let mut fields = Fields::new(json!({"email": null, "phone": "1"})).unwrap();
        assert_eq!(fields.patch_str("email").unwrap(), Some(None));
        assert_eq!(fields.patch_str("phone").unwrap(), Some(Some("1".into())));
        assert_eq!(fields.patch_str("given").unwrap(), None);
        assert!(fields.finish().is_ok());
    }
}
