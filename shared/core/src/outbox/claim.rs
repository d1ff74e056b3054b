//! Claiming due outbox rows: one statement (`claim.sql`), one round trip, no per-event queries.

use std::sync::OnceLock;
use std::time::Duration;

use deadpool_postgres::GenericClient;

use crate::db::sql;
use crate::events::read::{envelope_from_row, ENVELOPE_COLUMNS};
use crate::events::Envelope;
use crate::ids::{ClaimToken, EventId};
use crate::listeners::{listeners, Listener};

fn claim_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        include_str!("claim.sql")
            .replace("{ENVELOPE_COLUMNS}", ENVELOPE_COLUMNS)
            .replace("{HELD_CODE}", super::HELD_CODE)
    })
}

/// One claimed, readable row.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub envelope: Envelope,
    /// Attempts including this one (1 on the first claim).
    pub attempts: i32,
    /// The row was `claimed` by someone whose lease expired (a presumed-dead dispatcher).
    pub lease_expired: bool,
    /// Set by an operator replay: only these listeners start.
    pub only_listeners: Option<Vec<Listener>>,
    /// Listeners recorded as started by earlier attempts (empty on the first attempt).
    pub started: Vec<Listener>,
    /// Listeners paused in the event's workspace ([`crate::operator::pause`]): not started, held.
    pub paused: Vec<Listener>,
}

impl Claimed {
    /// The listeners this attempt must start: routed for the event type, restricted to
    /// `only_listeners` when set, minus those already started and those paused.
    pub fn to_start(&self) -> impl Iterator<Item = Listener> + '_ {
        self.due().filter(move |listener| !self.paused.contains(listener))
    }

    /// The listeners this attempt holds back because they are paused (the row is then held).
    pub fn held(&self) -> impl Iterator<Item = Listener> + '_ {
        self.due().filter(move |listener| self.paused.contains(listener))
    }

    fn due(&self) -> impl Iterator<Item = Listener> + '_ {
        listeners(self.envelope.event_type).iter().copied().filter(move |listener| {
            self.only_listeners.as_ref().is_none_or(|only| only.contains(listener))
                && !self.started.contains(listener)
        })
    }
}

/// A claimed row whose event this build cannot read (unknown type, corrupt actor); it goes `dead`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub event_id: EventId,
    pub attempts: i32,
    pub problem: String,
}

/// The result of one claim: the token fencing every later mark, and the claimed rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub token: ClaimToken,
    pub rows: Vec<Claimed>,
    pub unreadable: Vec<Unreadable>,
}

impl Claim {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.unreadable.is_empty()
    }
}

fn parse_listeners(names: Option<Vec<String>>) -> Option<Vec<Listener>> {
    names.map(|names| {
        names
            .iter()
            .filter_map(|name| {
                let listener = Listener::parse(name);
                if listener.is_none() {
                    tracing::warn!(listener = %name, "outbox names a listener this build does not know");
                }
                listener
            })
            .collect()
    })
}

/// Claims up to `batch` due rows for `claimer` under a fresh token and a lease of `lease`.
pub async fn claim(
    client: &impl GenericClient,
    batch: i64,
    lease: Duration,
    claimer: &str,
) -> Result<Claim, tokio_postgres::Error> {
    let token = ClaimToken::generate();
    let lease_ms = lease.as_secs_f64() * 1000.0;
    let rows = sql::query(client, claim_sql(), &[&batch, &token, &claimer, &lease_ms]).await?;
    let mut claim = Claim { token, rows: Vec::with_capacity(rows.len()), unreadable: Vec::new() };
    for row in &rows {
        let attempts: i32 = row.get(0);
        let previous: &str = row.get(1);
        match envelope_from_row(row, 4) {
            Ok(envelope) => claim.rows.push(Claimed {
                envelope,
                attempts,
                lease_expired: previous == "claimed",
                only_listeners: parse_listeners(row.get(2)),
                started: parse_listeners(row.get(3)).unwrap_or_default(),
                paused: parse_listeners(row.get("paused")).unwrap_or_default(),
            }),
            Err(error) => claim.unreadable.push(Unreadable {
                event_id: error.event_id,
                attempts,
                problem: error.problem,
            }),
        }
    }
    Ok(claim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Actor, EventType, ResourceType, ENVELOPE_VERSION};
    use crate::ids::{CausationId, CorrelationId, WorkspaceId};

    fn claimed(only: Option<Vec<Listener>>, started: Vec<Listener>) -> Claimed {
        Claimed {
            envelope: Envelope {
                id: EventId::generate(),
                event_type: EventType::AppointmentCancelled,
                version: ENVELOPE_VERSION,
                workspace_id: WorkspaceId::generate(),
                actor: Actor::System,
                occurred_at: chrono::Utc::now(),
                recorded_at: chrono::Utc::now(),
                resource_type: ResourceType::Appointment,
                resource_id: ulid::Ulid::generate(),
                resource_version: 2,
                correlation_id: CorrelationId::generate(),
                causation_id: CausationId(ulid::Ulid::generate()),
            },
            attempts: 2,
            lease_expired: false,
            only_listeners: only,
            started,
            paused: vec![],
        }
    }

    #[test]
    fn starts_routed_listeners_minus_started_within_only_listeners() {
        let all = claimed(None, vec![]);
        assert_eq!(
            all.to_start().collect::<Vec<_>>(),
            [Listener::PatientCancellationNotice, Listener::PractitionerScheduleChange]
        );
        let retry = claimed(None, vec![Listener::PatientCancellationNotice]);
        assert_eq!(retry.to_start().collect::<Vec<_>>(), [Listener::PractitionerScheduleChange]);
        let replay =
            claimed(Some(vec![Listener::PatientCancellationNotice, Listener::PatientReminder]), vec![]);
        assert_eq!(replay.to_start().collect::<Vec<_>>(), [Listener::PatientCancellationNotice]);
        let nothing = claimed(Some(vec![]), vec![]);
        assert_eq!(nothing.to_start().count(), 0);
        let mut paused = claimed(None, vec![]);
        paused.paused = vec![Listener::PatientCancellationNotice];
        assert_eq!(paused.to_start().collect::<Vec<_>>(), [Listener::PractitionerScheduleChange]);
        assert_eq!(paused.held().collect::<Vec<_>>(), [Listener::PatientCancellationNotice]);
    }
}
