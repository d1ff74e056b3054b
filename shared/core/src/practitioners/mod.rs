//! Practitioners: created, changed (display name, specialty, active flag), read by id and listed.
//!
//! Invariants: use cases take the caller's transaction and never commit; every change bumps `version`
//! by exactly one and appends one `practitioner.updated` event. An inactive practitioner keeps its
//! history and its appointments but cannot be booked (`appointments::book` checks under a share lock).

pub mod repo;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::context::Ctx;
use crate::db::Tx;
use crate::domain::input::{FieldError, Fields};
use crate::domain::schema::{at_least_one_of, ExpectedVersion};
use crate::domain::values::{Name, Specialty};
use crate::error::{DomainError, DomainResult};
use crate::events::changed_fields;
use crate::events::store::{append, NewEvent};
use crate::events::{Envelope, EventType};
use crate::ids::{PractitionerId, WorkspaceId};
use crate::patients::check_version;

#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Practitioner {
    pub id: PractitionerId,
    pub workspace_id: WorkspaceId,
    pub display_name: String,
    pub specialty: Option<String>,
    /// False once deactivated: no new bookings.
    pub active: bool,
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/practitioners`, parsed. Its schema is the body [`NewPractitioner::try_from`] reads.
#[derive(Debug, Clone, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewPractitioner {
    /// Not blank (at least one character that is not white space), no NUL, at most 200 characters.
    display_name: Name,
    /// Optional; when given: not blank, no NUL, at most 200 characters.
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

/// `PATCH /v1/practitioners/{id}`, parsed: any subset of `displayName`, `specialty` (null clears it)
/// and `active`, plus an optional `expectedVersion`. Its schema is the body
/// [`PractitionerChanges::try_from`] reads, written as [`crate::patients::PatientChanges`]' is (a
/// field that cannot be cleared: `with` its value and `default`, never null); at least one of
/// [`CHANGEABLE_FIELDS`].
#[derive(Debug, Clone, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = at_least_one_change)]
pub struct PractitionerChanges {
    /// Not blank (at least one character that is not white space), no NUL, at most 200 characters. Cannot be cleared (null is refused).
    #[schemars(with = "Name")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    display_name: Option<Name>,
    /// Optional; when given: not blank, no NUL, at most 200 characters; null clears it.
    specialty: Option<Option<Specialty>>,
    /// False deactivates the practitioner (no new bookings); true activates it again. Null is refused.
    #[schemars(with = "bool")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    active: Option<bool>,
    #[schemars(with = "Option<ExpectedVersion>")]
    expected_version: Option<i32>,
}

/// The fields a practitioner's change must name at least one of (`expectedVersion` alone changes
/// nothing): the fields a `practitioner.updated` event may name.
pub const CHANGEABLE_FIELDS: &[&str] = EventType::PractitionerUpdated.changeable_fields();

/// [`PractitionerChanges`]' schema names at least one of [`CHANGEABLE_FIELDS`], as its parser
/// requires.
fn at_least_one_change(schema: &mut schemars::Schema) {
    at_least_one_of(schema, CHANGEABLE_FIELDS);
}

impl TryFrom<Value> for PractitionerChanges {
    type Error = FieldError;

    fn try_from(body: Value) -> Result<Self, FieldError> {
        let mut fields = Fields::new(body)?;
        let display_name = match fields.patch_str("displayName")? {
            None => None,
            Some(None) => return Err(FieldError::new("displayName", "cannot be cleared")),
            Some(Some(raw)) => Some(Name::parse("displayName", raw)?),
        };
        let specialty = fields
            .patch_str("specialty")?
            .map(|value| value.map(|raw| Specialty::parse("specialty", raw)).transpose())
            .transpose()?;
        let active = fields.optional_bool("active")?;
        let expected_version = fields.optional_version("expectedVersion")?;
        fields.finish()?;
        if display_name.is_none() && specialty.is_none() && active.is_none() {
            return Err(FieldError::new("body", "must change at least one field"));
        }
        Ok(Self { display_name, specialty, active, expected_version })
    }
}

impl PractitionerChanges {
    fn apply_to(self, practitioner: &mut Practitioner) {
        if let Some(name) = self.display_name {
            practitioner.display_name = name.into_string();
        }
        if let Some(specialty) = self.specialty {
            practitioner.specialty = specialty.map(Specialty::into_string);
        }
        if let Some(active) = self.active {
            practitioner.active = active;
        }
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
        active: true,
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
        changed_fields: None,
    };
    let envelope = append(tx, &ctx.cause, event).await?;
    Ok((practitioner, envelope))
}

pub async fn update(
    tx: &Tx<'_>,
    ctx: &Ctx,
    id: PractitionerId,
    changes: PractitionerChanges,
) -> DomainResult<(Practitioner, Envelope)> {
    let mut practitioner = repo::lock(tx, ctx.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    check_version(changes.expected_version, practitioner.version)?;
    let before = practitioner.clone();
    changes.apply_to(&mut practitioner);
    let changed = changed_fields(&[
        ("displayName", before.display_name != practitioner.display_name),
        ("specialty", before.specialty != practitioner.specialty),
        ("active", before.active != practitioner.active),
    ]);
    practitioner.version += 1;
    practitioner.updated_at = crate::domain::values::now();
    repo::update(tx, &practitioner).await?;
    let event = NewEvent {
        event_type: EventType::PractitionerUpdated,
        workspace_id: ctx.workspace_id,
        resource_id: practitioner.id.ulid(),
        resource_version: practitioner.version,
        occurred_at: practitioner.updated_at,
        also_links: Vec::new(),
        changed_fields: Some(changed),
    };
    let envelope = append(tx, &ctx.cause, event).await?;
    Ok((practitioner, envelope))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The schema's `anyOf` ([`CHANGEABLE_FIELDS`]) and the parser agree: each field alone is a
    /// change, `expectedVersion` alone is none; `displayName` and `active` refuse null.
    #[test]
    fn a_change_names_at_least_one_changeable_field() {
        assert_eq!(CHANGEABLE_FIELDS, ["displayName", "specialty", "active"]);
        for body in
            [json!({ "displayName": "Dr Who" }), json!({ "specialty": null }), json!({ "active": false })]
        {
            assert!(PractitionerChanges::try_from(body.clone()).is_ok(), "{body}");
        }
        let version_only = PractitionerChanges::try_from(json!({ "expectedVersion": 1 }));
        assert_eq!(version_only.unwrap_err().field, "body");
        for field in ["displayName", "active"] {
            let null = Value::Object([(field.to_string(), Value::Null)].into_iter().collect());
            assert_eq!(PractitionerChanges::try_from(null).unwrap_err().field, field, "null {field}");
        }
    }
}
