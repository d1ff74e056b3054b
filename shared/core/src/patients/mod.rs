//! Patients: the resource, the commands that change it, and their use cases.
//!
//! Use cases take the caller's transaction and never commit: the caller (an HTTP request or a
//! listener) owns the unit of work, so the resource change, its event and anything the caller adds
//! (an idempotency key, a listener receipt) commit together or not at all.
//!
//! Erasure (DESIGN.md §6a): deleting a patient erases it in the same transaction — the row keeps its
//! id, version and times but loses names, email, phone and date of birth, and every appointment of the
//! patient loses its free-text reasons ([`repo::mark_deleted`]). The patient then answers 404, like a
//! missing one (not 410: a 410 would tell a caller which ids once existed); its timeline stays
//! readable. Request fingerprints in `idempotency_keys` are one-way hashes and expire with the
//! idempotency retention (docs/retention.md); they are kept so a late retry answers 404 instead of
//! re-creating the erased person.

pub mod repo;
pub mod search;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::context::Ctx;
use crate::db::Tx;
use crate::disclosures::{self, routes as disclosure_routes, Purpose};
use crate::domain::contact::{parse_set, Channel, MessageKind, MAX_SET_ITEMS};
use crate::domain::input::{FieldError, Fields};
use crate::domain::schema::{at_least_one_of, ExpectedVersion};
use crate::domain::values::{parse_date_of_birth, DateOfBirth, Email, Name, Phone};
use crate::error::{DomainError, DomainResult};
use crate::events::changed_fields;
use crate::events::store::{append, NewEvent};
use crate::events::{Envelope, EventType};
use crate::ids::{PatientId, WorkspaceId};
use crate::workspaces::TimeZone;

/// A patient as stored and as answered. Names and contact details are health data: this type is
/// never logged and never put into an event.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Patient {
    pub id: PatientId,
    pub workspace_id: WorkspaceId,
    pub given_name: String,
    pub family_name: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub date_of_birth: Option<NaiveDate>,
    #[schemars(range(min = 1))]
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    // Contact preferences (DESIGN §5e): not personal free text, a closed vocabulary and a zone name.
    /// The channels the patient consented to (an empty list: no consent, nothing is sent).
    pub contact_channels: Vec<Channel>,
    /// The kinds of message the patient opted out of (change_notice = reschedule or cancellation notice).
    pub contact_opt_outs: Vec<MessageKind>,
    /// The patient's IANA time zone; null: the workspace's. Quiet hours are read in this zone.
    pub time_zone: Option<String>,
}

/// The fields of a patient the patient may change themselves (with their own token).
pub const CONTACT_PREFERENCE_FIELDS: &[&str] = &["contactChannels", "contactOptOuts", "timeZone"];

/// `POST /v1/patients`, parsed. Its schema is the body [`NewPatient::try_from`] reads.
#[derive(Debug, Clone, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewPatient {
    /// Not blank (at least one character that is not white space), no NUL, at most 200 characters.
    given_name: Name,
    /// Not blank (at least one character that is not white space), no NUL, at most 200 characters.
    family_name: Name,
    email: Option<Email>,
    phone: Option<Phone>,
    #[schemars(with = "Option<DateOfBirth>")]
    date_of_birth: Option<NaiveDate>,
}

impl TryFrom<Value> for NewPatient {
    type Error = FieldError;

    fn try_from(body: Value) -> Result<Self, FieldError> {
        let mut fields = Fields::new(body)?;
        let given_name = Name::parse("givenName", fields.required_str("givenName")?)?;
        let family_name = Name::parse("familyName", fields.required_str("familyName")?)?;
        let email = fields.optional_str("email")?.map(|raw| Email::parse("email", raw)).transpose()?;
        let phone = fields.optional_str("phone")?.map(|raw| Phone::parse("phone", raw)).transpose()?;
        let date_of_birth = fields
            .optional_str("dateOfBirth")?
            .map(|raw| parse_date_of_birth("dateOfBirth", &raw))
            .transpose()?;
        fields.finish()?;
        Ok(Self { given_name, family_name, email, phone, date_of_birth })
    }
}

