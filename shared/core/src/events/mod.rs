//! Domain events: the catalog, the identifier-only envelope and the one way to append an event.
//!
//! Invariants:
//! - [`EventType`] is the one source of truth for event type names; its `as_str`, `parse` and `ALL`
//!   agree (a unit test walks them). Names never change: a new shape gets a new version.
//! - An [`Envelope`] carries identifiers only. It has no field that could hold a name, contact detail,
//!   reason or token, so an event cannot leak health data by construction.
//! - [`store::append`] is the only writer of `events`, `event_resources` and `event_outbox`.
//! - The envelope only grows (DESIGN §4a): fields are added, never removed, renamed or retyped, and a
//!   field added after the first release is optional on input, so a consumer built before it reads a
//!   newer envelope (unknown fields are ignored) and a newer consumer reads an older one. A breaking
//!   change is a new event version; the gate in tests/run (tests/contract) enforces it.
//! - `changedFields` holds field *names* from [`EventType::changeable_fields`], never values;
//!   `idempotencyKey` is a keyed digest ([`KeyDigest`]), never the key the client sent.

pub mod dataschema;
pub mod read;
pub mod store;

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use ulid::Ulid;

use crate::ids::{CausationId, CorrelationId, EventId, WorkspaceId};
use crate::telemetry::TraceParent;

/// The current envelope schema version.
pub const ENVELOPE_VERSION: i32 = 1;

macro_rules! event_types {
    ($($variant:ident => $name:literal, $resource:ident;)+) => {
        /// Every event type the system emits. Fieldless; never `#[non_exhaustive]`: the listener map
        /// matches it exhaustively.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum EventType {
            $($variant,)+
        }

        impl EventType {
            /// Every event type, in catalog order.
            pub const ALL: &'static [EventType] = &[$(EventType::$variant,)+];

            /// The stable wire name, e.g. `appointment.created`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(EventType::$variant => $name,)+
                }
            }

            /// The type of resource this event is about.
            pub const fn resource_type(self) -> ResourceType {
                match self {
                    $(EventType::$variant => ResourceType::$resource,)+
                }
            }

            /// The published name of `version` of this type, `clinic.<aggregate>.<fact>.v<version>`
            /// (the CloudEvents `type`), e.g. `clinic.appointment.created.v1`.
            pub fn published_name(self, version: i32) -> String {
                format!("clinic.{}.v{version}", self.as_str())
            }

            /// The inverse of [`EventType::as_str`].
            pub fn parse(name: &str) -> Option<EventType> {
                match name {
                    $($name => Some(EventType::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

event_types! {
    PatientCreated => "patient.created", Patient;
    PatientUpdated => "patient.updated", Patient;
    PatientDeleted => "patient.deleted", Patient;
    PractitionerCreated => "practitioner.created", Practitioner;
    PractitionerUpdated => "practitioner.updated", Practitioner;
    AppointmentCreated => "appointment.created", Appointment;
    AppointmentRescheduled => "appointment.rescheduled", Appointment;
    AppointmentCancelled => "appointment.cancelled", Appointment;
    AppointmentCompleted => "appointment.completed", Appointment;
    AppointmentReminderDue => "appointment.reminder_due", Appointment;
}

impl EventType {
    /// The module that emits events of this type (the envelope's `producer`).
    pub const fn producer(self) -> &'static str {
        match self {
            EventType::PatientCreated | EventType::PatientUpdated | EventType::PatientDeleted => {
                "clinic-core/patients"
            }
            EventType::PractitionerCreated | EventType::PractitionerUpdated => "clinic-core/practitioners",
            EventType::AppointmentCreated
            | EventType::AppointmentRescheduled
            | EventType::AppointmentCancelled
            | EventType::AppointmentCompleted => "clinic-core/appointments",
            EventType::AppointmentReminderDue => "clinic-core/housekeeping/reminders",
        }
    }

    /// The names `changedFields` may hold for this type: the update and reschedule events list which
    /// of these fields the mutation changed (names only). Empty: the type carries no `changedFields`.
    pub const fn changeable_fields(self) -> &'static [&'static str] {
        match self {
            EventType::PatientUpdated => &[
                "givenName",
                "familyName",
                "email",
                "phone",
                "dateOfBirth",
                "contactChannels",
                "contactOptOuts",
                "timeZone",
            ],
            EventType::PractitionerUpdated => &["displayName", "specialty", "active"],
            EventType::AppointmentRescheduled => &["startsAt", "endsAt"],
            EventType::PatientCreated
            | EventType::PatientDeleted
            | EventType::PractitionerCreated
            | EventType::AppointmentCreated
            | EventType::AppointmentCancelled
            | EventType::AppointmentCompleted
            | EventType::AppointmentReminderDue => &[],
        }
    }
}

/// The names of the fields whose flag is `true`, for `changedFields`: `(name, changed)` pairs.
pub fn changed_fields(fields: &[(&'static str, bool)]) -> Vec<&'static str> {
    fields.iter().filter(|(_, changed)| *changed).map(|(name, _)| *name).collect()
}

crate::inline_schema!(EventType, |_: &mut schemars::SchemaGenerator| {
    let names: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
    schemars::json_schema!({ "type": "string", "enum": names, "description": "The short event type" })
});

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventType {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        EventType::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown event type `{name}`")))
    }
}

/// The kinds of resource that events are about and timelines are kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum ResourceType {
    Patient,
    Practitioner,
    Appointment,
}

impl ResourceType {
    pub const fn as_str(self) -> &'static str {
        match self {
            ResourceType::Patient => "patient",
            ResourceType::Practitioner => "practitioner",
            ResourceType::Appointment => "appointment",
        }
    }

    pub fn parse(name: &str) -> Option<ResourceType> {
        match name {
            "patient" => Some(ResourceType::Patient),
            "practitioner" => Some(ResourceType::Practitioner),
            "appointment" => Some(ResourceType::Appointment),
            _ => None,
        }
    }
}

/// Who caused an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[schemars(inline)]
pub enum Actor {
    Member {
        #[schemars(with = "crate::ids::UlidSchema")]
        id: Ulid,
    },
    Patient {
        #[schemars(with = "crate::ids::UlidSchema")]
        id: Ulid,
    },
    /// Cron jobs and listener-originated mutations.
    System,
}

impl Actor {
    pub const fn kind(&self) -> &'static str {
        match self {
            Actor::Member { .. } => "member",
            Actor::Patient { .. } => "patient",
            Actor::System => "system",
        }
    }

    pub fn id(&self) -> Option<Ulid> {
        match self {
            Actor::Member { id } | Actor::Patient { id } => Some(*id),
            Actor::System => None,
        }
    }

    pub fn from_parts(kind: &str, id: Option<Ulid>) -> Option<Actor> {
        match (kind, id) {
            ("member", Some(id)) => Some(Actor::Member { id }),
            ("patient", Some(id)) => Some(Actor::Patient { id }),
            ("system", _) => Some(Actor::System),
            _ => None,
        }
    }
}

/// The causal context every mutation runs in: who, and in which chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cause {
    pub actor: Actor,
    pub correlation_id: CorrelationId,
    pub causation_id: CausationId,
    /// The digest of the originating request's `Idempotency-Key`, when it had one.
    pub idempotency_key: Option<KeyDigest>,
    /// The trace context the mutation runs in (a request's, see `telemetry::spans::continue_trace`),
    /// stored with its events; `None` outside a traced request.
    pub trace: Option<TraceParent>,
}

