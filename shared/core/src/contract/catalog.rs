//! The event catalog, `docs/events.md`: one section per event type, generated from the [`EventType`]
//! enum, the exhaustive listener map ([`listeners`]) and [`emitted_by`].
//!
//! Invariants:
//! - [`emitted_by`] is an exhaustive `match` (no wildcard): a new event type does not compile until
//!   its emitting mutation is named here. Its routes are real routes (`clinic_http::ROUTES`, a unit
//!   test) and the api test `every_catalog_type_is_emitted_by_its_documented_route` drives each one
//!   and checks that it emits the type.
//! - The tests named as covering retry and idempotency exist (a unit test reads their files).

use std::fmt::Write;

use crate::events::EventType;
use crate::listeners::map::{listeners, Listener};

/// How an event type comes to be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emission {
    /// The use case that appends it (module path below `clinic_core`).
    pub mutation: &'static str,
    /// The HTTP route that runs the use case (method, path), if any.
    pub route: Option<(&'static str, &'static str)>,
    /// Other paths that emit it (chained mutations, schedules).
    pub also: &'static str,
}

/// The mutation (and route) that emits each event type. Exhaustive: no wildcard arm.
pub const fn emitted_by(event_type: EventType) -> Emission {
    const fn route(mutation: &'static str, method: &'static str, path: &'static str) -> Emission {
        Emission { mutation, route: Some((method, path)), also: "" }
    }
    match event_type {
        EventType::PatientCreated => route("patients::create", "post", "/v1/patients"),
        EventType::PatientUpdated => Emission {
            also: "`patients::record_opt_out` (actor `patient`, `changedFields` `contactChannels` or \
                   `contactOptOuts`): an SMS STOP the provider reports to the sender, and an email's \
                   one-click unsubscribe, `POST /v1/unsubscribe/{token}`",
            ..route("patients::update", "patch", "/v1/patients/{id}")
        },
        EventType::PatientDeleted => route("patients::delete", "delete", "/v1/patients/{id}"),
        EventType::PractitionerCreated => route("practitioners::create", "post", "/v1/practitioners"),
        EventType::PractitionerUpdated => route("practitioners::update", "patch", "/v1/practitioners/{id}"),
        EventType::AppointmentCreated => route("appointments::book", "post", "/v1/appointments"),
        EventType::AppointmentRescheduled => {
            route("appointments::reschedule", "post", "/v1/appointments/{id}/reschedule")
        }
        EventType::AppointmentCancelled => Emission {
            also: "`appointments::cancel_future_of_patient`, run by the `cancel_future_appointments` \
                   listener of `patient.deleted` (actor `system`, causation = that event)",
            ..route("appointments::cancel", "post", "/v1/appointments/{id}/cancel")
        },
        EventType::AppointmentCompleted => {
            route("appointments::complete", "post", "/v1/appointments/{id}/complete")
        }
        EventType::AppointmentReminderDue => Emission {
            mutation: "housekeeping::reminders::run",
            route: None,
            also: "the reminders schedule of the dispatcher Lambda (`CLINIC_REMINDER_LEAD_HOURS`) and \
                   `clinic reminders run`; one per appointment (`appointment_reminders` claims it)",
        },
    }
}

/// Tests that cover retry and idempotency for every event with listeners: (file, test function).
pub const PIPELINE_TESTS: &[(&str, &str)] = &[
    ("shared/core/tests/pipeline/listeners_workflows.rs", "a_duplicate_delivery_is_a_successful_no_op"),
    ("shared/core/tests/pipeline/listeners_workflows.rs", "concurrent_duplicate_deliveries_apply_once"),
    (
        "shared/core/tests/pipeline/dispatch_local.rs",
        "failing_transport_retries_with_growing_delays_then_goes_dead_keeping_the_error",
    ),
    (
        "shared/core/tests/pipeline/dispatch_local.rs",
        "two_dispatchers_racing_over_1000_events_start_every_listener_once",
    ),
    ("shared/core/tests/pipeline/outages.rs", "an_outage_twenty_times_the_retry_budget_buries_nothing"),
    (
        "shared/core/tests/pipeline/custody.rs",
        "a_start_the_broker_lost_is_restarted_under_the_same_identity_and_takes_effect_once",
    ),
    (
        "functions/listener/tests/lambda/handler.rs",
        "a_retryable_failure_is_reported_and_a_redelivery_then_succeeds",
    ),
    (
        "shared/sqs/tests/emulator/sqs_transport.rs",
        "fifo_queues_get_the_resource_as_group_and_event_listener_as_dedup_id",
    ),
];

