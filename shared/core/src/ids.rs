//! Typed identifiers.
//!
//! Every id is a ULID, rendered as its 26-character Crockford string in JSON and logs and stored as a
//! PostgreSQL `uuid`. Each resource has its own newtype so an appointment id can never be passed where
//! a patient id is expected; no bare string or uuid crosses a module boundary.
//!
//! New ids come from one process-wide monotonic generator, so ids minted in one process sort in the
//! order they were minted even within the same millisecond.

use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use ulid::{Generator, Ulid};
use uuid::Uuid;

static GENERATOR: Mutex<Option<Generator>> = Mutex::new(None);

/// A fresh ULID from the process-wide monotonic generator.
pub fn new_ulid() -> Ulid {
    let mut guard = GENERATOR.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let generator = guard.get_or_insert_with(Generator::new);
    // The generator fails only when 2^80 ids are minted in one millisecond; fall back to a random one.
    generator.generate().unwrap_or_else(|_| Ulid::generate())
}

/// Why a string is not an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid ULID")]
pub struct InvalidId;

/// Parses a 26-character ULID string.
pub fn parse_ulid(text: &str) -> Result<Ulid, InvalidId> {
    if text.len() != 26 {
        return Err(InvalidId);
    }
    Ulid::from_string(text).map_err(|_| InvalidId)
}

/// The JSON Schema of every id: a 26-character Crockford base-32 ULID string.
pub fn ulid_schema() -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "pattern": "^[0-7][0-9A-HJKMNP-TV-Z]{25}$",
        "description": "A ULID: 26 characters of Crockford base 32",
    })
}

/// Use with `#[schemars(with = "crate::ids::UlidSchema")]` on a bare `Ulid` field.
pub struct UlidSchema;

crate::inline_schema!(UlidSchema as "Ulid", |_: &mut schemars::SchemaGenerator| ulid_schema());

macro_rules! typed_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Ulid);

        impl $name {
            /// A new id, sorting after every id this process minted before.
            pub fn generate() -> Self {
                Self(new_ulid())
            }

            pub const fn from_ulid(ulid: Ulid) -> Self {
                Self(ulid)
            }

            pub const fn ulid(self) -> Ulid {
                self.0
            }

            pub fn uuid(self) -> Uuid {
                Uuid::from(self.0)
            }

            pub fn from_uuid(uuid: Uuid) -> Self {
                Self(Ulid::from(uuid))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;
            fn from_str(text: &str) -> Result<Self, InvalidId> {
                parse_ulid(text).map(Self)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                text.parse().map_err(|_| serde::de::Error::custom("not a valid ULID"))
            }
        }

        crate::inline_schema!($name as "Ulid", |_: &mut schemars::SchemaGenerator| ulid_schema());

        impl ToSql for $name {
            fn to_sql(
                &self,
                ty: &Type,
                out: &mut bytes::BytesMut,
            ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
                self.uuid().to_sql(ty, out)
            }
            fn accepts(ty: &Type) -> bool {
                <Uuid as ToSql>::accepts(ty)
            }
            tokio_postgres::types::to_sql_checked!();
        }

        impl<'a> FromSql<'a> for $name {
            fn from_sql(
                ty: &Type,
                raw: &'a [u8],
            ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
                Uuid::from_sql(ty, raw).map(Self::from_uuid)
            }
            fn accepts(ty: &Type) -> bool {
                <Uuid as FromSql>::accepts(ty)
            }
        }
    };
}

typed_id!(
    /// A clinic: the tenant every row belongs to.
    WorkspaceId
);
typed_id!(
    /// A staff member of a workspace.
    MemberId
);
typed_id!(
    /// A practitioner.
    PractitionerId
);
typed_id!(
    /// A patient.
    PatientId
);
typed_id!(
    /// An appointment.
    AppointmentId
);
typed_id!(
    /// A domain event; also the idempotency key of every listener effect it causes.
    EventId
);
typed_id!(
    /// Ties together every request, event, message and mutation of one causal chain.
    CorrelationId
);
typed_id!(
    /// A notification in the delivery log.
    NotificationId
);
typed_id!(
    /// One claim of outbox rows; every mark is fenced by it.
    ClaimToken
);
typed_id!(
    /// One row of the accounting of disclosures (`patient_disclosures`).
    DisclosureId
);
typed_id!(
    /// A request received by the API (used as the causation id of the event it causes).
    RequestId
);
typed_id!(
    /// An operator action on an outbox row.
    OperatorActionId
);
typed_id!(
    /// One recorded rejection of a listener delivery (`listener_rejections`).
    RejectionId
);
typed_id!(
    /// A workspace's webhook endpoint.
    WebhookEndpointId
);
typed_id!(
    /// One webhook delivery (endpoint, event); rendered as the `webhook-id` header.
    WebhookDeliveryId
);

/// The id of whatever caused an event: a request or another event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(transparent)]
pub struct CausationId(#[schemars(with = "UlidSchema")] pub Ulid);

impl From<RequestId> for CausationId {
    fn from(id: RequestId) -> Self {
        Self(id.ulid())
    }
}

impl From<EventId> for CausationId {
    fn from(id: EventId) -> Self {
        Self(id.ulid())
    }
}

impl fmt::Display for CausationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_text_and_uuid() {
        let id = PatientId::generate();
        let text = id.to_string();
        assert_eq!(text.len(), 26);
        assert_eq!(text.parse::<PatientId>().unwrap(), id);
        assert_eq!(PatientId::from_uuid(id.uuid()), id);
    }

    #[test]
    fn generated_ids_sort_in_mint_order() {
        let ids: Vec<EventId> = (0..1000).map(|_| EventId::generate()).collect();
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn rejects_malformed_ids() {
        assert!("".parse::<PatientId>().is_err());
        assert!("01ARZ3NDEKTSV4RRFFQ69G5FA".parse::<PatientId>().is_err());
        assert!("01ARZ3NDEKTSV4RRFFQ69G5FAVX".parse::<PatientId>().is_err());
        assert!("UUUUUUUUUUUUUUUUUUUUUUUUUU".parse::<PatientId>().is_err());
    }
}