/// `PATCH /v1/patients/{id}`, parsed: any subset of fields; `null` clears an optional one. Its schema
/// is the body [`PatientChanges::try_from`] reads:
/// - a field that can be cleared is an `Option<Option<_>>`: absent, null (clear) or a value;
/// - a field that cannot (null is refused) is read `with` its value's schema and `default`: absent or
///   a value (`skip_serializing_if` only keeps `schemars` from publishing `null` as its default);
/// - at least one of [`CHANGEABLE_FIELDS`] is present (the schema's `anyOf`).
#[derive(Debug, Clone, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = at_least_one_change)]
pub struct PatientChanges {
    /// Not blank (at least one character that is not white space), no NUL, at most 200 characters. Cannot be cleared (null is refused).
    #[schemars(with = "Name")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    given_name: Option<Name>,
    /// Not blank (at least one character that is not white space), no NUL, at most 200 characters. Cannot be cleared (null is refused).
    #[schemars(with = "Name")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    family_name: Option<Name>,
    email: Option<Option<Email>>,
    phone: Option<Option<Phone>>,
    #[schemars(with = "Option<DateOfBirth>")]
    date_of_birth: Option<Option<NaiveDate>>,
    /// The channels the patient consented to (an empty list: no consent, nothing is sent). Duplicates are ignored; null is refused (an empty list clears it). A patient's own token may change only contactChannels, contactOptOuts and timeZone (any other field answers 403).
    #[schemars(with = "Vec<Channel>", length(max = MAX_SET_ITEMS))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contact_channels: Option<Vec<Channel>>,
    /// The kinds of message the patient opted out of (change_notice = reschedule or cancellation notice). Duplicates are ignored; null is refused (an empty list clears it). A patient's own token may change only contactChannels, contactOptOuts and timeZone (any other field answers 403).
    #[schemars(with = "Vec<MessageKind>", length(max = MAX_SET_ITEMS))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    contact_opt_outs: Option<Vec<MessageKind>>,
    /// The patient's IANA time zone (Europe/Lisbon); null falls back to the workspace's. Quiet hours are read in this zone. A patient's own token may change only contactChannels, contactOptOuts and timeZone (any other field answers 403).
    time_zone: Option<Option<TimeZone>>,
    #[schemars(with = "Option<ExpectedVersion>")]
    expected_version: Option<i32>,
}

/// The fields a patient's change must name at least one of (`expectedVersion` alone changes
/// nothing): the fields a `patient.updated` event may name.
pub const CHANGEABLE_FIELDS: &[&str] = EventType::PatientUpdated.changeable_fields();

/// [`PatientChanges`]' schema names at least one of [`CHANGEABLE_FIELDS`], as its parser requires.
fn at_least_one_change(schema: &mut schemars::Schema) {
    at_least_one_of(schema, CHANGEABLE_FIELDS);
}

impl TryFrom<Value> for PatientChanges {
    type Error = FieldError;

    fn try_from(body: Value) -> Result<Self, FieldError> {
        let mut fields = Fields::new(body)?;
        let required_name = |field: &str, value: Option<Option<String>>| match value {
            None => Ok(None),
            Some(None) => Err(FieldError::new(field, "cannot be cleared")),
            Some(Some(raw)) => Name::parse(field, raw).map(Some),
        };
        let given_name = required_name("givenName", fields.patch_str("givenName")?)?;
        let family_name = required_name("familyName", fields.patch_str("familyName")?)?;
        let email = fields
            .patch_str("email")?
            .map(|value| value.map(|raw| Email::parse("email", raw)).transpose())
            .transpose()?;
        let phone = fields
            .patch_str("phone")?
            .map(|value| value.map(|raw| Phone::parse("phone", raw)).transpose())
            .transpose()?;
        let date_of_birth = fields
            .patch_str("dateOfBirth")?
            .map(|value| value.map(|raw| parse_date_of_birth("dateOfBirth", &raw)).transpose())
            .transpose()?;
        let contact_channels = fields
            .take("contactChannels")
            .map(|value| parse_set("contactChannels", value, Channel::parse, "\"email\" and \"sms\""))
            .transpose()?;
        let contact_opt_outs = fields
            .take("contactOptOuts")
            .map(|value| {
                let expected = "\"booking_confirmation\", \"change_notice\" and \"reminder\"";
                parse_set("contactOptOuts", value, MessageKind::parse, expected)
            })
            .transpose()?;
        let time_zone = fields
            .patch_str("timeZone")?
            .map(|value| value.map(|raw| TimeZone::parse("timeZone", &raw)).transpose())
            .transpose()?;
        let expected_version = fields.optional_version("expectedVersion")?;
        fields.finish()?;
        let changes = Self {
            given_name,
            family_name,
            email,
            phone,
            date_of_birth,
            contact_channels,
            contact_opt_outs,
            time_zone,
            expected_version,
        };
        if changes.is_empty() {
            return Err(FieldError::new("body", "must change at least one field"));
        }
        Ok(changes)
    }
}