/// Tests of one listener's own retry or idempotency (beyond [`PIPELINE_TESTS`]).
pub const fn listener_tests(listener: Listener) -> &'static [(&'static str, &'static str)] {
    match listener {
        Listener::CancelFutureAppointments => &[(
            "shared/core/tests/pipeline/listeners_workflows.rs",
            "patient_deletion_cancels_future_appointments_once_even_when_delivered_twice",
        )],
        Listener::PatientBookingConfirmation => &[(
            "functions/listener/tests/lambda/handler.rs",
            "end_to_end_over_sqs_commit_dispatch_listen_notify_and_duplicates_are_no_ops",
        )],
        Listener::WebhookFanOut => {
            &[("tests/e2e/webhooks/mod.rs", "webhooks_reach_a_standard_webhooks_receiver")]
        }
        Listener::PractitionerScheduleChange
        | Listener::PatientRescheduleNotice
        | Listener::PatientCancellationNotice
        | Listener::PatientReminder => &[],
    }
}

/// Tests proving an event type is emitted through its documented path, and its envelope's contract.
pub const EMISSION_TESTS: &[(&str, &str)] = &[
    ("shared/http/tests/api/contract.rs", "every_catalog_type_is_emitted_by_its_documented_route"),
    ("shared/http/tests/api/contract.rs", "envelopes_carry_the_contract_fields"),
];

fn test_list(tests: &[(&str, &str)]) -> String {
    tests.iter().map(|(file, name)| format!("`{file}` `{name}`")).collect::<Vec<_>>().join("; ")
}

