//! The one outbox filter operators use — for listings, bulk dry runs and bulk actions alike — and
//! its SQL conditions, built once per filter shape ([`Params::conditions`]; no `$n IS NULL OR` plans).
//!
//! Invariants:
//! - Every field is optional; an absent field matches everything. `listener` selects the event types
//!   routed to it (from the exhaustive listener map); with `eventType` too, both must hold.
//! - `resourceId` matches any timeline link of the event (`event_resources`), so a patient id finds
//!   its appointments' events as well as its own.
//! - Parsing names the offending field (400/422 over HTTP), before any query runs.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;

use crate::domain::input::FieldError;
use crate::events::EventType;
use crate::ids::{EventId, WorkspaceId};
use crate::listeners::{listeners, Listener};
use crate::outbox::OutboxStatus;

/// Which rows to select. `before` is the keyset position of a newest-first listing (an event id).
///
/// Its schema is the `filter` object of an outbox bulk body, as [`OutboxFilter::parse`] reads it
/// (the route refuses a field that is not a string, so no field is nullable); `workspace` and
/// `before` are the caller's. A bulk request names at least one field (`minProperties`); `to` after
/// `from` is a rule between two fields, documented in tests/fuzz-api.hooks.py.
#[derive(Debug, Clone, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
#[schemars(extend("minProperties" = 1), transform = without_defaults)]
pub struct OutboxFilter {
    // Scope to one workspace (always set over HTTP).
    #[serde(skip)]
    pub workspace: Option<WorkspaceId>,
    #[schemars(with = "OutboxStatus")]
    pub status: Option<OutboxStatus>,
    #[schemars(with = "EventType")]
    pub event_type: Option<EventType>,
    // Only rows created at least this long ago.
    #[schemars(with = "super::Age")]
    pub older_than: Option<Duration>,
    // Only rows whose event id sorts before this one (the next page of a newest-first listing).
    #[serde(skip)]
    pub before: Option<EventId>,
    /// Events routed to this listener
    #[schemars(with = "Listener")]
    pub listener: Option<Listener>,
    // Only rows whose `last_error_code` is this code.
    #[schemars(with = "ErrorCode")]
    pub error_code: Option<String>,
    // Only rows created at or after this time.
    #[schemars(with = "DateTime<Utc>")]
    pub from: Option<DateTime<Utc>>,
    // Only rows created before this time.
    #[schemars(with = "DateTime<Utc>")]
    pub to: Option<DateTime<Utc>>,
    // Only events linked to this resource (any timeline link).
    #[schemars(with = "crate::domain::schema::ApiUlid")]
    pub resource_id: Option<ulid::Ulid>,
}

/// The longest error code a filter takes.
const MAX_CODE_CHARS: usize = 100;
/// The largest age a filter uses; anything older selects the same rows (none).
const MAX_AGE: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

/// A filter as SQL conditions, built from named parts: only the fields given become conditions, so
/// each filter shape is its own statement (and plan) — no `$n IS NULL OR …`. Over the outbox
/// (`event_outbox o JOIN events e`) it is served by `event_outbox_workspace_idx (workspace_id,
/// event_id)` or, with a status, `event_outbox_status_workspace_idx (status, workspace_id,
/// event_id)`. The listings and the bulk actions of every queue build their statements from it, so
/// a filter means the same rows in both. The conditions own their values.
#[derive(Default)]
pub struct Conditions {
    parts: Vec<String>,
    values: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Conditions {
    /// Adds `part` (which ends in `$`) with the next parameter number, bound to `value`.
    pub fn and(&mut self, part: &str, value: impl ToSql + Sync + Send + 'static) {
        self.values.push(Box::new(value));
        self.parts.push(format!("{part}{}", self.values.len()));
    }

    /// Adds `part` (which ends in `($`) with the next parameter number and a closing parenthesis.
    fn and_closed(&mut self, part: &str, value: impl ToSql + Sync + Send + 'static) {
        self.and(part, value);
        if let Some(last) = self.parts.last_mut() {
            last.push(')');
        }
    }

    /// `column IN ('a', 'b')` of status names, written into the statement as literals, so even a
    /// generic plan knows how few `dead` rows there are among the done ones. The names are the
    /// code's own (the lease glossary's), never a caller's text.
    pub fn status_in(&mut self, column: &str, statuses: &[String]) {
        debug_assert!(statuses.iter().all(|s| s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
        let names: Vec<String> = statuses.iter().map(|status| format!("'{status}'")).collect();
        let list = if names.is_empty() { "NULL".to_owned() } else { names.join(", ") };
        self.parts.push(format!("{column} IN ({list})"));
    }

    /// The next parameter placeholder (`$n`), bound to `value`, for a clause after the conditions.
    pub fn bind(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.values.push(Box::new(value));
        format!("${}", self.values.len())
    }

    /// The bound values, in parameter order.
    pub fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values.iter().map(|value| value.as_ref() as &(dyn ToSql + Sync)).collect()
    }

    /// `WHERE …` (empty when no condition was given).
    pub fn where_clause(&self) -> String {
        if self.parts.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.parts.join(" AND "))
        }
    }
}

