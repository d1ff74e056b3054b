//! The published event contract as artifacts (DESIGN §4a): a JSON Schema (2020-12) per event type and
//! version and one for the CloudEvent wrapper ([`schemas`]), the AsyncAPI 3.0.0 document
//! ([`asyncapi`]) and the catalog `docs/events.md` ([`catalog`]).
//!
//! Invariants:
//! - Everything here is generated from the Rust types and catalogs (the [`EventType`] enum, the
//!   exhaustive listener map, the [`catalog::emitted_by`] match); nothing is written by hand. The
//!   generated files are checked in ([`artifacts`] lists them) and a test fails when one is stale;
//!   `UPDATE_CONTRACT=1 cargo test -p clinic-core --lib contract` rewrites them.
//! - The schema of an event version, once published, only grows; tests/contract's gate fails on a
//!   removed field, a changed type or an optional field made required. Such a change is a new version.
//! - The API serves the same documents without authentication: `GET /schemas/events/{type}/v{n}.json`,
//!   `GET /schemas/cloudevent/v1.json` and `GET /asyncapi.yaml`.
//! - A CloudEvent's `dataschema` is [`dataschema`]: `CLINIC_SCHEMA_BASE_URL` (default
//!   [`DEFAULT_SCHEMA_BASE_URL`], `clinic dev`'s address) followed by the schema's path, so it resolves
//!   through the API that serves it. It lives with the envelope ([`crate::events::dataschema`]), whose
//!   `metadata` carries it; this module publishes what it points at.
//! - Floors: the contract sits above [`crate::events`] (the types it publishes) and reads the
//!   listener catalog ([`crate::listeners::map`], which imports only the event types) for the listener
//!   channels and the CloudEvent `listener` extension; nothing else of the listeners. The webhooks and
//!   the SQS transport sit above it (they send its documents).

pub mod asyncapi;
#[cfg(any(test, feature = "testing"))]
pub mod capture;
pub mod catalog;
pub mod cloudevent;
pub mod schemas;
pub mod webhook_bodies;
mod yaml;

use std::sync::LazyLock;

use crate::events::EventType;

pub use crate::events::dataschema::{
    dataschema, read_schema_base, schema_path, serve_schemas_at, use_schema_base, DEFAULT_SCHEMA_BASE_URL,
};

/// The path of the CloudEvent wrapper's schema.
pub const CLOUDEVENT_SCHEMA_PATH: &str = "schemas/cloudevent/v1.json";

/// The path of the AsyncAPI document.
pub const ASYNCAPI_PATH: &str = "asyncapi.yaml";

/// The path of the catalog.
pub const CATALOG_PATH: &str = "docs/events.md";

/// Every published version of every event type. One today; a breaking change adds `(type, 2)`
/// beside `(type, 1)` and both stay published.
pub fn published_versions() -> Vec<(EventType, i32)> {
    EventType::ALL.iter().map(|t| (*t, crate::events::ENVELOPE_VERSION)).collect()
}

/// Every generated artifact: (path from the repository root, contents).
pub fn artifacts() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = published_versions()
        .into_iter()
        .map(|(t, v)| (schema_path(t, v), pretty(&schemas::event_schema(t, v))))
        .collect();
    files.push((CLOUDEVENT_SCHEMA_PATH.into(), pretty(&schemas::cloudevent_schema())));
    files.push((webhook_bodies::HEARTBEAT_SCHEMA_PATH.into(), pretty(&webhook_bodies::heartbeat_schema())));
    files.push((
        webhook_bodies::FHIR_ID_ONLY_SCHEMA_PATH.into(),
        pretty(&webhook_bodies::fhir_id_only_schema()),
    ));
    files.push((ASYNCAPI_PATH.into(), asyncapi::yaml()));
    files.push((CATALOG_PATH.into(), catalog::markdown()));
    files
}

/// The generated artifact at `path`, as served (`None`: no such document).
pub fn artifact(path: &str) -> Option<&'static str> {
    static ALL: LazyLock<Vec<(String, String)>> = LazyLock::new(artifacts);
    ALL.iter().find(|(p, _)| p == path).map(|(_, contents)| contents.as_str())
}

fn pretty(value: &serde_json::Value) -> String {
    let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// Fails when a checked-in artifact differs from what the code generates (or is missing);
    /// `UPDATE_CONTRACT=1` rewrites them instead.
    #[test]
    fn checked_in_contract_artifacts_are_current() {
        let update = std::env::var("UPDATE_CONTRACT").is_ok_and(|v| v == "1");
        let mut stale = Vec::new();
        for (path, contents) in artifacts() {
            let file = root().join(&path);
            let current = std::fs::read_to_string(&file).unwrap_or_default();
            if current != contents {
                if update {
                    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                    std::fs::write(&file, &contents).unwrap();
                } else {
                    stale.push(path);
                }
            }
        }
        assert!(
            stale.is_empty(),
            "stale contract artifacts {stale:?}: run `UPDATE_CONTRACT=1 cargo test -p clinic-core --lib \
             contract` and commit the result (a published schema may only grow: see tests/contract)"
        );
    }

    #[test]
    fn every_published_schema_file_is_generated() {
        let generated: Vec<String> = artifacts().into_iter().map(|(path, _)| path).collect();
        for folder in ["schemas/events", "schemas/webhooks"] {
            for entry in std::fs::read_dir(root().join(folder)).unwrap() {
                let entry = entry.unwrap();
                for version in std::fs::read_dir(entry.path()).unwrap() {
                    let path = format!(
                        "{folder}/{}/{}",
                        entry.file_name().to_string_lossy(),
                        version.unwrap().file_name().to_string_lossy()
                    );
                    assert!(generated.contains(&path), "{path} is checked in but no longer generated");
                }
            }
        }
    }

    #[test]
    fn the_schema_base_is_validated() {
        assert_eq!(
            dataschema(EventType::PatientCreated, 1).rsplit_once("/schemas/").unwrap().1,
            "events/patient.created/v1.json"
        );
        assert!(artifact("schemas/events/appointment.created/v1.json").is_some());
        assert!(artifact("schemas/events/appointment.exploded/v1.json").is_none());
    }
}