/// The catalog as Markdown.
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Event catalog\n\n\
         Generated by `clinic_core::contract::catalog` from the event type enum, the exhaustive listener \
         map (`shared/core/src/listeners/map.rs`) and the emission table; do not edit by hand. A test \
         fails when it is stale: regenerate with `UPDATE_CONTRACT=1 cargo test -p clinic-core --lib \
         contract`.\n\n\
         Every event is published as a CloudEvents 1.0.2 document whose `type` is the published name and \
         whose `dataschema` is `$CLINIC_SCHEMA_BASE_URL/schemas/events/<type>/v<n>.json` (served by the \
         API without authentication; the files are under `schemas/`). The asynchronous API is described \
         in `asyncapi.yaml` (served at `/asyncapi.yaml`).\n\n\
         ## Common to every event\n\n\
         - **Envelope**: identifiers only (DESIGN §4); `producer` is the emitting module, \
         `recordedAt` the database receipt time, `metadata` holds `envelopeVersion` and `dataschema`.\n\
         - **idempotencyKey**: when the request carried an `Idempotency-Key`, the event carries \
         `hmac-sha256:<hex>` of `workspaceId:key` under a key derived from the API's cursor key \
         (`CLINIC_CURSOR_KEY`; locally the JWT secret): clients choose keys and may put words in them, \
         and a plain SHA-256 of a guessable string can be reversed by any consumer, a keyed digest \
         cannot. It lets the API match a retried request to its event; nobody else can test a guess.\n\
         - **Producer dedupe**: `Idempotency-Key` on the mutating route (same key and body: the stored \
         answer, no second event; another body: 422).\n\
         - **Consumer dedupe**: the event id; every listener effect is keyed `{eventId}:{listener}` and \
         commits with its receipt (`listener_receipts`), so a redelivery is a successful no-op. FIFO \
         queues also get `MessageDeduplicationId` = `{eventId}:{listener}`.\n\
         - **Ordering key**: the resource id (`subject`; FIFO `MessageGroupId`). Standard queues do not \
         order; listeners reload the resource and skip stale work instead of relying on order.\n\
         - **Fairness**: standard listener queues are SQS fair queues — every message carries \
         `MessageGroupId` = the workspace id, so one clinic's burst does not hold back the other \
         clinics' messages (no queue setting; still a standard queue's delivery and order).\n\
         - **Dead letters**: a start that fails is retried with bounded, jittered exponential backoff \
         and turns the outbox row `dead` at `CLINIC_DISPATCH_MAX_ATTEMPTS` (outages do not spend \
         attempts); operators retry, replay or discard it (`clinic outbox …`, \
         `/v1/system/outbox/…`). A message a listener fails `ListenerMaxReceiveCount` times moves to \
         that listener's dead-letter queue; the reconciler restarts starts whose receipt is overdue.\n\
         - **Rebuild source**: the `events` table (append-only, with `event_resources` for timelines) \
         is the durable log; `replay` re-sends an event to its listeners from it. Current state is in \
         the resource tables.\n\n",
    );
    for event_type in EventType::ALL {
        let emission = emitted_by(*event_type);
        let version = crate::events::ENVELOPE_VERSION;
        let _ = writeln!(out, "## `{}` — `{}`\n", event_type.as_str(), event_type.published_name(version));
        let _ = writeln!(out, "- Schema: `{}`", super::schema_path(*event_type, version));
        let _ = writeln!(out, "- Producer: `{}`", event_type.producer());
        let route = emission.route.map_or_else(
            || "none".to_owned(),
            |(method, path)| format!("`{} {path}`", method.to_uppercase()),
        );
        let _ = writeln!(out, "- Emitted by: `{}`, route {route}", emission.mutation);
        if !emission.also.is_empty() {
            let _ = writeln!(out, "- Also emitted by: {}", emission.also);
        }
        let fields = event_type.changeable_fields();
        if !fields.is_empty() {
            let names: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
            let _ = writeln!(out, "- `changedFields` (names only): {}", names.join(", "));
        }
        let routed = listeners(*event_type);
        if routed.is_empty() {
            let _ = writeln!(out, "- Listeners: none (recorded and shown on timelines only)");
        } else {
            let names: Vec<String> = routed.iter().map(|l| format!("`{l}`")).collect();
            let _ = writeln!(out, "- Listeners: {} (one queue each)", names.join(", "));
        }
        let _ = writeln!(out, "- Ordering key: the {} id", event_type.resource_type().as_str());
        let producer_dedupe = if emission.route.is_some() {
            "`Idempotency-Key` on the route"
        } else {
            "one per appointment (reminder claim)"
        };
        let _ = writeln!(out, "- Idempotency: {producer_dedupe}; consumers: `{{eventId}}:{{listener}}`");
        let dead = if routed.is_empty() {
            "nothing is started: the outbox row is dispatched at once"
        } else {
            "outbox `retry` → `dead`, then each listener's dead-letter queue (see above)"
        };
        let _ = writeln!(out, "- Dead letters: {dead}");
        let _ = writeln!(out, "- Rebuild source: `events` (+ `event_resources`)");
        let mut tests: Vec<(&str, &str)> = EMISSION_TESTS.to_vec();
        if !routed.is_empty() {
            tests.extend_from_slice(PIPELINE_TESTS);
            for listener in routed {
                tests.extend_from_slice(listener_tests(*listener));
            }
        }
        let _ = writeln!(out, "- Tests: {}\n", test_list(&tests));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_test_exists() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut named: Vec<(&str, &str)> = PIPELINE_TESTS.to_vec();
        named.extend_from_slice(EMISSION_TESTS);
        for listener in Listener::ALL {
            named.extend_from_slice(listener_tests(*listener));
        }
        for (file, name) in named {
            let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
            assert!(text.contains(&format!("fn {name}(")), "{file} has no test {name}");
        }
    }
}
