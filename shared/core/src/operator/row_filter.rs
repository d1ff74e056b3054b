//! The filter of bulk actions on the notification and webhook delivery queues: the outbox filter's
//! shape ([`super::OutboxFilter`]: status, age or period, error code) with each queue's own kind
//! fields — `listener` and `template` for notifications, `endpointId` and `eventType` for webhook
//! deliveries.
//!
//! Invariants:
//! - Every field is optional; an absent field matches everything. A queue reads only the fields it
//!   names ([`RowFilter::parse`]); `status` must be one of that queue's stored statuses.
//! - Parsing names the offending field (422 over HTTP) before any query runs.
//! - The conditions are built like the outbox's ([`super::filter::Conditions`]): only the fields
//!   given become conditions; statuses are the glossary's own names, written as literals.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::filter::{age_seconds, parse_error_code, parse_older_than, parse_period, Conditions};
use crate::domain::input::FieldError;
use crate::events::EventType;
use crate::ids::{WebhookEndpointId, WorkspaceId};
use crate::lease::Queue;
use crate::listeners::Listener;

/// The longest template name a filter takes.
const MAX_TEMPLATE_CHARS: usize = 64;

/// A template name as [`RowFilter::parse`] reads it (`template`). Use with
/// `#[schemars(with = "TemplateName")]`.
pub struct TemplateName;

crate::inline_schema!(TemplateName, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "pattern": format!("^[a-z0-9_.]{{1,{MAX_TEMPLATE_CHARS}}}$")
    })
});

/// Which rows of a notification or webhook delivery queue to select.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowFilter {
    /// A stored status of the queue (checked against its glossary when parsed).
    pub status: Option<&'static str>,
    /// Only rows created at least this long ago.
    pub older_than: Option<Duration>,
    /// Only rows created at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Only rows created before this time.
    pub to: Option<DateTime<Utc>>,
    /// Only rows whose `last_error_code` is this code.
    pub error_code: Option<String>,
    /// Notifications: only those its listener made.
    pub listener: Option<Listener>,
    /// Notifications: only those of this template.
    pub template: Option<String>,
    /// Webhook deliveries: only those to this endpoint.
    pub endpoint_id: Option<WebhookEndpointId>,
    /// Webhook deliveries: only those of this event type.
    pub event_type: Option<EventType>,
}

