//! `clinic bench fairness` (issue 41): one clinic has a burst of reminders queued (default 10,000;
//! smoke 200) while nine others each commit one cancellation notice a second, all sent by four
//! notification senders (the real `Sender`, default batch) through a provider stand-in held to a set
//! rate (default 50/s) by the shared token bucket in PostgreSQL. The trickle is steady: quiet clinic k
//! commits at k/9 of each second (in every scenario, the unloaded one too), not all nine at once.
//! Every scenario runs on the same database in the same run:
//!
//! - unloaded: the trickle alone (the quiet clinics' baseline);
//! - the burst, fair claim, and the burst, oldest-first claim (the claim before issue 41);
//! - the burst spread over many recipients and kinds (a third cancellations, the rest reminders and
//!   booking confirmations), fair and oldest-first.
//!
//! Figures: the quiet clinics' commit → provider-accepted p50/p95/max (commit = the notification
//! row's `created_at`, accepted = the stand-in's answer), and the provider throughput over the
//! trickle window. Targets: quiet p95 ≤ 2× unloaded; throughput ≥ 0.95× oldest-first.
//!
//! Invariants: the notification rows are written by `delivery::enqueue` (the listener's commit) on
//! real appointments and events booked and cancelled through the use cases, so the senders render
//! and mark them as in production; nothing but ids leaves the stand-in. Between scenarios every
//! notification and the bucket are deleted; the events stay (their ids are reused as keys).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use clinic_core::appointments::{self, Cancel, NewAppointment};
use clinic_core::context::Ctx;
use clinic_core::delivery::{
    self, Accepted, DeliveryConfig, NewDelivery, NotifierKind, OutgoingMessage, Priority, Provider,
    ProviderError, Providers, RecipientKind, Sender,
};
use clinic_core::domain::values::TimeSlot;
use clinic_core::events::Envelope;
use clinic_core::ids::{NotificationId, PatientId, PractitionerId, WorkspaceId};
use clinic_core::lease::rate::Pace;
use clinic_core::lease::sql::ClaimOrder;
use clinic_core::listeners::Listener;
use clinic_testkit::TestDb;
use deadpool_postgres::Pool;
use tokio::sync::watch;
use ulid::Ulid;

use super::db::BenchConnections as _;
use super::report::{Report, Row};
use super::stats::Samples;
use super::Options;

const QUIET_CLINICS: usize = 9;
const SENDERS: usize = 4;
const PROVIDER: &str = "bench-provider";

/// The provider stand-in: accepts every message and notes when (the rate is the bucket's).
#[derive(Default)]
struct StandIn {
    accepted: Mutex<HashMap<NotificationId, DateTime<Utc>>>,
}

#[async_trait]
impl Provider for StandIn {
    fn name(&self) -> &'static str {
        PROVIDER
    }

    async fn send(&self, message: &OutgoingMessage) -> Result<Accepted, ProviderError> {
        self.accepted.lock().expect("stand-in lock").insert(message.notification_id, Utc::now());
        Ok(Accepted { provider_message_id: format!("bench:{}", message.notification_id) })
    }
}

/// One clinic's booked (and, for the quiet ones, cancelled) appointments.
struct Clinic {
    workspace: WorkspaceId,
    /// (patient, booking event, cancellation event if cancelled).
    appointments: Vec<(Ulid, Envelope, Option<Envelope>)>,
}

