//! The HTTP writers: concurrent clients of the real API that create patients and practitioners and
//! book, reschedule, cancel and complete appointments, retrying 5xx answers and connection errors with
//! the same `Idempotency-Key` until they get a final answer. Every 2xx answer is tallied: the checks
//! compare the event log against it.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clinic_core::events::EventType;
use hyper::header::HeaderValue;
use serde_json::{json, Value};

use super::rng::Rng;
use crate::bench::client::{bearer, Connection};

/// One accepted (2xx) mutation.
#[derive(Debug, Clone)]
pub struct Mutation {
    pub event_type: EventType,
    pub resource_id: String,
    pub version: i64,
    pub saw_unavailable: bool,
}

#[derive(Debug, Default)]
pub struct Tally {
    pub mutations: Vec<Mutation>,
    pub requests: u64,
    pub retries: u64,
    pub connection_errors: u64,
    /// (when, status, answered with a problem document)
    pub server_errors: Vec<(Instant, u16, bool)>,
    pub unexpected: Vec<String>,
    pub gave_up: u64,
}

/// The API under test and what the writers saw of it.
pub struct Run {
    address: SocketAddr,
    authorization: HeaderValue,
    tally: Mutex<Tally>,
}

impl Run {
    pub fn new(address: SocketAddr, token: &str) -> anyhow::Result<Run> {
        Ok(Run { address, authorization: bearer(token)?, tally: Mutex::default() })
    }

    pub fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends one mutation with a fresh Idempotency-Key on the writer's keep-alive `connection`
    /// (reopened after an error), retrying 5xx answers and connection errors with the same key until
    /// it gets a final answer. The 2xx answer's body, or `None`.
    pub async fn mutate(
        &self,
        connection: &mut Option<Connection>,
        path: &str,
        body: Value,
        event_type: EventType,
        rng: &mut Rng,
    ) -> Option<Value> {
        let key = ulid::Ulid::generate().to_string();
        let mut saw_unavailable = false;
        for attempt in 0..1200u32 {
            if attempt > 0 {
                self.tally().retries += 1;
                tokio::time::sleep(rng.millis(50, 250)).await;
            }
            let answer = match self.send(connection, path, &key, &body).await {
                Ok(answer) => answer,
                Err(_) => {
                    *connection = None;
                    self.tally().connection_errors += 1;
                    continue;
                }
            };
            let status = answer.status.as_u16();
            let mut tally = self.tally();
            tally.requests += 1;
            if status >= 500 {
                tally.server_errors.push((Instant::now(), status, answer.is_problem));
                saw_unavailable |= status == 503;
                continue;
            }
            if !(200..300).contains(&status) {
                let text = String::from_utf8_lossy(&answer.body);
                tally.unexpected.push(format!("POST {path}: {status} {}", &text[..text.len().min(300)]));
                return None;
            }
            let Ok(value) = serde_json::from_slice::<Value>(&answer.body) else {
                tally.unexpected.push(format!("POST {path}: {status} with a body that is not JSON"));
                return None;
            };
            tally.mutations.push(Mutation {
                event_type,
                resource_id: value["id"].as_str().unwrap_or_default().to_owned(),
                version: value["version"].as_i64().unwrap_or_default(),
                saw_unavailable,
            });
            return Some(value);
        }
        self.tally().gave_up += 1;
        None
    }

    /// One POST, bounded by 30 s, on the open connection or a new one.
    async fn send(
        &self,
        connection: &mut Option<Connection>,
        path: &str,
        key: &str,
        body: &Value,
    ) -> anyhow::Result<crate::bench::client::Answer> {
        let exchange = async {
            if connection.is_none() {
                *connection = Some(Connection::open(self.address, self.authorization.clone()).await?);
            }
            let open = connection.as_mut().expect("opened above");
            open.post(path, body.to_string(), Some(key)).await
        };
        tokio::time::timeout(Duration::from_secs(30), exchange)
            .await
            .map_err(|_| anyhow::anyhow!("request timed out"))?
    }
}

/// The `index`-th 30-minute slot of `writer` (slots of one writer never overlap).
pub fn slot(writer: usize, index: u64) -> (String, String) {
    let base = chrono::DateTime::parse_from_rfc3339("2040-01-01T00:00:00Z").expect("constant").to_utc();
    let starts = base + chrono::Duration::hours(index as i64) + chrono::Duration::minutes(writer as i64 % 30);
    let ends = starts + chrono::Duration::minutes(30);
    let format = "%Y-%m-%dT%H:%M:%SZ";
    (starts.format(format).to_string(), ends.format(format).to_string())
}

/// One writer: its own practitioner (so bookings never clash), then a random mix of patient creations,
/// bookings, reschedules, cancellations and completions until the deadline.
pub async fn writer(run: std::sync::Arc<Run>, index: usize, seed: u64, deadline: Instant, pace: Duration) {
    let mut rng = Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut connection = None;
    let body = json!({"displayName": format!("Dr. Chaos {index}"), "specialty": "Fault injection"});
    let Some(practitioner) = run
        .mutate(&mut connection, "/v1/practitioners", body, EventType::PractitionerCreated, &mut rng)
        .await
    else {
        return;
    };
    let practitioner = practitioner["id"].as_str().unwrap_or_default().to_owned();
    let mut patients: Vec<String> = Vec::new();
    let mut booked: Vec<String> = Vec::new();
    let mut next_slot = 0u64;
    while Instant::now() < deadline {
        tokio::time::sleep(pace).await;
        let roll = rng.below(100);
        if patients.is_empty() || roll < 25 {
            let body = json!({"givenName": "Chaos", "familyName": format!("Writer {index}")});
            let created =
                run.mutate(&mut connection, "/v1/patients", body, EventType::PatientCreated, &mut rng).await;
            if let Some(patient) = created {
                patients.push(patient["id"].as_str().unwrap_or_default().to_owned());
            }
        } else if booked.is_empty() || roll < 60 {
            let patient = &patients[rng.below(patients.len() as u64) as usize];
            let (starts_at, ends_at) = slot(index, next_slot);
            next_slot += 1;
            let body = json!({"patientId": patient, "practitionerId": practitioner, "startsAt": starts_at, "endsAt": ends_at});
            let path = "/v1/appointments";
            if let Some(appointment) =
                run.mutate(&mut connection, path, body, EventType::AppointmentCreated, &mut rng).await
            {
                booked.push(appointment["id"].as_str().unwrap_or_default().to_owned());
            }
        } else {
            let at = rng.below(booked.len() as u64) as usize;
            let appointment = booked[at].clone();
            let (action, event_type, body) = if roll < 75 {
                let (starts_at, ends_at) = slot(index, next_slot);
                next_slot += 1;
                (
                    "reschedule",
                    EventType::AppointmentRescheduled,
                    json!({"startsAt": starts_at, "endsAt": ends_at}),
                )
            } else if roll < 88 {
                ("cancel", EventType::AppointmentCancelled, json!({}))
            } else {
                ("complete", EventType::AppointmentCompleted, json!({}))
            };
            let path = format!("/v1/appointments/{appointment}/{action}");
            let done = run.mutate(&mut connection, &path, body, event_type, &mut rng).await.is_some();
            if done && action != "reschedule" {
                booked.swap_remove(at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_of_one_writer_never_overlap() {
        let (first_start, first_end) = slot(3, 0);
        let (second_start, _) = slot(3, 1);
        assert!(first_end <= second_start, "{first_end} > {second_start}");
        assert!(first_start < first_end);
    }
}
