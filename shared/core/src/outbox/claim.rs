//! Claiming due outbox rows: one statement (`claim.sql`), one round trip, no per-event queries.

use std::sync::OnceLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use crate::db::sql;
use crate::events::read::{envelope_from_row, ENVELOPE_COLUMNS};
use crate::events::Envelope;
use crate::ids::{ClaimToken, EventId};
use crate::listeners::{routed, Listener};

fn claim_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let queue = crate::lease::OUTBOX;
        include_str!("claim.sql")
            .replace("{DUE}", &queue.due(""))
            .replace("{CLAIM_OR_BURY}", &queue.claim_or_bury_set("o", "$5", "$2::uuid", "$4", Some("$3")))
            .replace("{DEAD}", &format!("'{}'", queue.stored.dead))
            .replace("{ENVELOPE_COLUMNS}", ENVELOPE_COLUMNS)
            .replace("{SUBSCRIBED_TO_E}", &crate::webhooks::fanout::subscribed("e.type"))
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
    /// Names in `only_listeners` this build does not know (a newer build's listeners, mid-deploy):
    /// the row cannot finish here and is held for a build that knows them.
    pub unknown_listeners: Vec<String>,
    /// Listeners paused in the event's workspace ([`crate::operator::pause`]): not started, held.
    pub paused: Vec<Listener>,
    /// A webhook endpoint of the workspace that collects deliveries (enabled, or off for less than
    /// [`crate::webhooks::fanout::HOLD_DAYS`]: held until it is enabled) subscribes to the event's
    /// type: the webhook fan-out is routed ([`crate::listeners::routed`]).
    pub webhooks: bool,
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
        routed(self.envelope.event_type, self.webhooks).filter(move |listener| {
            self.only_listeners.as_ref().is_none_or(|only| only.contains(listener))
                && !self.started.contains(listener)
        })
    }
}

/// A claimed row whose event this build cannot read: a type this build does not know (held for a
/// newer build, never buried) or a corrupt row (`dead`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub event_id: EventId,
    pub attempts: i32,
    pub problem: String,
    /// The event names a type (or resource type) this build does not know.
    pub unknown_to_build: bool,
}

/// A row the claim buried instead of claiming: its attempts had reached the ceiling (its last
/// attempt's dispatcher died before marking it). It is already `dead` (`attempts_exhausted`).
#[derive(Debug, Clone, PartialEq)]
pub struct Buried {
    pub event_id: EventId,
    pub attempts: i32,
    /// The envelope, when this build can read it.
    pub envelope: Option<Envelope>,
}

/// The result of one claim: the token fencing every later mark, and the claimed rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub token: ClaimToken,
    pub rows: Vec<Claimed>,
    pub unreadable: Vec<Unreadable>,
    pub buried: Vec<Buried>,
    /// The oldest `available_at` among the rows taken, as it was before the claim (where the scan
    /// found its first row); `None` when nothing was taken.
    pub oldest_due: Option<DateTime<Utc>>,
}

impl Claim {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.unreadable.is_empty() && self.buried.is_empty()
    }

    /// Every row the claim statement touched (claimed, unreadable or buried).
    pub fn len(&self) -> usize {
        self.rows.len() + self.unreadable.len() + self.buried.len()
    }
}

/// The known listeners among `names`, and the names this build does not know (logged).
fn parse_listeners(names: Vec<String>) -> (Vec<Listener>, Vec<String>) {
    let mut known = Vec::with_capacity(names.len());
    let mut unknown = Vec::new();
    for name in names {
        match Listener::parse(&name) {
            Some(listener) => known.push(listener),
            None => {
                tracing::warn!(listener = %name, "outbox names a listener this build does not know; retrying it later");
                unknown.push(name);
            }
        }
    }
    (known, unknown)
}

/// Claims up to `batch` due rows for `claimer` under a fresh token and a lease of `lease`, with no
/// attempt ceiling (see [`claim_with_ceiling`]).
pub async fn claim(
    client: &impl GenericClient,
    batch: i64,
    lease: Duration,
    claimer: &str,
) -> Result<Claim, tokio_postgres::Error> {
    claim_with_ceiling(client, batch, lease, claimer, i32::MAX).await
}

/// Like [`claim`], burying (not claiming) due rows whose attempts already reached `max_attempts`.
pub async fn claim_with_ceiling(
    client: &impl GenericClient,
    batch: i64,
    lease: Duration,
    claimer: &str,
    max_attempts: i32,
) -> Result<Claim, tokio_postgres::Error> {
    claim_above(client, batch, lease, claimer, max_attempts, None).await
}

/// Like [`claim_with_ceiling`], taking only rows due at or after `floor` (`None`: every due row).
/// A floored claim skips older due rows: the dispatcher sets a floor only while a backlog lasts and
/// scans from the start regularly (dispatch/floor.rs).
pub async fn claim_above(
    client: &impl GenericClient,
    batch: i64,
    lease: Duration,
    claimer: &str,
    max_attempts: i32,
    floor: Option<DateTime<Utc>>,
) -> Result<Claim, tokio_postgres::Error> {
    let token = ClaimToken::generate();
    let lease_ms = lease.as_secs_f64() * 1000.0;
    let rows = sql::query(client, claim_sql(), &[&batch, &token, &claimer, &lease_ms, &max_attempts, &floor])
        .await?;
    let mut claim = Claim {
        token,
        rows: Vec::with_capacity(rows.len()),
        unreadable: Vec::new(),
        buried: Vec::new(),
        oldest_due: rows.iter().map(|row| row.get::<_, DateTime<Utc>>("previous_available_at")).min(),
    };
    for row in &rows {
        let attempts: i32 = row.get(0);
        let previous: &str = row.get(1);
        let envelope = envelope_from_row(row, 4);
        if previous == "buried" {
            let event_id = envelope.as_ref().map_or_else(|e| e.event_id, |e| e.id);
            claim.buried.push(Buried { event_id, attempts, envelope: envelope.ok() });
            continue;
        }
        match envelope {
            Ok(envelope) => {
                let only: Option<Vec<String>> = row.get(2);
                let (only_listeners, unknown_listeners) = match only.map(parse_listeners) {
                    Some((known, unknown)) => (Some(known), unknown),
                    None => (None, Vec::new()),
                };
                let started: Option<Vec<String>> = row.get(3);
                claim.rows.push(Claimed {
                    envelope,
                    attempts,
                    lease_expired: previous == "claimed",
                    only_listeners,
                    started: started.map(|names| parse_listeners(names).0).unwrap_or_default(),
                    unknown_listeners,
                    paused: row
                        .get::<_, Option<Vec<String>>>("paused")
                        .map(|names| parse_listeners(names).0)
                        .unwrap_or_default(),
                    webhooks: row.get("webhooks"),
                })
            }
            Err(error) => claim.unreadable.push(Unreadable {
                event_id: error.event_id,
                attempts,
                problem: error.problem,
                unknown_to_build: error.unknown_to_build,
            }),
        }
    }
    Ok(claim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventType;

    fn claimed(only: Option<Vec<Listener>>, started: Vec<Listener>) -> Claimed {
        Claimed {
            envelope: Envelope::sample(EventType::AppointmentCancelled),
            attempts: 2,
            lease_expired: false,
            only_listeners: only,
            started,
            unknown_listeners: Vec::new(),
            paused: vec![],
            webhooks: false,
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