/// The bound values of a filter, owned so [`Params::conditions`] can borrow them as parameters.
pub struct Params {
    pub workspace: Option<WorkspaceId>,
    pub statuses: Option<Vec<String>>,
    pub event_types: Option<Vec<String>>,
    pub older_than: Option<f64>,
    pub error_code: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub resource_id: Option<uuid::Uuid>,
}

impl Params {
    /// The conditions of these values (see [`Conditions`]).
    pub fn conditions(&self) -> Conditions {
        let mut query = Conditions::default();
        if let Some(workspace) = self.workspace {
            query.and("o.workspace_id = $", workspace);
        }
        if let Some(statuses) = &self.statuses {
            query.status_in("o.status", statuses);
        }
        if let Some(event_types) = &self.event_types {
            query.and_closed("e.type = ANY ($", event_types.clone());
        }
        if let Some(older_than) = self.older_than {
            query.and("o.created_at <= now() - interval '1 second' * $", older_than);
        }
        if let Some(code) = &self.error_code {
            query.and("o.last_error_code = $", code.clone());
        }
        if let Some(from) = self.from {
            query.and("o.created_at >= $", from);
        }
        if let Some(to) = self.to {
            query.and("o.created_at < $", to);
        }
        if let Some(resource_id) = self.resource_id {
            query.and_closed(
                "EXISTS (SELECT 1 FROM event_resources r WHERE r.event_id = o.event_id AND r.resource_id = $",
                resource_id,
            );
        }
        query
    }
}

/// `olderThan`: an age such as 90, 90s, 15m, 2h or 7d.
pub(super) fn parse_older_than(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Duration>, FieldError> {
    get("olderThan")
        .map(|raw| {
            super::parse_age(&raw)
                .ok_or_else(|| FieldError::new("olderThan", "must be an age such as 90, 90s, 15m, 2h or 7d"))
        })
        .transpose()
}

/// The bound value of an age (seconds; anything past [`MAX_AGE`] selects the same rows).
pub(super) fn age_seconds(age: Duration) -> f64 {
    age.min(MAX_AGE).as_secs_f64()
}

/// Drops the `default` a filter's schema gets from `#[serde(default)]`: an absent field has no value
/// (it matches everything), and null is not one.
pub(super) fn without_defaults(schema: &mut schemars::Schema) {
    if let Some(properties) = schema.get_mut("properties").and_then(serde_json::Value::as_object_mut) {
        for property in properties.values_mut().filter_map(serde_json::Value::as_object_mut) {
            property.remove("default");
        }
    }
}

/// An error code as [`parse_error_code`] reads it (`errorCode`). Use with
/// `#[schemars(with = "ErrorCode")]`.
pub struct ErrorCode;

crate::inline_schema!(ErrorCode, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "pattern": format!("^[A-Za-z0-9_.:-]{{1,{MAX_CODE_CHARS}}}$")
    })
});

/// `errorCode`: letters, digits and `_-.:`, at most [`MAX_CODE_CHARS`].
pub(super) fn parse_error_code(get: &impl Fn(&str) -> Option<String>) -> Result<Option<String>, FieldError> {
    get("errorCode")
        .map(|raw| {
            let code = raw.trim().to_owned();
            let fits = !code.is_empty()
                && code.len() <= MAX_CODE_CHARS
                && code.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b));
            fits.then_some(code)
                .ok_or_else(|| FieldError::new("errorCode", "must be an error code (letters, digits, _-.:)"))
        })
        .transpose()
}

/// `from` and `to`: RFC 3339 times, `to` after `from`.
#[allow(clippy::type_complexity)]
pub(super) fn parse_period(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<(Option<DateTime<Utc>>, Option<DateTime<Utc>>), FieldError> {
    let time = |field: &str| {
        get(field)
            .map(|raw| {
                DateTime::parse_from_rfc3339(raw.trim())
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|_| FieldError::new(field, "must be an RFC 3339 time"))
            })
            .transpose()
    };
    let from = time("from")?;
    let to = time("to")?;
    if let (Some(from), Some(to)) = (from, to) {
        if to <= from {
            return Err(FieldError::new("to", "must be after from"));
        }
    }
    Ok((from, to))
}

