//! The `dataschema` URI of an event: the schema base followed by the path of its version's schema
//! (`schemas/events/<type>/v<n>.json`), carried by every envelope's `metadata` and CloudEvent.
//!
//! Invariants:
//! - The base is one value per process, fixed before anything is published: `CLINIC_SCHEMA_BASE_URL`
//!   (default [`DEFAULT_SCHEMA_BASE_URL`], `clinic dev`'s address), or the address a process that
//!   serves the schemas itself listens on ([`serve_schemas_at`]).
//! - Only this module builds the URI; [`crate::contract`] publishes the documents it points at.

use std::sync::OnceLock;

use crate::config::ConfigError;
use crate::events::EventType;

/// The base of every `dataschema` URI when `CLINIC_SCHEMA_BASE_URL` is unset: `clinic dev`'s address.
pub const DEFAULT_SCHEMA_BASE_URL: &str = "http://127.0.0.1:3000";

/// `CLINIC_SCHEMA_BASE_URL`: an `http://` or `https://` URL without query or fragment (trailing `/`
/// dropped), or the default. Entry points that publish events call it at start-up, so a bad value
/// stops them with an error naming the variable.
pub fn schema_base_from_env() -> Result<String, ConfigError> {
    parse_schema_base(crate::config::var("CLINIC_SCHEMA_BASE_URL"))
}

fn parse_schema_base(value: Option<String>) -> Result<String, ConfigError> {
    let Some(value) = value else {
        return Ok(DEFAULT_SCHEMA_BASE_URL.into());
    };
    let base = value.trim().trim_end_matches('/');
    let scheme_ok = base.starts_with("https://") || base.starts_with("http://");
    let host_ok = base.split("://").nth(1).is_some_and(|rest| !rest.is_empty());
    let plain = !base.contains(['?', '#', ' ', '"', '<', '>']);
    if scheme_ok && host_ok && plain {
        Ok(base.to_owned())
    } else {
        Err(ConfigError::Invalid {
            name: "CLINIC_SCHEMA_BASE_URL",
            value,
            message: "must be an http:// or https:// URL without query or fragment".into(),
        })
    }
}

static SCHEMA_BASE: OnceLock<String> = OnceLock::new();

pub(crate) fn schema_base() -> &'static str {
    SCHEMA_BASE.get_or_init(|| {
        schema_base_from_env().unwrap_or_else(|error| {
            // Unreachable after start-up validated it; never publish a URI built from a bad value.
            tracing::error!(%error, "using the default schema base URL");
            DEFAULT_SCHEMA_BASE_URL.into()
        })
    })
}

/// The schema base of a process that serves the schemas itself (`clinic dev`): `served_at` (the
/// address it actually listens on, e.g. `http://127.0.0.1:8080`) unless `CLINIC_SCHEMA_BASE_URL`
/// names another one. Call once at start-up, before anything is published; answers the base in use.
pub fn serve_schemas_at(served_at: &str) -> &'static str {
    if crate::config::var("CLINIC_SCHEMA_BASE_URL").is_none() {
        let _ = SCHEMA_BASE.set(served_at.trim_end_matches('/').to_owned());
    }
    schema_base()
}

/// The path (below the API's root, and below the repository's root) of the schema of `version` of
/// `event_type`: `schemas/events/<type>/v<version>.json`.
pub fn schema_path(event_type: EventType, version: i32) -> String {
    format!("schemas/events/{}/v{version}.json", event_type.as_str())
}

/// The `dataschema` of an event: the stable URI of its version's schema.
pub fn dataschema(event_type: EventType, version: i32) -> String {
    format!("{}/{}", schema_base(), schema_path(event_type, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_base_url_is_parsed_strictly() {
        assert_eq!(parse_schema_base(None).unwrap(), DEFAULT_SCHEMA_BASE_URL);
        let api = Some("https://abc.execute-api.eu-central-1.amazonaws.com/".to_owned());
        assert_eq!(parse_schema_base(api).unwrap(), "https://abc.execute-api.eu-central-1.amazonaws.com");
        for bad in ["ftp://x", "https://", "example.org", "https://x/?q=1", "https://x/#f"] {
            assert!(parse_schema_base(Some(bad.into())).is_err(), "{bad}");
        }
    }
}
