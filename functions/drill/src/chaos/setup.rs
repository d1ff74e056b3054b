//! Setting a run up on its private cluster: schema, workspace and admin token, the API in this
//! process, and the planted fixtures (a practitioner and a patient of the run's own, and the booking
//! whose confirmation fails permanently).

use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use clinic_core::db::{connect_pool, connect_single};
use clinic_core::events::EventType;
use clinic_core::ids::{EventId, MemberId, PatientId, PractitionerId, WorkspaceId};
use clinic_http::auth::{issue_token, Role};
use clinic_http::ApiConfig;
use clinic_http::{router, AppState};
use serde_json::json;

use super::rng::Rng;
use super::writers::Run;

/// Everything the run set up.
pub struct Setup {
    pub workspace: WorkspaceId,
    /// The API pool (`clinic_app`, with the run's lock timeout).
    pub pool: deadpool_postgres::Pool,
    /// `clinic_app` with the run's lock timeout: the API, the listeners and the dispatcher child.
    pub app_url: String,
    pub run: Arc<Run>,
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
    pub planted_patient: PatientId,
    pub planted_practitioner: PractitionerId,
    /// The event whose booking confirmation fails permanently.
    pub planted_event: EventId,
}

/// `url` with the session options of a listener in this run: role `clinic_app` and `lock_timeout`.
pub fn listener_url(url: &str, lock_timeout_ms: u64) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-c%20role%3Dclinic_app%20-c%20lock_timeout%3D{lock_timeout_ms}")
}

pub async fn set_up(url: &str, lock_timeout_ms: u64, rng: &mut Rng) -> anyhow::Result<Setup> {
    clinic::commands::migrate::apply(url).await?;
    let owner_pool = connect_pool(url, 1, None)?;
    let owner = owner_pool.get().await?;
    let workspace = WorkspaceId::generate();
    let admin = MemberId::generate();
    clinic_core::workspaces::insert_workspace(&owner, workspace, "Chaos Clinic").await?;
    clinic_core::workspaces::insert_member(&owner, admin, workspace, "admin", "Chaos Admin").await?;
    drop(owner);
    owner_pool.close();

    let secret = format!("{}{}", ulid::Ulid::generate(), ulid::Ulid::generate());
    let token =
        issue_token(secret.as_bytes(), workspace, admin.ulid(), Role::Admin, Duration::from_secs(86_400))?;
    let app_url = listener_url(url, lock_timeout_ms);
    let pool = connect_pool(&app_url, 16, None)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let state = AppState {
        pool: pool.clone(),
        api: ApiConfig::local(
            &clinic::settings::current().api,
            &clinic::settings::current().local_keys,
            &secret,
            clinic_core::webhooks::secret_box::WebhookKey::generate(),
        )?,
    };
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await });
    let run = Arc::new(Run::new(address, &token)?);

    // (d) The planted failure: the first booking's confirmation fails permanently.
    let mut connection = None;
    let practitioner = run
        .mutate(
            &mut connection,
            "/v1/practitioners",
            json!({"displayName": "Dr. Planted"}),
            EventType::PractitionerCreated,
            rng,
        )
        .await
        .ok_or_else(|| anyhow!("could not create the planted practitioner"))?;
    let patient = run
        .mutate(
            &mut connection,
            "/v1/patients",
            json!({"givenName": "Planted", "familyName": "Failure"}),
            EventType::PatientCreated,
            rng,
        )
        .await
        .ok_or_else(|| anyhow!("could not create the planted patient"))?;
    let booking = json!({"patientId": patient["id"], "practitionerId": practitioner["id"],
        "startsAt": "2039-01-01T09:00:00Z", "endsAt": "2039-01-01T09:30:00Z"});
    let appointment = run
        .mutate(&mut connection, "/v1/appointments", booking, EventType::AppointmentCreated, rng)
        .await
        .ok_or_else(|| anyhow!("could not book the planted appointment"))?;
    let checker = connect_single(url, None, None).await?;
    let appointment_id: ulid::Ulid = appointment["id"].as_str().unwrap_or_default().parse()?;
    let planted_event: uuid::Uuid = checker
        .query_one(
            "SELECT id FROM events WHERE type = 'appointment.created' AND resource_id = $1",
            &[&uuid::Uuid::from(appointment_id)],
        )
        .await?
        .get(0);
    let id = |value: &serde_json::Value| value["id"].as_str().unwrap_or_default().to_owned();
    Ok(Setup {
        workspace,
        pool,
        app_url,
        run,
        server,
        planted_patient: id(&patient).parse().map_err(|_| anyhow!("planted patient id"))?,
        planted_practitioner: id(&practitioner).parse().map_err(|_| anyhow!("planted practitioner id"))?,
        planted_event: ulid::Ulid::from(planted_event)
            .to_string()
            .parse()
            .map_err(|_| anyhow!("planted event id"))?,
    })
}
