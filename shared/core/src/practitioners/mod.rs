//! Practitioners: created once, read by id. Use cases take the caller's transaction and never commit.

pub mod repo;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::context::Ctx;
use crate::db::Tx;
use crate::domain::input::{FieldError, Fields};
use crate::domain::values::{Name, Specialty};
use crate::error::DomainResult;
use crate::events::store::{append, NewEvent};
use crate::events::{Envelope, EventType};
use crate::ids::{PractitionerId, WorkspaceId};

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Practitioner {
    pub id: PractitionerId,
    pub workspace_id: WorkspaceId,
    pub display_name: String,
    pub specialty: Option<String>,
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/practitioners`, parsed.
#[derive(Debug, Clone)]
pub struct NewPractitioner {
    display_name: Name,
    specialty: Option<Specialty>,
}

impl NewPractitioner {
    pub fn new(display_name: Name, specialty: Option<Specialty>) -> Self {
        Self { display_name, specialty }
    }
}

impl TryFrom<Value> for NewPractitioner {
    type Error = FieldError;

    fn try_from(body: Value) -> Result<Self, FieldError> {
        let mut fields = Fields::new(body)?;
        let display_name = Name::parse("displayName", fields.required_str("displayName")?)?;
        let specialty =
            fields.optional_str("specialty")?.map(|raw| Specialty::parse("specialty", raw)).transpose()?;
        fields.finish()?;
        Ok(Self { display_name, specialty })
    }
}

pub async fn create(
    tx: &Tx<'_>,
    ctx: &Ctx,
    command: NewPractitioner,
) -> DomainResult<(Practitioner, Envelope)> {
    let now = crate::domain::values::now();
    let practitioner = Practitioner {
        id: PractitionerId::generate(),
        workspace_id: ctx.workspace_id,
        display_name: command.display_name.into_string(),
        specialty: command.specialty.map(Specialty::into_string),
        version: 1,
        created_at: now,
        updated_at: now,
    };
    repo::insert(tx, &practitioner).await?;
    let event = NewEvent {
        event_type: EventType::PractitionerCreated,
        workspace_id: ctx.workspace_id,
        resource_id: practitioner.id.ulid(),
        resource_version: 1,
        occurred_at: now,
        also_links: Vec::new(),
    };
    let envelope = append(tx, &ctx.cause, event).await?;
    Ok((practitioner, envelope))
}