impl PatientChanges {
    fn is_empty(&self) -> bool {
        self.given_name.is_none()
            && self.family_name.is_none()
            && self.email.is_none()
            && self.phone.is_none()
            && self.date_of_birth.is_none()
            && self.contact_channels.is_none()
            && self.contact_opt_outs.is_none()
            && self.time_zone.is_none()
    }

    /// True when only contact preferences change (what a patient may change with their own token).
    pub fn only_contact_preferences(&self) -> bool {
        self.given_name.is_none()
            && self.family_name.is_none()
            && self.email.is_none()
            && self.phone.is_none()
            && self.date_of_birth.is_none()
    }

    fn apply_to(self, patient: &mut Patient) {
        if let Some(name) = self.given_name {
            patient.given_name = name.into_string();
        }
        if let Some(name) = self.family_name {
            patient.family_name = name.into_string();
        }
        if let Some(email) = self.email {
            patient.email = email.map(|e| e.as_str().to_owned());
        }
        if let Some(phone) = self.phone {
            patient.phone = phone.map(|p| p.as_str().to_owned());
        }
        if let Some(date_of_birth) = self.date_of_birth {
            patient.date_of_birth = date_of_birth;
        }
        if let Some(channels) = self.contact_channels {
            patient.contact_channels = channels;
        }
        if let Some(opt_outs) = self.contact_opt_outs {
            patient.contact_opt_outs = opt_outs;
        }
        if let Some(zone) = self.time_zone {
            patient.time_zone = zone.map(|zone| zone.as_str().to_owned());
        }
    }
}

/// Fails with `VersionMismatch` when the caller expected another version.
pub fn check_version(expected: Option<i32>, actual: i32) -> DomainResult<()> {
    match expected {
        Some(expected) if expected != actual => Err(DomainError::VersionMismatch { expected, actual }),
        _ => Ok(()),
    }
}

pub async fn create(tx: &Tx<'_>, ctx: &Ctx, command: NewPatient) -> DomainResult<(Patient, Envelope)> {
    let now = crate::domain::values::now();
    let patient = Patient {
        id: PatientId::generate(),
        workspace_id: ctx.workspace_id,
        given_name: command.given_name.into_string(),
        family_name: command.family_name.into_string(),
        email: command.email.map(|e| e.as_str().to_owned()),
        phone: command.phone.map(|p| p.as_str().to_owned()),
        date_of_birth: command.date_of_birth,
        version: 1,
        created_at: now,
        updated_at: now,
        contact_channels: Channel::ALL.to_vec(),
        contact_opt_outs: Vec::new(),
        time_zone: None,
    };
    repo::insert(tx, &patient).await?;
    let event = append(tx, &ctx.cause, patient_event(EventType::PatientCreated, &patient)).await?;
    Ok((patient, event))
}

pub async fn update(
    tx: &Tx<'_>,
    ctx: &Ctx,
    id: PatientId,
    changes: PatientChanges,
) -> DomainResult<(Patient, Envelope)> {
    let mut patient = repo::lock(tx, ctx.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    check_version(changes.expected_version, patient.version)?;
    let before = patient.clone();
    changes.apply_to(&mut patient);
    let changed = changed_fields(&[
        ("givenName", before.given_name != patient.given_name),
        ("familyName", before.family_name != patient.family_name),
        ("email", before.email != patient.email),
        ("phone", before.phone != patient.phone),
        ("dateOfBirth", before.date_of_birth != patient.date_of_birth),
        ("contactChannels", before.contact_channels != patient.contact_channels),
        ("contactOptOuts", before.contact_opt_outs != patient.contact_opt_outs),
        ("timeZone", before.time_zone != patient.time_zone),
    ]);
    patient.version += 1;
    patient.updated_at = crate::domain::values::now();
    repo::update(tx, &patient).await?;
    // The answer carries every personal field, not only the changed ones: a disclosure.
    let purpose = Purpose::route(disclosure_routes::PATCH_PATIENT);
    disclosures::record(tx, ctx.workspace_id, &ctx.cause.actor, &[patient.id], purpose).await?;
    let mut event = patient_event(EventType::PatientUpdated, &patient);
    event.changed_fields = Some(changed);
    let event = append(tx, &ctx.cause, event).await?;
    Ok((patient, event))
}

/// An opt-out the patient made outside the API: a STOP reply the SMS provider reports (the channel),
/// or an email's one-click unsubscribe (the kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptOut {
    Channel(Channel),
    Kind(MessageKind),
}