impl OutboxFilter {
    /// The predicate's values; `statuses` replaces the filter's own status when given (bulk actions
    /// restrict to the statuses their action accepts).
    pub fn params(&self, statuses: Option<&[OutboxStatus]>) -> Params {
        let statuses = match (statuses, self.status) {
            (Some(accepted), Some(status)) => {
                Some(accepted.iter().filter(|s| **s == status).map(|s| s.as_str().to_owned()).collect())
            }
            (Some(accepted), None) => Some(accepted.iter().map(|s| s.as_str().to_owned()).collect()),
            (None, status) => status.map(|s| vec![s.as_str().to_owned()]),
        };
        let event_types: Option<Vec<String>> = match (self.event_type, self.listener) {
            (None, None) => None,
            (Some(event_type), None) => Some(vec![event_type.as_str().to_owned()]),
            (event_type, Some(listener)) => Some(
                EventType::ALL
                    .iter()
                    .filter(|t| event_type.is_none_or(|only| only == **t))
                    .filter(|t| listeners(**t).contains(&listener))
                    .map(|t| t.as_str().to_owned())
                    .collect(),
            ),
        };
        Params {
            workspace: self.workspace,
            statuses,
            event_types,
            older_than: self.older_than.map(age_seconds),
            error_code: self.error_code.clone(),
            from: self.from,
            to: self.to,
            resource_id: self.resource_id.map(uuid::Uuid::from),
        }
    }

    /// Reads the filter fields (`status`, `eventType`, `olderThan`, `listener`, `errorCode`, `from`,
    /// `to`, `resourceId`) through `get`, which answers a field's raw text. `workspace` and `before`
    /// are left for the caller.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<OutboxFilter, FieldError> {
        let bad = |field: &str, message: &str| FieldError::new(field, message);
        let status = get("status")
            .map(|raw| OutboxStatus::parse(&raw).ok_or_else(|| bad("status", "must be an outbox status")))
            .transpose()?;
        let event_type = get("eventType")
            .map(|raw| EventType::parse(&raw).ok_or_else(|| bad("eventType", "must be an event type")))
            .transpose()?;
        let older_than = parse_older_than(&get)?;
        let listener = get("listener")
            .map(|raw| Listener::parse(raw.trim()).ok_or_else(|| bad("listener", "must be a listener name")))
            .transpose()?;
        let error_code = parse_error_code(&get)?;
        let (from, to) = parse_period(&get)?;
        let resource_id = get("resourceId")
            .map(|raw| raw.trim().parse::<ulid::Ulid>().map_err(|_| bad("resourceId", "must be a ULID")))
            .transpose()?;
        Ok(OutboxFilter {
            workspace: None,
            status,
            event_type,
            older_than,
            before: None,
            listener,
            error_code,
            from,
            to,
            resource_id,
        })
    }

    /// A stable text of the filter fields, binding a listing cursor to its filters.
    pub fn scope_key(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}:{}:{}:{}:{}",
            self.workspace.map(|w| w.to_string()).unwrap_or_default(),
            self.status.map_or("", OutboxStatus::as_str),
            self.event_type.map_or("", EventType::as_str),
            self.older_than.map_or(0, |age| age.as_secs()),
            self.listener.map_or("", Listener::as_str),
            self.error_code.as_deref().unwrap_or(""),
            self.from.map(|t| t.to_rfc3339()).unwrap_or_default(),
            self.to.map(|t| t.to_rfc3339()).unwrap_or_default(),
            self.resource_id.map(|r| r.to_string()).unwrap_or_default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<OutboxFilter, FieldError> {
        OutboxFilter::parse(|field| pairs.iter().find(|(k, _)| *k == field).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn every_field_is_named_when_bad() {
        for (field, value) in [
            ("status", "stuck"),
            ("eventType", "appointment.exploded"),
            ("olderThan", "1w"),
            ("listener", "send_fax"),
            ("errorCode", "has space"),
            ("from", "yesterday"),
            ("resourceId", "42"),
        ] {
            assert_eq!(parse(&[(field, value)]).unwrap_err().field, field);
        }
        let error = parse(&[("from", "2026-01-02T00:00:00Z"), ("to", "2026-01-01T00:00:00Z")]).unwrap_err();
        assert_eq!(error.field, "to");
        assert_eq!(parse(&[]).unwrap(), OutboxFilter::default());
    }

    #[test]
    fn a_listener_selects_the_event_types_routed_to_it() {
        let filter = parse(&[("listener", "patient_reminder")]).unwrap();
        assert_eq!(filter.params(None).event_types, Some(vec!["appointment.reminder_due".to_owned()]));
        let both = parse(&[("listener", "patient_reminder"), ("eventType", "appointment.created")]).unwrap();
        assert_eq!(both.params(None).event_types, Some(vec![]));
        let dead = parse(&[("status", "dead")]).unwrap();
        let accepted = [OutboxStatus::Dead, OutboxStatus::Retry];
        assert_eq!(dead.params(Some(&accepted)).statuses, Some(vec!["dead".to_owned()]));
        let none = parse(&[("status", "dispatched")]).unwrap();
        assert_eq!(none.params(Some(&accepted)).statuses, Some(vec![]));
    }
}
