//! Appointments: booking, rescheduling, cancelling and completing.
//!
//! Invariants:
//! - Only `booked` appointments can be rescheduled, cancelled or completed; `cancelled` and `completed`
//!   are final.
//! - A practitioner never holds two overlapping booked appointments: the database's exclusion
//!   constraint decides (back-to-back slots are allowed), and its violation answers `DoubleBooked`.
//! - Every mutation bumps `version` by exactly one and appends one event linking the appointment, its
//!   patient and its practitioner. Use cases take the caller's transaction and never commit.
//! - A booking holds its patient `FOR SHARE` until it commits and refuses a deleted patient; a
//!   deletion locks the patient `FOR UPDATE`, so the two serialise: either the booking commits first
//!   (and the deletion's listener cancels it) or it finds no live patient. No booked appointment of a
//!   deleted patient survives.
//! - A patient's access ([`Access::OwnAppointmentsOf`]) is part of the repository's query, so another
//!   patient's appointment is not found and never locked.
//! - Erasure is final (DESIGN.md §6c): once a patient's deletion committed, every appointment of the
//!   patient carries `patient_erased` (set by the erasure in the deletion's transaction, which waits
//!   for any change holding the row). Staff changes of such an appointment answer `PatientDeleted`
//!   (409) and write nothing; a patient token finds none of them (404, an empty schedule); only the
//!   deletion's listener cancels the future ones, without a reason. Migration V16's trigger refuses
//!   the rest in the database, and an erased patient's appointments block no slot.
//! - An inactive practitioner cannot be booked (`PractitionerInactive`, 409); the practitioner row is
//!   share-locked while the booking commits, so a concurrent deactivation cannot slip in between.

pub mod repo;
pub mod schedule;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::context::Ctx;
use crate::db::{sql, violated_constraint, Tx};
use crate::disclosures::{self, routes as disclosure_routes, Purpose};
use crate::domain::input::{FieldError, Fields};
use crate::domain::schema::{ApiUlid, ExpectedVersion};
use crate::domain::values::{Reason, TimeSlot};
use crate::error::{DomainError, DomainResult};
use crate::events::changed_fields;
use crate::events::store::{append, NewEvent};
use crate::events::{Envelope, EventType, ResourceType};
use crate::ids::{AppointmentId, PatientId, PractitionerId, WorkspaceId};
use crate::patients::check_version;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum AppointmentStatus {
    Booked,
    Cancelled,
    Completed,
}

impl AppointmentStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            AppointmentStatus::Booked => "booked",
            AppointmentStatus::Cancelled => "cancelled",
            AppointmentStatus::Completed => "completed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "booked" => Some(AppointmentStatus::Booked),
            "cancelled" => Some(AppointmentStatus::Cancelled),
            "completed" => Some(AppointmentStatus::Completed),
            _ => None,
        }
    }
}

/// An appointment as stored and answered. `reason` and `cancellation_reason` are health data.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Appointment {
    pub id: AppointmentId,
    pub workspace_id: WorkspaceId,
    pub patient_id: PatientId,
    pub practitioner_id: PractitionerId,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub status: AppointmentStatus,
    pub reason: Option<String>,
    pub cancellation_reason: Option<String>,
    pub version: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The patient was deleted: the appointment is final except for the listener's cancellation.
    /// Not answered (a deleted patient's appointment reads like any other, without reasons).
    #[serde(skip)]
    pub patient_erased: bool,
}

fn required_id<T: std::str::FromStr>(fields: &mut Fields, field: &str) -> Result<T, FieldError> {
    fields.required_str(field)?.parse().map_err(|_| FieldError::new(field, "must be a ULID (26 characters)"))
}

fn slot(fields: &mut Fields) -> Result<TimeSlot, FieldError> {
    let starts_at = fields.required_str("startsAt")?;
    let ends_at = fields.required_str("endsAt")?;
    TimeSlot::parse(&starts_at, &ends_at)
}

