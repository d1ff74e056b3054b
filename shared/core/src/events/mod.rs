//! Domain events: the catalog, the identifier-only envelope and the one way to append an event.
//!
//! Invariants:
//! - [`EventType`] is the one source of truth for event type names; its `as_str`, `parse` and `ALL`
//!   agree (a unit test walks them). Names never change: a new shape gets a new version.
//! - An [`Envelope`] carries identifiers only. It has no field that could hold a name, contact detail,
//!   reason or token, so an event cannot leak health data by construction.
//! - [`store::append`] is the only writer of `events`, `event_resources` and `event_outbox`.

pub mod read;
pub mod store;

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use ulid::Ulid;

use crate::ids::{CausationId, CorrelationId, EventId, WorkspaceId};

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Actor {
    Member {
        id: Ulid,
    },
    Patient {
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
}

/// The event as stored and as sent: identifiers only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Envelope {
    pub id: EventId,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub version: i32,
    pub workspace_id: WorkspaceId,
    pub actor: Actor,
    pub occurred_at: DateTime<Utc>,
    pub recorded_at: DateTime<Utc>,
    pub resource_type: ResourceType,
    pub resource_id: Ulid,
    pub resource_version: i32,
    pub correlation_id: CorrelationId,
    pub causation_id: CausationId,
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
        }
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