/// Books `count` appointments in `workspace` spread over its practitioners and patients, 500 a
/// transaction; cancels every one when `cancel`.
async fn book(
    pool: &Pool,
    fixtures: &super::db::Fixtures,
    count: usize,
    cancel: bool,
) -> anyhow::Result<Clinic> {
    let ctx = Ctx::system(fixtures.workspace_id);
    let start = Utc::now() + chrono::Duration::days(3);
    let mut appointments = Vec::with_capacity(count);
    let mut client = pool.get().await?;
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let tx = client.transaction().await?;
        for &i in chunk {
            let practitioner = fixtures.practitioners[i % fixtures.practitioners.len()];
            let patient = fixtures.patients[i % fixtures.patients.len()];
            let slot_index = (i / fixtures.practitioners.len()) as i64;
            let starts = start + chrono::Duration::minutes(30 * slot_index);
            let slot = TimeSlot::new(starts, starts + chrono::Duration::minutes(30))
                .map_err(|error| anyhow::anyhow!("slot: {error:?}"))?;
            let command = NewAppointment::new(
                PatientId::from_ulid(patient),
                PractitionerId::from_ulid(practitioner),
                slot,
                None,
            );
            let (appointment, booked) = appointments::book(&tx, &ctx, command).await?;
            let cancelled = if cancel {
                let access = appointments::Access::Workspace;
                Some(appointments::cancel(&tx, &ctx, access, appointment.id, Cancel::default()).await?.1)
            } else {
                None
            };
            appointments.push((patient, booked, cancelled));
        }
        tx.commit().await?;
    }
    Ok(Clinic { workspace: fixtures.workspace_id, appointments })
}

/// The notification a listener would commit for `event`.
fn notice<'a>(
    workspace: WorkspaceId,
    patient: Ulid,
    event: &Envelope,
    listener: Listener,
) -> NewDelivery<'a> {
    let template = match listener {
        Listener::PatientCancellationNotice => "appointment.cancellation_notice",
        Listener::PatientBookingConfirmation => "appointment.booking_confirmation",
        _ => "appointment.reminder",
    };
    NewDelivery {
        workspace_id: workspace,
        event_id: event.id,
        listener: listener.as_str(),
        recipient_kind: RecipientKind::Patient,
        recipient_id: patient,
        template,
        // Appointments start in three days: no change here is same-day.
        priority: Priority::of(template, Utc::now() + chrono::Duration::days(3), Utc::now()),
    }
}

/// The burst's notifications: all reminders, or spread over kinds (the cancelled appointments'
/// cancellation notices, the rest alternately reminders and booking confirmations).
fn burst_notices(clinic: &Clinic, spread: bool) -> Vec<NewDelivery<'static>> {
    clinic
        .appointments
        .iter()
        .enumerate()
        .map(|(i, (patient, booked, cancelled))| match (spread, cancelled) {
            (true, Some(cancelled)) => {
                notice(clinic.workspace, *patient, cancelled, Listener::PatientCancellationNotice)
            }
            (true, None) if i % 2 == 0 => {
                notice(clinic.workspace, *patient, booked, Listener::PatientBookingConfirmation)
            }
            _ => notice(clinic.workspace, *patient, booked, Listener::PatientReminder),
        })
        .collect()
}

/// What one scenario measured.
struct Measured {
    quiet: Samples,
    /// Quiet notices not accepted before the bound.
    quiet_missing: usize,
    /// Provider accepts a second over the trickle window (every clinic).
    throughput: f64,
}

struct Scenario<'a> {
    burst: &'a [NewDelivery<'static>],
    order: ClaimOrder,
}

