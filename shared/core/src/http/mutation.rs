//! The unit of work of a mutating request: one transaction holding the resource change, its event and
//! — when the request carries an `Idempotency-Key` — the key, so all of them commit or none does.
//!
//! Idempotency: a key is scoped to the workspace and bound to a fingerprint of the request (method,
//! path, canonical JSON body). A repeat with the same fingerprint answers the stored status with the
//! resource as it is now and writes nothing; a different fingerprint answers 422. Two concurrent
//! requests with one key serialise on the key's primary key: the loser rolls back its mutation and
//! answers as a repeat. The stored row holds ids only — never the response body — so no copy of health
//! data is kept outside the resource tables.

use axum::extract::{FromRequest, FromRequestParts, OriginalUri, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::auth::Caller;
use super::problem::ApiError;
use super::request::{JsonBody, RequestIds};
use super::routes::context;
use super::AppState;
use crate::appointments::{Access, Appointment, Cancel, Complete, NewAppointment, Reschedule};
use crate::context::Ctx;
use crate::db::{sql, Conn, Tx};
use crate::error::{DomainError, DomainResult};
use crate::events::ResourceType;
use crate::ids::AppointmentId;
use crate::patients::{NewPatient, Patient};
use crate::practitioners::{NewPractitioner, Practitioner};
use crate::{appointments, patients, practitioners};

const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// A resource a mutation produced, answered as JSON.
#[derive(Debug)]
pub enum Resource {
    Patient(Patient),
    Practitioner(Practitioner),
    Appointment(Appointment),
}

impl Resource {
    fn reference(&self) -> (ResourceType, uuid::Uuid) {
        match self {
            Resource::Patient(p) => (ResourceType::Patient, p.id.uuid()),
            Resource::Practitioner(p) => (ResourceType::Practitioner, p.id.uuid()),
            Resource::Appointment(a) => (ResourceType::Appointment, a.id.uuid()),
        }
    }

    fn respond(self, status: StatusCode) -> Response {
        match self {
            Resource::Patient(p) => (status, Json(p)).into_response(),
            Resource::Practitioner(p) => (status, Json(p)).into_response(),
            Resource::Appointment(a) => (status, Json(a)).into_response(),
        }
    }
}

struct StoredKey {
    request_hash: String,
    status: i16,
    resource_type: String,
    resource_id: uuid::Uuid,
}

/// An open unit of work.
pub struct UnitOfWork<'c> {
    tx: Tx<'c>,
    key: Option<(String, String)>,
    caller: Caller,
}

/// What [`UnitOfWork::begin`] found.
pub enum Begun<'c> {
    /// Go ahead: make the change on [`UnitOfWork::tx`], then [`UnitOfWork::finish`].
    Fresh(UnitOfWork<'c>),
    /// The same request was already served: this is its answer.
    Replayed(Response),
}

/// Hex SHA-256 of the request's method, path and canonical JSON body.
pub fn fingerprint(method: &str, path: &str, body: &serde_json::Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update(method.as_bytes());
    hasher.update(b" ");
    hasher.update(path.as_bytes());
    hasher.update(b"\n");
    hasher.update(body.to_string().as_bytes());
    hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_HEADER) else {
        return Ok(None);
    };
    let key = value.to_str().map_err(|_| ApiError::BadIdempotencyKey)?;
    let valid = (1..=255).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic());
    if valid {
        Ok(Some(key.to_owned()))
    } else {
        Err(ApiError::BadIdempotencyKey)
    }
}

async fn find_key(
    client: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    key: &str,
) -> Result<Option<StoredKey>, tokio_postgres::Error> {
    let row = sql::query_opt(
        client,
        "SELECT request_hash, response_status, resource_type, resource_id FROM idempotency_keys \
         WHERE workspace_id = $1 AND key = $2",
        &[&caller.workspace_id, &key],
    )
    .await?;
    Ok(row.map(|row| StoredKey {
        request_hash: row.get(0),
        status: row.get(1),
        resource_type: row.get(2),
        resource_id: row.get(3),
    }))
}

impl<'c> UnitOfWork<'c> {
    /// Opens the transaction, or answers a repeat of an already served request.
    pub async fn begin(
        conn: &'c mut Conn,
        caller: Caller,
        headers: &HeaderMap,
        fingerprint: String,
    ) -> Result<Begun<'c>, ApiError> {
        let key = idempotency_key(headers)?;
        if let Some(key) = &key {
            if let Some(stored) = find_key(&*conn, &caller, key).await? {
                return replay(conn, &caller, &fingerprint, stored).await.map(Begun::Replayed);
            }
        }
        let tx = conn.transaction().await?;
        Ok(Begun::Fresh(UnitOfWork { tx, key: key.map(|key| (key, fingerprint)), caller }))
    }

    pub fn tx(&self) -> &Tx<'c> {
        &self.tx
    }

    /// Stores the idempotency key (if any) and commits; answers `status` with the resource.
    pub async fn finish(
        self,
        state: &AppState,
        status: StatusCode,
        resource: Resource,
    ) -> Result<Response, ApiError> {
        let Some((key, fingerprint)) = self.key else {
            self.tx.commit().await?;
            return Ok(resource.respond(status));
        };
        let (resource_type, resource_id) = resource.reference();
        let inserted = sql::execute(
            &self.tx,
            "INSERT INTO idempotency_keys (workspace_id, key, request_hash, response_status, \
             resource_type, resource_id) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                &self.caller.workspace_id,
                &key,
                &fingerprint,
                &(status.as_u16() as i16),
                &resource_type.as_str(),
                &resource_id,
            ],
        )
        .await?;
        if inserted == 1 {
            self.tx.commit().await?;
            return Ok(resource.respond(status));
        }
        // A concurrent request with the same key committed first: ours never happened.
        let caller = self.caller;
        self.tx.rollback().await?;
        let mut conn = state.pool.get().await?;
        let stored = find_key(&conn, &caller, &key).await?.ok_or(DomainError::NotFound)?;
        replay(&mut conn, &caller, &fingerprint, stored).await
    }
}