impl RowFilter {
    /// Reads the fields of `fields` (a subset of `status`, `olderThan`, `from`, `to`, `errorCode`,
    /// `listener`, `template`, `endpointId`, `eventType`) through `get`; `queue` says which
    /// statuses exist.
    pub fn parse(
        queue: &Queue,
        fields: &[&str],
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<RowFilter, FieldError> {
        let get = |field: &str| if fields.contains(&field) { get(field) } else { None };
        let status = get("status")
            .map(|raw| {
                let raw = raw.trim();
                queue.statuses().into_iter().find(|name| *name == raw).ok_or_else(|| {
                    FieldError::new("status", format!("must be one of {}", queue.statuses().join(", ")))
                })
            })
            .transpose()?;
        let older_than = parse_older_than(&get)?;
        let (from, to) = parse_period(&get)?;
        let error_code = parse_error_code(&get)?;
        let listener = get("listener")
            .map(|raw| {
                Listener::parse(raw.trim())
                    .ok_or_else(|| FieldError::new("listener", "must be a listener name"))
            })
            .transpose()?;
        let template = get("template")
            .map(|raw| {
                let name = raw.trim().to_owned();
                let fits = !name.is_empty()
                    && name.len() <= MAX_TEMPLATE_CHARS
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.".contains(&b));
                fits.then_some(name).ok_or_else(|| FieldError::new("template", "must be a template name"))
            })
            .transpose()?;
        let endpoint_id = get("endpointId")
            .map(|raw| raw.trim().parse().map_err(|_| FieldError::new("endpointId", "must be a ULID")))
            .transpose()?;
        let event_type = get("eventType")
            .map(|raw| {
                EventType::parse(raw.trim())
                    .ok_or_else(|| FieldError::new("eventType", "must be an event type"))
            })
            .transpose()?;
        Ok(RowFilter {
            status,
            older_than,
            from,
            to,
            error_code,
            listener,
            template,
            endpoint_id,
            event_type,
        })
    }

    /// The key a listing's cursor is bound to: every field (a cursor of one filter is refused under
    /// another).
    pub fn scope_key(&self) -> String {
        format!("{self:?}")
    }

    /// The conditions over the queue's table under `alias`, scoped to `workspace`, restricted to
    /// `accepted` statuses (those the action accepts; the filter's own status must be one of them).
    pub fn conditions(&self, alias: &str, workspace: Option<WorkspaceId>, accepted: &[&str]) -> Conditions {
        let mut query = Conditions::default();
        if let Some(workspace) = workspace {
            query.and(&format!("{alias}.workspace_id = $"), workspace);
        }
        let statuses: Vec<String> = accepted
            .iter()
            .filter(|name| self.status.is_none_or(|only| only == **name))
            .map(|name| (*name).to_owned())
            .collect();
        query.status_in(&format!("{alias}.status"), &statuses);
        if let Some(older_than) = self.older_than {
            query.and(
                &format!("{alias}.created_at <= now() - interval '1 second' * $"),
                age_seconds(older_than),
            );
        }
        if let Some(from) = self.from {
            query.and(&format!("{alias}.created_at >= $"), from);
        }
        if let Some(to) = self.to {
            query.and(&format!("{alias}.created_at < $"), to);
        }
        if let Some(code) = &self.error_code {
            query.and(&format!("{alias}.last_error_code = $"), code.clone());
        }
        if let Some(listener) = self.listener {
            query.and(&format!("{alias}.listener = $"), listener.as_str().to_owned());
        }
        if let Some(template) = &self.template {
            query.and(&format!("{alias}.template = $"), template.clone());
        }
        if let Some(endpoint) = self.endpoint_id {
            query.and(&format!("{alias}.endpoint_id = $"), endpoint);
        }
        if let Some(event_type) = self.event_type {
            query.and(&format!("{alias}.event_type = $"), event_type.as_str().to_owned());
        }
        query
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::{NOTIFICATIONS, WEBHOOK_DELIVERIES};

    const NOTIFICATION_FIELDS: &[&str] = &["status", "olderThan", "listener", "template", "errorCode"];

    fn parse(queue: &Queue, pairs: &[(&str, &str)]) -> Result<RowFilter, FieldError> {
        let fields = ["status", "olderThan", "from", "to", "errorCode", "endpointId", "eventType"];
        let fields: &[&str] = if queue.name == "notifications" { NOTIFICATION_FIELDS } else { &fields };
        RowFilter::parse(queue, fields, |field| {
            pairs.iter().find(|(k, _)| *k == field).map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn every_field_is_named_when_bad_and_statuses_are_the_queues() {
        for (field, value) in [("status", "failed"), ("listener", "send_fax"), ("template", "Has Space")] {
            assert_eq!(parse(&NOTIFICATIONS, &[(field, value)]).unwrap_err().field, field);
        }
        for (field, value) in [("status", "sent"), ("endpointId", "42"), ("eventType", "x.y"), ("to", "x")] {
            assert_eq!(parse(&WEBHOOK_DELIVERIES, &[(field, value)]).unwrap_err().field, field);
        }
        let dead = parse(&WEBHOOK_DELIVERIES, &[("status", "failed")]).unwrap();
        assert_eq!(dead.status, Some("failed"));
        // A field the queue does not read is ignored here (the route refuses it by name).
        assert_eq!(parse(&NOTIFICATIONS, &[("endpointId", "42")]).unwrap(), RowFilter::default());
    }

    #[test]
    fn a_status_the_action_does_not_accept_selects_nothing() {
        let filter = RowFilter { status: Some("sent"), ..RowFilter::default() };
        let query = filter.conditions("n", None, &["dead", "retry"]);
        assert_eq!(query.where_clause(), "WHERE n.status IN (NULL)");
        let all = RowFilter::default().conditions("n", None, &["dead", "retry"]);
        assert_eq!(all.where_clause(), "WHERE n.status IN ('dead', 'retry')");
    }
}