impl OptOut {
    /// The preference change itself, pure (the contact policy's property test runs it too):
    /// removes the channel from `channels` or adds the kind to `opt_outs` (kept canonical); the name
    /// of the changed field, or `None` when it was already so.
    pub fn apply(self, channels: &mut Vec<Channel>, opt_outs: &mut Vec<MessageKind>) -> Option<&'static str> {
        match self {
            OptOut::Channel(channel) => {
                let before = channels.len();
                channels.retain(|kept| *kept != channel);
                (channels.len() != before).then_some("contactChannels")
            }
            OptOut::Kind(kind) => {
                if opt_outs.contains(&kind) {
                    return None;
                }
                opt_outs.push(kind);
                opt_outs.sort_unstable();
                Some("contactOptOuts")
            }
        }
    }
}

/// Records `opt_out` on the patient at once: one `patient.updated` event naming the changed field
/// (`contactChannels` or `contactOptOuts`), with the context's actor (the patient). `None` when it
/// was already recorded (nothing written) — a repeated STOP or a second click is idempotent.
pub async fn record_opt_out(
    tx: &Tx<'_>,
    ctx: &Ctx,
    id: PatientId,
    opt_out: OptOut,
) -> DomainResult<Option<Envelope>> {
    let mut patient = repo::lock(tx, ctx.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    let Some(field) = opt_out.apply(&mut patient.contact_channels, &mut patient.contact_opt_outs) else {
        return Ok(None);
    };
    patient.version += 1;
    patient.updated_at = crate::domain::values::now();
    repo::update(tx, &patient).await?;
    let mut event = patient_event(EventType::PatientUpdated, &patient);
    event.changed_fields = Some(changed_fields(&[(field, true)]));
    Ok(Some(append(tx, &ctx.cause, event).await?))
}

/// The context of a change the patient made through a channel's own mechanism (not a request):
/// actor the patient, caused by `event` (the event whose message carried the opt-out).
pub fn patient_ctx(workspace_id: WorkspaceId, patient: PatientId, event: crate::ids::EventId) -> Ctx {
    Ctx {
        workspace_id,
        cause: crate::events::Cause {
            actor: crate::events::Actor::Patient { id: patient.ulid() },
            correlation_id: crate::ids::CorrelationId::generate(),
            causation_id: event.into(),
            idempotency_key: None,
            trace: None,
        },
    }
}

pub async fn delete(
    tx: &Tx<'_>,
    ctx: &Ctx,
    id: PatientId,
    expected_version: Option<i32>,
) -> DomainResult<Envelope> {
    let mut patient = repo::lock(tx, ctx.workspace_id, id).await?.ok_or(DomainError::NotFound)?;
    check_version(expected_version, patient.version)?;
    patient.version += 1;
    patient.updated_at = crate::domain::values::now();
    repo::mark_deleted(tx, &patient).await?;
    Ok(append(tx, &ctx.cause, patient_event(EventType::PatientDeleted, &patient)).await?)
}

fn patient_event(event_type: EventType, patient: &Patient) -> NewEvent {
    NewEvent {
        event_type,
        workspace_id: patient.workspace_id,
        resource_id: patient.id.ulid(),
        resource_version: patient.version,
        occurred_at: patient.updated_at,
        also_links: Vec::new(),
        changed_fields: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The schema's `anyOf` ([`CHANGEABLE_FIELDS`]) and the parser agree: each field alone is a
    /// change, `expectedVersion` alone is none.
    #[test]
    fn a_change_names_at_least_one_changeable_field() {
        let values =
            [json!("Ada"), json!("Lovelace"), json!(null), json!(null), json!(null), json!([]), json!([])];
        assert_eq!(CHANGEABLE_FIELDS.len(), values.len() + 1);
        for (field, value) in CHANGEABLE_FIELDS.iter().zip(values.into_iter().chain([json!(null)])) {
            let body = Value::Object([(field.to_string(), value)].into_iter().collect());
            assert!(PatientChanges::try_from(body).is_ok(), "{field}");
        }
        let version_only = PatientChanges::try_from(json!({ "expectedVersion": 1 }));
        assert_eq!(version_only.unwrap_err().field, "body");
        for field in ["givenName", "familyName", "contactChannels", "contactOptOuts"] {
            let null = Value::Object([(field.to_string(), Value::Null)].into_iter().collect());
            assert_eq!(PatientChanges::try_from(null).unwrap_err().field, field, "null {field}");
        }
    }
}