async fn run_scenario(
    pool: &Pool,
    owner: &tokio_postgres::Client,
    quiet: &[Clinic],
    scenario: Scenario<'_>,
    options: &Options,
) -> anyhow::Result<Measured> {
    owner
        .batch_execute("DELETE FROM notifications; DELETE FROM provider_rate_buckets; ANALYZE notifications")
        .await?;
    {
        let mut client = pool.get().await?;
        let tx = client.transaction().await?;
        for new in scenario.burst {
            delivery::enqueue(&tx, new).await?;
        }
        tx.commit().await?;
    }
    // What autovacuum's analyze does in a deployment (this server may run with autovacuum off).
    owner.batch_execute("ANALYZE notifications").await?;
    let stand_in = Arc::new(StandIn::default());
    let mut config = DeliveryConfig::with_notifiers(vec![NotifierKind::Log]);
    config.poll = Duration::from_millis(10);
    config.batch = options.fairness_batch;
    config.claim_order = scenario.order;
    config.pace.push(Pace { burst: 5.0, ..Pace::new(PROVIDER, "bench", f64::from(options.provider_rate)) });
    let (stop, stopped) = watch::channel(false);
    let senders: Vec<_> = (0..SENDERS)
        .map(|_| {
            let sender = Sender::new(pool.clone(), Providers::both(stand_in.clone()), config.clone());
            let stopped = stopped.clone();
            tokio::spawn(async move { sender.run(stopped).await })
        })
        .collect();

    let window = options.fairness_duration();
    let started = Instant::now();
    let started_at = Utc::now();
    let mut quiet_ids = Vec::new();
    let mut client = pool.get().await?;
    let seconds = window.as_secs().max(1) as usize;
    for second in 0..seconds {
        for (k, clinic) in quiet.iter().enumerate() {
            // A steady trickle: clinic k commits at k/9 of each second (not all nine at once).
            let phase =
                Duration::from_secs(second as u64) + Duration::from_secs(1) * k as u32 / quiet.len() as u32;
            tokio::time::sleep_until(tokio::time::Instant::from_std(started + phase)).await;
            let (patient, _, cancelled) = &clinic.appointments[second % clinic.appointments.len()];
            let cancelled = cancelled.as_ref().ok_or_else(|| anyhow::anyhow!("quiet clinics cancel"))?;
            let new = notice(clinic.workspace, *patient, cancelled, Listener::PatientCancellationNotice);
            let tx = client.transaction().await?;
            if let Some(id) = delivery::enqueue(&tx, &new).await? {
                quiet_ids.push(id);
            }
            tx.commit().await?;
        }
    }
    // The window ends a second after the last second began, as before.
    tokio::time::sleep_until(tokio::time::Instant::from_std(started + Duration::from_secs(seconds as u64)))
        .await;
    let window_end = Utc::now();
    let accepted_in_window = stand_in
        .accepted
        .lock()
        .expect("stand-in lock")
        .values()
        .filter(|at| **at >= started_at && **at <= window_end)
        .count();
    let throughput = accepted_in_window as f64 / (window_end - started_at).to_std()?.as_secs_f64();

    // The quiet notices still on their way get a bounded while.
    let bound = Instant::now() + Duration::from_secs(if options.smoke { 30 } else { 60 });
    loop {
        let done = {
            let accepted = stand_in.accepted.lock().expect("stand-in lock");
            quiet_ids.iter().all(|id| accepted.contains_key(id))
        };
        if done || Instant::now() > bound {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true)?;
    for sender in senders {
        sender.await?;
    }

    let rows =
        owner.query("SELECT id, created_at FROM notifications WHERE id = ANY($1)", &[&quiet_ids]).await?;
    let accepted = stand_in.accepted.lock().expect("stand-in lock");
    let mut samples = Samples::with_capacity(rows.len());
    let mut missing = 0;
    for row in rows {
        let (id, committed): (NotificationId, DateTime<Utc>) = (row.get(0), row.get(1));
        match accepted.get(&id) {
            Some(at) => samples.push((*at - committed).to_std().unwrap_or_default()),
            None => missing += 1,
        }
    }
    Ok(Measured { quiet: samples, quiet_missing: missing, throughput })
}

fn percentiles(measured: &mut Measured) -> String {
    let q =
        |samples: &mut Samples, q: f64| samples.quantile_ms(q).map_or("–".into(), |ms| format!("{ms:.0}"));
    let text = format!(
        "p50 {} / p95 {} / max {} ms",
        q(&mut measured.quiet, 0.5),
        q(&mut measured.quiet, 0.95),
        q(&mut measured.quiet, 1.0)
    );
    if measured.quiet_missing > 0 {
        format!("{text} ({} not accepted within the bound)", measured.quiet_missing)
    } else {
        text
    }
}

pub async fn run(db: &TestDb, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let burst_size = options.fairness_burst();
    let owner = db.owner().await?;
    let pool = db.app_pool(SENDERS + 2)?;
    let busy = super::db::seed(&owner, 20, 200).await?;
    let busy_clinic = book(&pool, &busy, burst_size, false).await?;
    let mut quiet = Vec::with_capacity(QUIET_CLINICS);
    let per_clinic = options.fairness_duration().as_secs().max(1) as usize;
    for _ in 0..QUIET_CLINICS {
        let fixtures = super::db::seed(&owner, 1, 5).await?;
        quiet.push(book(&pool, &fixtures, per_clinic, true).await?);
    }
    owner.batch_execute("ANALYZE").await?;

    let reminders = burst_notices(&busy_clinic, false);
    let mut unloaded =
        run_scenario(&pool, &owner, &quiet, Scenario { burst: &[], order: ClaimOrder::Fair }, options)
            .await?;
    let mut fair =
        run_scenario(&pool, &owner, &quiet, Scenario { burst: &reminders, order: ClaimOrder::Fair }, options)
            .await?;
    let mut oldest = run_scenario(
        &pool,
        &owner,
        &quiet,
        Scenario { burst: &reminders, order: ClaimOrder::OldestFirst },
        options,
    )
    .await?;
    // The spread burst: a third of the busy clinic's appointments cancelled (cancellation notices).
    let mut spread_clinic = busy_clinic;
    {
        let ctx = Ctx::system(spread_clinic.workspace);
        let mut client = pool.get().await?;
        let tx = client.transaction().await?;
        for (i, (_, booked, cancelled)) in spread_clinic.appointments.iter_mut().enumerate() {
            if i % 3 == 0 {
                let id = clinic_core::ids::AppointmentId::from_ulid(booked.resource_id);
                let access = appointments::Access::Workspace;
                *cancelled = Some(appointments::cancel(&tx, &ctx, access, id, Cancel::default()).await?.1);
            }
        }
        tx.commit().await?;
    }
    let spread = burst_notices(&spread_clinic, true);
    let mut spread_fair =
        run_scenario(&pool, &owner, &quiet, Scenario { burst: &spread, order: ClaimOrder::Fair }, options)
            .await?;
    let mut spread_oldest = run_scenario(
        &pool,
        &owner,
        &quiet,
        Scenario { burst: &spread, order: ClaimOrder::OldestFirst },
        options,
    )
    .await?;

    let unloaded_p95 = unloaded.quiet.quantile_ms(0.95).unwrap_or(f64::NAN);
    let unloaded_text = format!("{} (no burst)", percentiles(&mut unloaded));
    let burst = super::report::thousands(burst_size as f64);
    let rate =
        format!("provider {}/s, {SENDERS} senders × batch {}", options.provider_rate, options.fairness_batch);
    for (label, measured, judged) in [
        (format!("{burst} reminders, fair claim"), &mut fair, true),
        (format!("{burst} reminders, oldest-first claim"), &mut oldest, false),
        (format!("{burst} spread over recipients and kinds, fair claim"), &mut spread_fair, true),
        (format!("{burst} spread over recipients and kinds, oldest-first claim"), &mut spread_oldest, false),
    ] {
        let p95 = measured.quiet.quantile_ms(0.95).unwrap_or(f64::NAN);
        let ratio = p95 / unloaded_p95;
        report.push(Row {
            measure: format!(
                "Quiet clinics' commit → accepted, 9 clinics × 1/s beside a burst of {label}, {rate}"
            ),
            figure: percentiles(measured),
            baseline: unloaded_text.clone(),
            ratio: if ratio.is_finite() {
                format!("{ratio:.2}× (p95)")
            } else {
                "– (none accepted)".into()
            },
            target: if judged { "p95 ≤ 2× unloaded".into() } else { "– (comparison)".into() },
            met: (judged && !options.smoke)
                .then_some(ratio.is_finite() && ratio <= 2.0 && measured.quiet_missing == 0),
        });
    }
    for (label, fair, oldest) in
        [("reminders", &fair, &oldest), ("spread over recipients and kinds", &spread_fair, &spread_oldest)]
    {
        let ratio = fair.throughput / oldest.throughput;
        report.push(Row {
            measure: format!("Provider throughput, burst of {burst} {label}, {rate} (fair claim)"),
            figure: format!("{:.1}/s", fair.throughput),
            baseline: format!("{:.1}/s (oldest-first claim)", oldest.throughput),
            ratio: format!("{ratio:.2}×"),
            target: "≥ 0.95× oldest-first".into(),
            met: (!options.smoke).then_some(ratio >= 0.95),
        });
    }
    Ok(())
}