async fn replay(
    conn: &mut Conn,
    caller: &Caller,
    fingerprint: &str,
    stored: StoredKey,
) -> Result<Response, ApiError> {
    if stored.request_hash != fingerprint {
        return Err(ApiError::IdempotencyMismatch);
    }
    let status = StatusCode::from_u16(stored.status as u16).unwrap_or(StatusCode::OK);
    let client = &*conn;
    let resource = match ResourceType::parse(&stored.resource_type) {
        Some(ResourceType::Patient) => {
            let id = crate::ids::PatientId::from_uuid(stored.resource_id);
            patients::repo::find(client, caller.workspace_id, id).await?.map(Resource::Patient)
        }
        Some(ResourceType::Practitioner) => {
            let id = crate::ids::PractitionerId::from_uuid(stored.resource_id);
            practitioners::repo::find(client, caller.workspace_id, id).await?.map(Resource::Practitioner)
        }
        Some(ResourceType::Appointment) => {
            let id = crate::ids::AppointmentId::from_uuid(stored.resource_id);
            let appointment = appointments::repo::find(client, caller.workspace_id, id).await?;
            if let (Some(appointment), Some(patient)) = (&appointment, caller.patient()) {
                Access::OwnAppointmentsOf(patient).check(appointment)?;
            }
            appointment.map(Resource::Appointment)
        }
        None => None,
    };
    Ok(resource.ok_or(DomainError::NotFound)?.respond(status))
}

/// Every POST mutation, parsed and ready to apply.
#[derive(Debug)]
pub enum PostMutation {
    CreatePatient(NewPatient),
    CreatePractitioner(NewPractitioner),
    BookAppointment(NewAppointment),
    Reschedule(AppointmentId, Reschedule),
    Cancel(AppointmentId, Cancel),
    Complete(AppointmentId, Complete),
}

async fn apply(
    tx: &Tx<'_>,
    ctx: &Ctx,
    caller: &Caller,
    mutation: PostMutation,
) -> DomainResult<(StatusCode, Resource)> {
    let created = |resource| (StatusCode::CREATED, resource);
    let changed = |(appointment, _)| (StatusCode::OK, Resource::Appointment(appointment));
    Ok(match mutation {
        PostMutation::CreatePatient(command) => {
            created(Resource::Patient(patients::create(tx, ctx, command).await?.0))
        }
        PostMutation::CreatePractitioner(command) => {
            created(Resource::Practitioner(practitioners::create(tx, ctx, command).await?.0))
        }
        PostMutation::BookAppointment(command) => {
            created(Resource::Appointment(appointments::book(tx, ctx, command).await?.0))
        }
        PostMutation::Reschedule(id, command) => {
            changed(appointments::reschedule(tx, ctx, id, command).await?)
        }
        PostMutation::Cancel(id, command) => {
            let access = caller.patient().map_or(Access::Workspace, Access::OwnAppointmentsOf);
            changed(appointments::cancel(tx, ctx, access, id, command).await?)
        }
        PostMutation::Complete(id, command) => changed(appointments::complete(tx, ctx, id, command).await?),
    })
}

/// A POST request with its caller, ids, headers and JSON body: handlers parse the body into a
/// [`PostMutation`] and [`PostRequest::perform`] runs it in a unit of work.
pub struct PostRequest {
    pub state: AppState,
    pub caller: Caller,
    pub body: Value,
    ids: RequestIds,
    path: String,
    headers: HeaderMap,
}

impl FromRequest<AppState> for PostRequest {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = request.into_parts();
        let caller = Caller::from_request_parts(&mut parts, state).await?;
        let ids = RequestIds::from_request_parts(&mut parts, state).await?;
        let path = parts
            .extensions
            .get::<OriginalUri>()
            .map_or_else(|| parts.uri.path().to_owned(), |uri| uri.0.path().to_owned());
        let headers = parts.headers.clone();
        let body = JsonBody::from_request(Request::from_parts(parts, body), state).await?.value;
        Ok(Self { state: state.clone(), caller, body, ids, path, headers })
    }
}

impl PostRequest {
    /// Applies `mutation` in one transaction with the request's idempotency key, or replays the
    /// answer of an earlier identical request.
    pub async fn perform(self, mutation: PostMutation) -> Result<Response, ApiError> {
        let print = fingerprint("POST", &self.path, &self.body);
        let mut conn = self.state.pool.get().await?;
        let uow = match UnitOfWork::begin(&mut conn, self.caller, &self.headers, print).await? {
            Begun::Fresh(uow) => uow,
            Begun::Replayed(response) => return Ok(response),
        };
        let (status, resource) =
            apply(uow.tx(), &context(&self.caller, &self.ids), &self.caller, mutation).await?;
        uow.finish(&self.state, status, resource).await
    }
}