/// The form of a client's `Idempotency-Key` that events carry: `HMAC-SHA256(K, workspaceId ":" key)`
/// with a server-held key `K`, rendered `hmac-sha256:<64 hex>`.
///
/// Why keyed and not a plain SHA-256: keys are chosen by clients and are often short or made of
/// words ("book-ada-lovelace-flu"); a plain digest of such a string is reversed by trying guesses, and
/// every consumer of the queues could do that. Without `K` no consumer can test a guess, while the
/// server can still match a retried request to its event. The workspace id is hashed in so equal keys
/// of two workspaces give unrelated digests. `K` is derived from the API's cursor key (see
/// `docs/events.md`), so rotating that key changes the digests of new events only.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    /// The digest of `key`, sent in `workspace_id`, under the server key `secret`.
    pub fn of(secret: &[u8], workspace_id: WorkspaceId, key: &str) -> Self {
        use hmac::Mac;
        let mut derived = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(secret)
            .expect("HMAC takes a key of any length");
        derived.update(b"clinic/idempotency-key-digest/v1");
        let derived = derived.finalize().into_bytes();
        let mut mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(&derived)
            .expect("HMAC takes a key of any length");
        mac.update(workspace_id.to_string().as_bytes());
        mac.update(b":");
        mac.update(key.as_bytes());
        Self(mac.finalize().into_bytes().into())
    }

    /// `hmac-sha256:<64 hex>`.
    pub fn render(&self) -> String {
        let hex: String = self.0.iter().map(|byte| format!("{byte:02x}")).collect();
        format!("{KEY_DIGEST_PREFIX}{hex}")
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(..)")
    }
}

/// The scheme prefix of a rendered [`KeyDigest`].
pub const KEY_DIGEST_PREFIX: &str = "hmac-sha256:";

