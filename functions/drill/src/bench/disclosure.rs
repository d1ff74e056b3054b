//! The cost of the accounting of disclosures (issue 12 item 6), on the read and the write path, each
//! beside the same work without the disclosure row, in one run on one database:
//! - read: `GET /v1/patients/{id}`'s database work — before: one autocommit `SELECT`; now: a
//!   transaction with the `SELECT` and the `patient_disclosures` insert;
//! - write: `PATCH /v1/patients/{id}`'s transaction — lock, update, event — without and with the
//!   disclosure insert its answer now records.
//!
//! Both sides run the service's own functions on one `clinic_app` connection, alternating call by
//! call over the same patients, so drift hits both; figures are medians with p95.

use std::time::Duration;

use clinic_core::disclosures::{self, routes, Purpose};
use clinic_core::events::store::{append, NewEvent};
use clinic_core::events::{Actor, Cause, EventType};
use clinic_core::ids::{CorrelationId, PatientId, RequestId, WorkspaceId};
use clinic_core::patients::repo;
use deadpool_postgres::Object;
use tokio::time::Instant;

use super::db::{seed, BenchConnections as _};
use super::report::{ms, ratio, Report, Row};
use super::stats::Samples;
use super::Options;
use clinic_testkit::TestDb;

struct Setup {
    workspace: WorkspaceId,
    actor: Actor,
    patients: Vec<PatientId>,
}

async fn read(
    client: &mut Object,
    setup: &Setup,
    patient: PatientId,
    disclose: bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    if disclose {
        let tx = client.transaction().await?;
        let found =
            repo::find(&tx, setup.workspace, patient).await?.ok_or_else(|| anyhow::anyhow!("no patient"))?;
        let purpose = Purpose::route(routes::GET_PATIENT);
        disclosures::record(&tx, setup.workspace, &setup.actor, &[found.id], purpose).await?;
        tx.commit().await?;
    } else {
        repo::find(&*client, setup.workspace, patient).await?.ok_or_else(|| anyhow::anyhow!("no patient"))?;
    }
    Ok(started.elapsed())
}

async fn write(
    client: &mut Object,
    setup: &Setup,
    patient: PatientId,
    disclose: bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let tx = client.transaction().await?;
    let mut found =
        repo::lock(&tx, setup.workspace, patient).await?.ok_or_else(|| anyhow::anyhow!("no patient"))?;
    found.version += 1;
    found.updated_at = chrono::Utc::now();
    repo::update(&tx, &found).await?;
    if disclose {
        let purpose = Purpose::route(routes::PATCH_PATIENT);
        disclosures::record(&tx, setup.workspace, &setup.actor, &[found.id], purpose).await?;
    }
    let cause = Cause {
        actor: setup.actor,
        correlation_id: CorrelationId::generate(),
        causation_id: RequestId::generate().into(),
        idempotency_key: None,
        trace: None,
    };
    let event = NewEvent {
        event_type: EventType::PatientUpdated,
        workspace_id: setup.workspace,
        resource_id: found.id.ulid(),
        resource_version: found.version,
        occurred_at: found.updated_at,
        also_links: Vec::new(),
        changed_fields: Some(Vec::new()),
    };
    append(&tx, &cause, event).await?;
    tx.commit().await?;
    Ok(started.elapsed())
}

pub async fn run(db: &TestDb, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let owner = db.owner().await?;
    let fixtures = seed(&owner, 1, 200).await?;
    let setup = Setup {
        workspace: fixtures.workspace_id,
        actor: Actor::Member { id: fixtures.member_id.ulid() },
        patients: fixtures.patients.iter().map(|id| PatientId::from_ulid(*id)).collect(),
    };
    let mut client = db.app_pool(1)?.get().await?;
    let calls = if options.smoke { 20 } else { 2_000 };
    for (label, is_write) in [
        ("6a. Read path: `GET /v1/patients/{id}` database work", false),
        ("6b. Write path: `PATCH /v1/patients/{id}` transaction", true),
    ] {
        let (mut with, mut without) = (Samples::with_capacity(calls), Samples::with_capacity(calls));
        for call in 0..calls + 20 {
            let patient = setup.patients[call % setup.patients.len()];
            let order = if call % 2 == 0 { [false, true] } else { [true, false] };
            for disclose in order {
                let took = if is_write {
                    write(&mut client, &setup, patient, disclose).await?
                } else {
                    read(&mut client, &setup, patient, disclose).await?
                };
                // The first 20 rounds warm the caches and prepared statements.
                if call >= 20 {
                    if disclose {
                        with.push(took)
                    } else {
                        without.push(took)
                    }
                }
            }
        }
        let (with_median, without_median) = (with.quantile_ms(0.5), without.quantile_ms(0.5));
        let (_, ratio_text) = ratio(with_median.unwrap_or(0.0), without_median.unwrap_or(0.0));
        let extra = with_median.zip(without_median).map(|(a, b)| a - b);
        report.push(Row {
            measure: format!("{label}, with the disclosure row ({calls} calls per side, one connection)"),
            figure: format!(
                "median {} (p95 {}); +{} per call",
                ms(with_median),
                ms(with.quantile_ms(0.95)),
                ms(extra)
            ),
            baseline: format!(
                "without: median {} (p95 {})",
                ms(without_median),
                ms(without.quantile_ms(0.95))
            ),
            ratio: ratio_text,
            target: "measured and reported (issue 12 item 6)".into(),
            met: None,
        });
    }
    let rows: i64 = owner.query_one("SELECT count(*) FROM patient_disclosures", &[]).await?.get(0);
    report.note(format!(
        "Disclosures: the read path goes from one autocommit statement to BEGIN + SELECT + INSERT + COMMIT \
         (four round trips); the write path adds one INSERT to a transaction that already commits. \
         {rows} disclosure rows were written by this section."
    ));
    Ok(())
}