fn optional_reason(fields: &mut Fields) -> Result<Option<Reason>, FieldError> {
    fields.optional_str("reason")?.map(|raw| Reason::parse("reason", raw)).transpose()
}

/// `POST /v1/appointments`, parsed. Its schema is the body [`NewAppointment::try_from`] reads.
#[derive(Debug, Clone, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewAppointment {
    #[schemars(with = "ApiUlid")]
    patient_id: PatientId,
    #[schemars(with = "ApiUlid")]
    practitioner_id: PractitionerId,
    #[serde(flatten)]
    slot: TimeSlot,
    /// Health data (never logged or sent). When given: not blank, no NUL, at most 2000 characters.
    reason: Option<Reason>,
}

impl NewAppointment {
    pub fn new(
        patient_id: PatientId,
        practitioner_id: PractitionerId,
        slot: TimeSlot,
        reason: Option<Reason>,
    ) -> Self {
        Self { patient_id, practitioner_id, slot, reason }
    }
}

impl TryFrom<Value> for NewAppointment {
    type Error = FieldError;

    fn try_from(body: Value) -> Result<Self, FieldError> {
        let mut fields = Fields::new(body)?;
        let patient_id = required_id(&mut fields, "patientId")?;
        let practitioner_id = required_id(&mut fields, "practitionerId")?;
        let slot = slot(&mut fields)?;
        let reason = optional_reason(&mut fields)?;
        fields.finish()?;
        Ok(Self { patient_id, practitioner_id, slot, reason })
    }
}

/// `POST /v1/appointments/{id}/reschedule`, parsed. Its schema is the body it is read from.
#[derive(Debug, Clone, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reschedule {
    #[serde(flatten)]
    slot: TimeSlot,
    #[schemars(with = "Option<ExpectedVersion>")]
    expected_version: Option<i32>,
}

impl TryFrom<Value> for Reschedule {
    type Error = FieldError;

    fn try_from(body: Value) -> Result<Self, FieldError> {
        let mut fields = Fields::new(body)?;
        let slot = slot(&mut fields)?;
        let expected_version = fields.optional_version("expectedVersion")?;
        fields.finish()?;
        Ok(Self { slot, expected_version })
    }
}

/// `POST /v1/appointments/{id}/cancel`, parsed. Its schema is the body it is read from.
#[derive(Debug, Clone, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cancel {
    /// Health data (never logged or sent). When given: not blank, no NUL, at most 2000 characters.
    reason: Option<Reason>,
    #[schemars(with = "Option<ExpectedVersion>")]
    expected_version: Option<i32>,
}

impl TryFrom<Value> for Cancel {
    type Error = FieldError;

    fn try_from(body: Value) -> Result<Self, FieldError> {
        let mut fields = Fields::new(body)?;
        let reason = optional_reason(&mut fields)?;
        let expected_version = fields.optional_version("expectedVersion")?;
        fields.finish()?;
        Ok(Self { reason, expected_version })
    }
}

/// `POST /v1/appointments/{id}/complete`, parsed. Its schema is the body it is read from.
#[derive(Debug, Clone, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Complete {
    #[schemars(with = "Option<ExpectedVersion>")]
    expected_version: Option<i32>,
}

impl TryFrom<Value> for Complete {
    type Error = FieldError;

    fn try_from(body: Value) -> Result<Self, FieldError> {
        let mut fields = Fields::new(body)?;
        let expected_version = fields.optional_version("expectedVersion")?;
        fields.finish()?;
        Ok(Self { expected_version })
    }
}

/// Who may see and touch an appointment: staff every appointment of their workspace, a patient only
/// their own. The repository puts the patient into its queries, so another patient's appointment is
/// simply not found (404, like a missing id) and never locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Workspace,
    OwnAppointmentsOf(PatientId),
}

/// A refused write of an appointment: the double-booking constraint, or V16's erasure trigger.
fn map_write_error(error: tokio_postgres::Error) -> DomainError {
    match violated_constraint(&error) {
        Some("appointments_no_double_booking") => DomainError::DoubleBooked,
        Some(crate::db::PATIENT_ERASED) => DomainError::PatientDeleted,
        _ => DomainError::Db(error),
    }
}