/// The CloudEvents `source` of an event of `workspace_id` (webhook bodies carry the same):
/// `<prefix>/workspaces/<workspaceId>`.
pub fn event_source(prefix: &str, workspace_id: crate::ids::WorkspaceId) -> String {
    format!("{}/workspaces/{}", prefix.trim_end_matches('/'), workspace_id)
}

/// Schema hints carried by every envelope.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// The version of the envelope's common shape (the fields every event type shares).
    pub envelope_version: i32,
    /// The URI of the JSON Schema this envelope validates against (the CloudEvents `dataschema`).
    #[schemars(extend("format" = "uri"))]
    pub dataschema: String,
}

impl Metadata {
    pub fn of(event_type: EventType, version: i32) -> Self {
        Self { envelope_version: ENVELOPE_VERSION, dataschema: dataschema::dataschema(event_type, version) }
    }
}

/// The event as stored and as sent: identifiers only.
///
/// Unknown fields are ignored on input (a consumer keeps working when the envelope grows); every field
/// after `causationId` was added later and may be absent in a message of an older build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// The event id: also the idempotency key of every listener effect (`{eventId}:{listener}`).
    pub id: EventId,
    /// The short type, e.g. `appointment.created`.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// The version of this event type's schema.
    pub version: i32,
    pub workspace_id: WorkspaceId,
    pub actor: Actor,
    /// When it happened (domain time).
    pub occurred_at: DateTime<Utc>,
    /// When the database recorded it.
    pub recorded_at: DateTime<Utc>,
    pub resource_type: ResourceType,
    #[schemars(with = "crate::ids::UlidSchema")]
    pub resource_id: Ulid,
    /// The resource's version after the mutation.
    pub resource_version: i32,
    pub correlation_id: CorrelationId,
    pub causation_id: CausationId,
    /// The published name `clinic.<aggregate>.<fact>.v<version>` (the CloudEvents `type`).
    #[serde(default)]
    pub published_name: String,
    /// The module that emitted the event.
    #[serde(default)]
    pub producer: String,
    /// `hmac-sha256:<hex>` of the originating request's `Idempotency-Key`, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^hmac-sha256:[0-9a-f]{64}$"))]
    pub idempotency_key: Option<String>,
    /// On update and reschedule events: the names of the fields that changed (never their values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_fields: Option<Vec<String>>,
    /// Schema hints.
    #[serde(default)]
    pub metadata: Metadata,
    /// The W3C trace context of the request that committed the event (`events.traceparent`). Not part
    /// of the envelope's JSON: it travels as the CloudEvents `traceparent` extension attribute
    /// ([`crate::contract::cloudevent`]), as the distributed-tracing extension prescribes.
    #[serde(skip)]
    #[schemars(skip)]
    pub traceparent: Option<TraceParent>,
}

impl Envelope {
    /// Fills the fields derived from the type and version (`publishedName`, `producer`, `metadata`).
    pub fn with_derived_fields(mut self) -> Self {
        self.published_name = self.event_type.published_name(self.version);
        self.producer = self.event_type.producer().into();
        self.metadata = Metadata::of(self.event_type, self.version);
        self
    }
}

impl Envelope {
    /// A fresh envelope of `event_type` with new ids, version 1, the system as actor and `now` as
    /// its times: the one sample envelope for tests (this crate's, and with the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn sample(event_type: EventType) -> Envelope {
        Envelope {
            id: EventId::generate(),
            event_type,
            version: ENVELOPE_VERSION,
            workspace_id: WorkspaceId::generate(),
            actor: Actor::System,
            occurred_at: Utc::now(),
            recorded_at: Utc::now(),
            resource_type: event_type.resource_type(),
            resource_id: Ulid::generate(),
            resource_version: 1,
            correlation_id: CorrelationId::generate(),
            causation_id: CausationId(Ulid::generate()),
            published_name: String::new(),
            producer: String::new(),
            idempotency_key: None,
            changed_fields: None,
            metadata: Metadata::default(),
            traceparent: None,
        }
        .with_derived_fields()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_names_round_trip() {
        for event_type in EventType::ALL {
            assert_eq!(EventType::parse(event_type.as_str()), Some(*event_type));
            assert!(event_type.as_str().starts_with(event_type.resource_type().as_str()));
        }
        assert_eq!(EventType::ALL.len(), 10);
        assert_eq!(EventType::parse("appointment.exploded"), None);
    }

    #[test]
    fn envelope_serializes_in_camel_case_with_actor_kind() {
        let envelope = Envelope::sample(EventType::AppointmentCreated);
        let json = serde_json::to_value(&envelope).unwrap();
        assert_eq!(json["type"], "appointment.created");
        assert_eq!(json["actor"]["kind"], "system");
        assert!(json.get("workspaceId").is_some());
        let back: Envelope = serde_json::from_value(json).unwrap();
        assert_eq!(back, envelope);
    }
}
