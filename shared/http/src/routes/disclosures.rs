//! `GET /v1/patients/{id}/disclosures`: the accounting of disclosures of one patient (admin only),
//! newest first, with the sealed keyset cursor of `http::cursor`. Ids and codes only.
//!
//! A patient that never existed in the caller's workspace answers 404; a deleted (erased) patient
//! keeps its accounting and stays listable.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Response;

use super::path_id;
use crate::auth::Caller;
use crate::cursor::PageRequest;
use crate::document::{params, problems, schemas};
use crate::problem::ApiError;
use crate::AppState;
use clinic_core::db::sql;
use clinic_core::error::DomainError;
use clinic_core::ids::{DisclosureId, PatientId};

/// Any patient row of the workspace, deleted or not.
const PATIENT_EVER_EXISTED: &str = "SELECT 1 FROM patients WHERE workspace_id = $1 AND id = $2";

#[utoipa::path(
    get,
    path = "/v1/patients/{id}/disclosures",
    operation_id = "patientDisclosures",
    summary = "A patient's accounting of disclosures (admin), newest first",
    description = "Every read of the patient's personal fields: API reads and answers that carry them, and listener reloads. Ids and codes only. A deleted (erased) patient keeps its accounting.",
    params(params::PathId, params::Limit, params::Cursor, params::CorrelationId),
    responses(
        (status = 200, description = "OK", body = schemas::DisclosureList),
        problems::BadRequest, problems::Unauthorized, problems::Forbidden, problems::NotFound,
        problems::Unavailable
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let patient_id: PatientId = path_id(&id)?;
    let page = PageRequest::parse(&query)?;
    let scope = format!("disclosures:{}:{}", caller.workspace_id, patient_id);
    let after = page.after::<ulid::Ulid>(&state.api.cursor_key, &scope)?.map(DisclosureId::from_ulid);
    let conn = state.pool.get().await?;
    if sql::query_opt(&conn, PATIENT_EVER_EXISTED, &[&caller.workspace_id, &patient_id]).await?.is_none() {
        return Err(DomainError::NotFound.into());
    }
    let items =
        clinic_core::disclosures::list(&conn, caller.workspace_id, patient_id, after, page.limit).await?;
    Ok(page.answer(&state.api.cursor_key, &scope, &items, |item| item.id.ulid()))
}
