//! The forgery fault: messages that are not what the dispatcher published — a `patient.deleted` for a
//! real patient with an event id that exists nowhere, and genuine messages with one attribute altered
//! (workspace, type, subject, resource version, source, or a listener the event is not routed to) —
//! injected into the listener queues (SQS) or run in-process (local). None may act: each must be
//! rejected with its reason code, and the checks find no effect of any.

use std::collections::BTreeMap;

use anyhow::Context;
use clinic_core::events::read::{envelope_from_row, ENVELOPE_COLUMNS, ENVELOPE_COLUMN_COUNT};
use clinic_core::events::{Envelope, EventType, ResourceType};
use clinic_core::ids::{EventId, WorkspaceId};
use clinic_core::listeners::{Delivery, Listener, Rejection, SourceClaim};

/// The source prefix the run's dispatcher publishes with (the default).
const SOURCE: &str = "/clinic";

/// One forged message: where it goes, what it claims, and the rejection it must meet.
struct Forgery {
    listener: Listener,
    envelope: Envelope,
    source_prefix: &'static str,
    expect: Rejection,
}

/// The `count` forgeries, cycling through every reason code, built from recent genuine bookings.
async fn forgeries(client: &tokio_postgres::Client, count: usize) -> anyhow::Result<Vec<Forgery>> {
    let query = format!(
        "SELECT {ENVELOPE_COLUMNS}, a.patient_id FROM events e JOIN appointments a ON a.id = e.resource_id \
         WHERE e.type = 'appointment.created' AND a.status = 'booked' ORDER BY e.recorded_at DESC LIMIT 50"
    );
    let rows = client.query(&query, &[]).await.context("reading bookings to forge")?;
    let booked: Vec<(Envelope, uuid::Uuid)> = rows
        .iter()
        .filter_map(|row| Some((envelope_from_row(row, 0).ok()?, row.get(ENVELOPE_COLUMN_COUNT))))
        .collect();
    anyhow::ensure!(booked.len() >= 2, "too few bookings to forge messages from");
    let mut forged = Vec::with_capacity(count);
    for index in 0..count {
        let (genuine, patient) = &booked[index % booked.len()];
        let other = &booked[(index + 1) % booked.len()].0;
        let expect = Rejection::ALL[index % Rejection::ALL.len()];
        let mut envelope = genuine.clone();
        let mut listener = Listener::PatientBookingConfirmation;
        let mut source_prefix = SOURCE;
        match expect {
            Rejection::UnknownEvent => {
                // The attack: a deletion nobody made, for a patient with booked appointments.
                envelope.id = EventId::generate();
                envelope.event_type = EventType::PatientDeleted;
                envelope.resource_type = ResourceType::Patient;
                envelope.resource_id = ulid::Ulid::from(*patient);
                listener = Listener::CancelFutureAppointments;
            }
            Rejection::TenantMismatch => envelope.workspace_id = WorkspaceId::generate(),
            Rejection::TypeMismatch => {
                envelope.event_type = EventType::AppointmentCancelled;
                listener = Listener::PatientCancellationNotice;
            }
            Rejection::SubjectMismatch => envelope.resource_id = other.resource_id,
            Rejection::VersionMismatch => envelope.resource_version += 1,
            Rejection::SourceMismatch => source_prefix = "/somewhere-else",
            Rejection::ListenerNotRouted => listener = Listener::PatientReminder,
        }
        forged.push(Forgery { listener, envelope, source_prefix, expect });
    }
    Ok(forged)
}

/// Injects the forgeries into the listener queues; answers how many of each reason were sent.
pub async fn inject_into_queues(
    checker: &tokio_postgres::Client,
    sqs: &aws_sdk_sqs::Client,
    queues: &clinic_sqs::QueueMap,
    count: usize,
) -> anyhow::Result<BTreeMap<&'static str, u64>> {
    let mut sent = BTreeMap::new();
    for forgery in forgeries(checker, count).await? {
        let body = serde_json::to_string(&clinic_sqs::to_cloud_event(
            &forgery.envelope,
            forgery.listener,
            forgery.source_prefix,
        ))?;
        let url = queues.url(forgery.listener).context("a queue per listener")?;
        let send = sqs.send_message().queue_url(url).message_body(body).send();
        tokio::time::timeout(std::time::Duration::from_secs(60), send)
            .await
            .context("injecting a forged message timed out")?
            .map_err(|error| {
                anyhow::anyhow!(
                    "injecting a forged message: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(error)
                )
            })?;
        *sent.entry(forgery.expect.as_str()).or_default() += 1;
    }
    Ok(sent)
}

/// Runs the forgeries in-process through the listeners' one delivery path (the local transport has no
/// queue to inject into); answers (sent, rejected) by reason code.
pub async fn run_in_process(
    checker: &tokio_postgres::Client,
    pool: &deadpool_postgres::Pool,
    count: usize,
) -> anyhow::Result<(BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>)> {
    let (mut sent, mut rejected) = (BTreeMap::new(), BTreeMap::new());
    for forgery in forgeries(checker, count).await? {
        let source =
            clinic_core::listeners::event_source(forgery.source_prefix, forgery.envelope.workspace_id);
        let delivery = Delivery {
            listener: forgery.listener,
            envelope: &forgery.envelope,
            source: Some(SourceClaim { claimed: &source, prefix: SOURCE }),
            transport: "chaos",
            message_id: None,
            sent_at: None,
        };
        *sent.entry(forgery.expect.as_str()).or_default() += 1;
        let result =
            clinic_core::listeners::deliver(pool, &clinic_core::listeners::notify::DeliveryLog, &delivery)
                .await;
        if let Some(reason) = result.err().and_then(|error| error.rejection()) {
            *rejected.entry(reason.as_str()).or_default() += 1;
        }
    }
    Ok((sent, rejected))
}