/// Books in two round trips: the two reference checks go out together, then — only once both have
/// passed — the appointment and its event together. Each group is cached first
/// (`sql::pipeline`), so PostgreSQL runs it in the order written, as if each statement were
/// awaited before the next, and its results are read in that order: the first failure answers (a
/// missing patient before a missing practitioner; a double booking before anything the event's
/// statement could say).
pub async fn book(tx: &Tx<'_>, ctx: &Ctx, command: NewAppointment) -> DomainResult<(Appointment, Envelope)> {
    use crate::{events::store::APPEND_EVENT, patients, practitioners};
    // FOR SHARE: a concurrent deletion (which locks the patient FOR UPDATE) waits for this booking to
    // commit, so its listener sees and cancels the appointment; a deletion that committed first makes
    // this lock find no live patient.
    let (patient_live, practitioner) = sql::pipeline(
        tx,
        &[patients::repo::LOCK_SHARED, practitioners::repo::FIND_FOR_SHARE],
        (
            patients::repo::lock_shared(tx, ctx.workspace_id, command.patient_id),
            practitioners::repo::find_for_share(tx, ctx.workspace_id, command.practitioner_id),
        ),
    )
    .await?;
    if !patient_live? {
        return Err(FieldError::new("patientId", "no such patient").into());
    }
    match practitioner? {
        None => return Err(FieldError::new("practitionerId", "no such practitioner").into()),
        Some(practitioner) if !practitioner.active => return Err(DomainError::PractitionerInactive),
        Some(_) => {}
    }
    let now = crate::domain::values::now();
    let appointment = Appointment {
        id: AppointmentId::generate(),
        workspace_id: ctx.workspace_id,
        patient_id: command.patient_id,
        practitioner_id: command.practitioner_id,
        starts_at: command.slot.starts_at(),
        ends_at: command.slot.ends_at(),
        status: AppointmentStatus::Booked,
        reason: command.reason.map(Reason::into_string),
        cancellation_reason: None,
        version: 1,
        created_at: now,
        updated_at: now,
        patient_erased: false,
    };
    let event = appointment_event(EventType::AppointmentCreated, &appointment);
    let (inserted, appended) = sql::pipeline(
        tx,
        &[repo::INSERT, APPEND_EVENT],
        (repo::insert(tx, &appointment), append(tx, &ctx.cause, event)),
    )
    .await?;
    inserted.map_err(map_write_error)?;
    Ok((appointment, appended?))
}

/// Locks a booked appointment the caller may change, checking the expected version. An appointment
/// of a deleted patient is final (`PatientDeleted`), whatever its status.
async fn lock_for_change(
    tx: &Tx<'_>,
    ctx: &Ctx,
    access: Access,
    id: AppointmentId,
    expected_version: Option<i32>,
    action: &'static str,
) -> DomainResult<Appointment> {
    let appointment =
        repo::lock_visible(tx, ctx.workspace_id, access, id).await?.ok_or(DomainError::NotFound)?;
    if appointment.patient_erased {
        return Err(DomainError::PatientDeleted);
    }
    check_version(expected_version, appointment.version)?;
    if appointment.status != AppointmentStatus::Booked {
        return Err(DomainError::InvalidTransition { action, status: appointment.status.as_str() });
    }
    Ok(appointment)
}

async fn save(
    tx: &Tx<'_>,
    ctx: &Ctx,
    mut appointment: Appointment,
    event_type: EventType,
    changed: Option<Vec<&'static str>>,
) -> DomainResult<(Appointment, Envelope)> {
    appointment.version += 1;
    appointment.updated_at = crate::domain::values::now();
    repo::update(tx, &appointment).await.map_err(map_write_error)?;
    let mut event = appointment_event(event_type, &appointment);
    event.changed_fields = changed;
    let event = append(tx, &ctx.cause, event).await?;
    Ok((appointment, event))
}

