//! The `dataschema` URI of an event: the schema base followed by the path of its version's schema
//! (`schemas/events/<type>/v<n>.json`), carried by every envelope's `metadata` and CloudEvent.
//!
//! Invariants:
//! - The base is one value per process, fixed by its `main` before anything is published
//!   ([`use_schema_base`], [`serve_schemas_at`]): `CLINIC_SCHEMA_BASE_URL` as its settings read it
//!   ([`read_schema_base`]), else [`DEFAULT_SCHEMA_BASE_URL`] (`clinic dev`'s address), or the
//!   address a process that serves the schemas itself listens on. Nothing here reads the
//!   environment; a process whose `main` set nothing (a test) uses the default.
//! - Only this module builds the URI; [`crate::contract`] publishes the documents it points at.

use std::sync::OnceLock;

use crate::config::{ConfigError, Env};
use crate::events::EventType;

/// The base of every `dataschema` URI when `CLINIC_SCHEMA_BASE_URL` is unset: `clinic dev`'s address.
pub const DEFAULT_SCHEMA_BASE_URL: &str = "http://127.0.0.1:3000";

/// `CLINIC_SCHEMA_BASE_URL`: an `http://` or `https://` URL without query or fragment (trailing `/`
/// dropped), or `None` when unset. Settings read it at start-up, so a bad value stops the process
/// with an error naming the variable.
pub fn read_schema_base(env: &Env) -> Result<Option<String>, ConfigError> {
    env.var("CLINIC_SCHEMA_BASE_URL").map(parse_schema_base).transpose()
}

fn parse_schema_base(value: String) -> Result<String, ConfigError> {
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
    SCHEMA_BASE.get_or_init(|| DEFAULT_SCHEMA_BASE_URL.into())
}

/// Fixes the process's schema base: `configured` ([`read_schema_base`]) or the default. Call once at
/// start-up, before anything is published (a later call changes nothing); answers the base in use.
pub fn use_schema_base(configured: Option<&str>) -> &'static str {
    let _ = SCHEMA_BASE.set(configured.unwrap_or(DEFAULT_SCHEMA_BASE_URL).trim_end_matches('/').to_owned());
    schema_base()
}

/// The schema base of a process that serves the schemas itself (`clinic dev`): `served_at` (the
/// address it actually listens on, e.g. `http://127.0.0.1:8080`) unless `configured`
/// (`CLINIC_SCHEMA_BASE_URL`) names another one. Call once at start-up, before anything is
/// published; answers the base in use.
pub fn serve_schemas_at(served_at: &str, configured: Option<&str>) -> &'static str {
    use_schema_base(Some(configured.unwrap_or(served_at)))
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
        assert_eq!(read_schema_base(&Env::from_pairs::<&str, &str>([])).unwrap(), None);
        let api = "https://abc.execute-api.eu-central-1.amazonaws.com/".to_owned();
        assert_eq!(parse_schema_base(api).unwrap(), "https://abc.execute-api.eu-central-1.amazonaws.com");
        for bad in ["ftp://x", "https://", "example.org", "https://x/?q=1", "https://x/#f"] {
            assert!(parse_schema_base(bad.into()).is_err(), "{bad}");
        }
    }
}
