//! Small factories that write through the real use cases (so every row has its event), for tests that
//! start below the HTTP layer.

use chrono::Utc;
use clinic_core::appointments::{self, NewAppointment};
use clinic_core::context::Ctx;
use clinic_core::domain::values::TimeSlot;
use clinic_core::events::{Actor, Cause, Envelope};
use clinic_core::ids::{CorrelationId, RequestId, WorkspaceId};
use clinic_core::{patients, practitioners, workspaces};
use serde_json::json;

use crate::TestDb;

/// A use-case context for `workspace` with the system actor and fresh causal ids.
pub fn system_ctx(workspace_id: WorkspaceId) -> Ctx {
    Ctx {
        workspace_id,
        cause: Cause {
            actor: Actor::System,
            correlation_id: CorrelationId::generate(),
            causation_id: RequestId::generate().into(),
            idempotency_key: None,
            trace: None,
        },
    }
}

/// The personal text `booked_appointments` stores: a patient's names and a practitioner's display
/// name. Scan queue bodies, logs and records for each; none may carry it.
pub const PLANTED_TEXT: [&str; 3] = ["Grace", "Hopper", "Dr. Strange"];

/// A new workspace with one patient, one practitioner and `count` booked appointments starting 24 h,
/// 25 h, … from now; returns their `appointment.created` events (committed, pending in the outbox).
pub async fn booked_appointments(db: &TestDb, count: usize) -> Vec<Envelope> {
    let workspace = WorkspaceId::generate();
    let mut client = db.client().await;
    workspaces::insert_workspace(&client, workspace, "Test clinic").await.expect("workspace");
    let ctx = system_ctx(workspace);
    let tx = client.transaction().await.expect("transaction");
    let patient =
        json!({"givenName": PLANTED_TEXT[0], "familyName": PLANTED_TEXT[1]}).try_into().expect("patient");
    let (patient, _) = patients::create(&tx, &ctx, patient).await.expect("patient");
    let practitioner = json!({"displayName": PLANTED_TEXT[2]}).try_into().expect("practitioner");
    let (practitioner, _) = practitioners::create(&tx, &ctx, practitioner).await.expect("practitioner");
    let mut events = Vec::with_capacity(count);
    for hour in 0..count {
        let starts_at = Utc::now() + chrono::Duration::hours(24 + hour as i64);
        let slot = TimeSlot::new(starts_at, starts_at + chrono::Duration::minutes(30)).expect("slot");
        let command = NewAppointment::new(patient.id, practitioner.id, slot, None);
        events.push(appointments::book(&tx, &ctx, command).await.expect("booking").1);
    }
    tx.commit().await.expect("commit");
    events
}