pub async fn reschedule(
    tx: &Tx<'_>,
    ctx: &Ctx,
    id: AppointmentId,
    command: Reschedule,
) -> DomainResult<(Appointment, Envelope)> {
    let mut appointment =
        lock_for_change(tx, ctx, Access::Workspace, id, command.expected_version, "reschedule").await?;
    let fields = changed_fields(&[
        ("startsAt", appointment.starts_at != command.slot.starts_at()),
        ("endsAt", appointment.ends_at != command.slot.ends_at()),
    ]);
    appointment.starts_at = command.slot.starts_at();
    appointment.ends_at = command.slot.ends_at();
    let changed = save(tx, ctx, appointment, EventType::AppointmentRescheduled, Some(fields)).await?;
    disclose(tx, ctx, &changed.0, disclosure_routes::RESCHEDULE_APPOINTMENT).await?;
    Ok(changed)
}

/// Records that the answer of a change carries the appointment (with its reason, health data).
async fn disclose(
    tx: &Tx<'_>,
    ctx: &Ctx,
    appointment: &Appointment,
    route: &'static str,
) -> DomainResult<()> {
    let patients = [appointment.patient_id];
    Ok(disclosures::record(tx, ctx.workspace_id, &ctx.cause.actor, &patients, Purpose::route(route)).await?)
}

pub async fn cancel(
    tx: &Tx<'_>,
    ctx: &Ctx,
    access: Access,
    id: AppointmentId,
    command: Cancel,
) -> DomainResult<(Appointment, Envelope)> {
    let mut appointment = lock_for_change(tx, ctx, access, id, command.expected_version, "cancel").await?;
    appointment.status = AppointmentStatus::Cancelled;
    appointment.cancellation_reason = command.reason.map(Reason::into_string);
    let changed = save(tx, ctx, appointment, EventType::AppointmentCancelled, None).await?;
    disclose(tx, ctx, &changed.0, disclosure_routes::CANCEL_APPOINTMENT).await?;
    Ok(changed)
}

pub async fn complete(
    tx: &Tx<'_>,
    ctx: &Ctx,
    id: AppointmentId,
    command: Complete,
) -> DomainResult<(Appointment, Envelope)> {
    let mut appointment =
        lock_for_change(tx, ctx, Access::Workspace, id, command.expected_version, "complete").await?;
    appointment.status = AppointmentStatus::Completed;
    let changed = save(tx, ctx, appointment, EventType::AppointmentCompleted, None).await?;
    disclose(tx, ctx, &changed.0, disclosure_routes::COMPLETE_APPOINTMENT).await?;
    Ok(changed)
}

/// Cancels every booked appointment of `patient_id` that starts after `after`, each as a normal
/// mutation with its own `appointment.cancelled` event under `ctx`'s cause. Returns the events.
pub async fn cancel_future_of_patient(
    tx: &Tx<'_>,
    ctx: &Ctx,
    patient_id: PatientId,
    after: DateTime<Utc>,
) -> DomainResult<Vec<Envelope>> {
    let mut events = Vec::new();
    for mut appointment in repo::lock_booked_of_patient_after(tx, ctx.workspace_id, patient_id, after).await?
    {
        appointment.status = AppointmentStatus::Cancelled;
        let (_, event) = save(tx, ctx, appointment, EventType::AppointmentCancelled, None).await?;
        events.push(event);
    }
    Ok(events)
}

/// The event of an appointment mutation: linked to the appointment, its patient and its practitioner.
pub fn appointment_event(event_type: EventType, appointment: &Appointment) -> NewEvent {
    NewEvent {
        event_type,
        workspace_id: appointment.workspace_id,
        resource_id: appointment.id.ulid(),
        resource_version: appointment.version,
        occurred_at: appointment.updated_at,
        also_links: vec![
            (ResourceType::Patient, appointment.patient_id.ulid()),
            (ResourceType::Practitioner, appointment.practitioner_id.ulid()),
        ],
        changed_fields: None,
    }
}
