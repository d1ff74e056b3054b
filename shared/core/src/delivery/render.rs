//! Rendering at send time: reload the appointment, the recipient and the workspace's time zone,
//! choose the channel from the recipient's contact data, and fill the template kept in the
//! repository (`templates/<template id>.txt`: a `subject:` line, an `sms:` line, `---`, the email body).
//! What an SMS may say is checked at start-up ([`super::sms`]).
//!
//! Who is notified, per template (the listener decides; see `listeners::workflows`):
//!
//! | template id | recipient | rule |
//! |-------------|-----------|------|
//! | `appointment.booking_confirmation` | patient | always (a patient cannot book; staff book for them) |
//! | `appointment.reschedule_notice` | patient | always (staff reschedule) |
//! | `appointment.cancellation_notice` | patient | always — also when the patient cancelled it themselves: it is their confirmation |
//! | `appointment.reminder` | patient | always (the reminders cron is the actor) |
//! | `appointment.schedule_change.booked` / `.cancelled` | practitioner | unless the acting staff member is that practitioner (`practitioners.member_id`): a staff member is never notified of their own change |
//!
//! Before anything is loaded for the message, the render re-applies the listener's freshness rule
//! to the appointment as it is now (`listeners::workflows`): a booking confirmation or reminder is
//! sent only while the appointment is still booked at the version of the event that caused it, a
//! practitioner's "booked" notice only while it is still booked, and nothing to a deleted patient.
//! A notice the state has made untrue ends `stale` (final, with the rule's reason code:
//! `appointment_not_booked`, `appointment_changed`, `patient_deleted`, `own_change`) and is never
//! sent. A patient gone otherwise is not contacted (`no_contact`, code `recipient_missing`).
//! Practitioner notices carry no patient data.
//!
//! Before a patient's message is filled, the contact policy ([`super::policy::decide`]) decides on
//! the chosen channel (a consented one is preferred, email first): `deferred` until the quiet hours
//! end, `suppressed` with its reason, or sent (a bypass of quiet hours is recorded on the row). An
//! email of a kind the patient may opt out of gets its one-click unsubscribe link
//! ([`super::unsubscribe`]) when the sender is configured with one.
//!
//! Invariants:
//! - The rendered text exists only in the returned [`OutgoingMessage`]; nothing here logs or stores
//!   it. Placeholders are a closed set; a template using another one fails the unit test below.
//! - Loading a patient's personal fields records a disclosure (purpose = the listener, the event id)
//!   on the same transaction as the load.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use deadpool_postgres::GenericClient;

use super::freshness;
use super::policy::{self, Decision, Notice, Preferences, QuietHours, SuppressReason};
use super::provider::{Channel, OutgoingMessage, Providers};
use super::sms;
use super::unsubscribe;
use super::{ClaimedDelivery, DeliveryConfig, RecipientKind};
use crate::db::sql;
use crate::disclosures::{self, Purpose};
use crate::domain::contact::{from_stored, MessageKind};
use crate::events::Actor;
use crate::ids::{AppointmentId, PatientId, PractitionerId};
use crate::{appointments, events, patients, practitioners, workspaces};

/// One template: the email subject, the SMS text and the email body, with `{placeholders}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Template {
    pub id: &'static str,
    pub subject: &'static str,
    pub sms: &'static str,
    pub body: &'static str,
}

macro_rules! templates {
    ($($id:literal),+ $(,)?) => {
        /// Every template id and its file's text.
        pub const TEMPLATE_FILES: &[(&str, &str)] = &[$(($id, include_str!(concat!("templates/", $id, ".txt"))),)+];
    };
}

templates!(
    "appointment.booking_confirmation",
    "appointment.reschedule_notice",
    "appointment.cancellation_notice",
    "appointment.reminder",
    "appointment.schedule_change.booked",
    "appointment.schedule_change.cancelled",
);

/// The placeholders a template may use.
pub const PLACEHOLDERS: &[&str] =
    &["recipient_name", "practitioner", "starts_at", "ends_at", "time_zone", "clinic"];

fn parse_template(id: &'static str, text: &'static str) -> Option<Template> {
    let (head, body) = text.split_once("\n---\n")?;
    let mut subject = None;
    let mut sms = None;
    for line in head.lines() {
        if let Some(value) = line.strip_prefix("subject: ") {
            subject = Some(value.trim());
        } else if let Some(value) = line.strip_prefix("sms: ") {
            sms = Some(value.trim());
        }
    }
    Some(Template { id, subject: subject?, sms: sms?, body })
}

/// The template with this id, when this build has it.
pub fn template(id: &str) -> Option<Template> {
    TEMPLATE_FILES.iter().find(|(known, _)| *known == id).and_then(|(id, text)| parse_template(id, text))
}

/// Replaces every `{name}` of `values` in `text`.
fn fill(text: &str, values: &[(&str, &str)]) -> String {
    let mut out = text.to_owned();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// A time as people of the clinic read it, in its zone: `Tuesday 1 December 2026, 14:30 CET`.
pub fn local_time(at: DateTime<Utc>, zone: Tz) -> String {
    at.with_timezone(&zone).format("%A %-d %B %Y, %H:%M %Z").to_string()
}

/// What the sender does with a claimed row.
#[derive(Debug)]
pub enum Prepared {
    /// Send it now; `bypassed_quiet_hours` when the policy let it through inside quiet hours.
    Send { message: OutgoingMessage, bypassed_quiet_hours: bool },
    /// No usable address or no provider for it (`no_contact`, with a code).
    NoContact(&'static str),
    /// The contact policy said not now: due again at this instant (`deferred`).
    Deferred(DateTime<Utc>),
    /// The contact policy said never (`suppressed`, with its reason).
    Suppressed(SuppressReason),
    /// The current state makes it untrue (the listener's freshness rule, with its reason code): it
    /// ends `stale` and is never sent.
    Stale(&'static str),
    /// This build cannot render it (unknown template, unreadable event): retried, never buried.
    NotRenderable(&'static str),
}

/// The disclosure purpose of a render is this prefix and the listener's name (`render:patient_reminder`).
pub const RENDER_PURPOSE_PREFIX: &str = "render:";

const PATIENT_OPT_OUT: &str =
    "SELECT notifications_opt_out FROM patients WHERE workspace_id = $1 AND id = $2";
const PRACTITIONER_CONTACT: &str =
    "SELECT email, phone FROM practitioners WHERE workspace_id = $1 AND id = $2";

struct Contact {
    name: String,
    email: Option<String>,
    phone: Option<String>,
    /// A patient's preferences (practitioners are staff: the patient policy does not apply).
    patient: Option<PatientPreferences>,
}

struct PatientPreferences {
    channels: Vec<Channel>,
    opt_outs: Vec<MessageKind>,
    opted_out_of_all: bool,
    time_zone: Option<String>,
}

/// An IANA name as a zone; a name the tz database does not know reads as UTC (logged, ids only).
fn zone_or_utc(name: &str, workspace_id: crate::ids::WorkspaceId) -> Tz {
    name.parse().unwrap_or_else(|_| {
        tracing::warn!(workspace_id = %workspace_id, "time zone is not an IANA name; reading it as UTC");
        Tz::UTC
    })
}

/// Reloads what `delivery` needs and renders it; records the disclosure when a patient's fields
/// were loaded. Run on a short transaction that commits before the provider call.
pub async fn prepare(
    client: &impl GenericClient,
    delivery: &ClaimedDelivery,
    providers: &Providers,
    config: &DeliveryConfig,
) -> Result<Prepared, tokio_postgres::Error> {
    let Some(template) = template(&delivery.template) else {
        return Ok(Prepared::NotRenderable("unknown_template"));
    };
    let Some(kind) = delivery.recipient_kind else {
        return Ok(Prepared::NotRenderable("unknown_recipient_kind"));
    };
    let envelope = match events::read::find(client, delivery.event_id).await {
        Ok(Some(envelope)) => envelope,
        Ok(None) => return Ok(Prepared::NoContact("event_missing")),
        Err(events::read::ReadError::Db(error)) => return Err(error),
        Err(events::read::ReadError::Unreadable(_)) => {
            return Ok(Prepared::NotRenderable("unreadable_event"))
        }
    };
    let ws = delivery.workspace_id;
    let appointment_id = AppointmentId::from_ulid(envelope.resource_id);
    let Some((appointment, parties)) =
        appointments::repo::find_with_parties(client, ws, appointment_id).await?
    else {
        return Ok(Prepared::NoContact("appointment_missing"));
    };
    // Freshness at send time: the template's rule, the one the listener applied before it committed
    // the row, against the state as it is now.
    if let Some(rule) = freshness::of_template(&delivery.template) {
        if let Some(reason) = freshness::stale_reason(&appointment, parties, &envelope, rule) {
            return Ok(Prepared::Stale(reason));
        }
    }
    let Some(practitioner) = practitioners::repo::find(client, ws, appointment.practitioner_id).await? else {
        return Ok(Prepared::NoContact("practitioner_missing"));
    };
    let contact = match kind {
        RecipientKind::Patient => {
            let id = PatientId::from_ulid(delivery.recipient_id);
            let Some(patient) = patients::repo::find(client, ws, id).await? else {
                return Ok(Prepared::NoContact("recipient_missing"));
            };
            // `render:<listener>`: the send-time render, apart from the listener's own reload.
            let name = format!("{RENDER_PURPOSE_PREFIX}{}", delivery.listener);
            let purpose = Purpose { name: &name, event_id: Some(delivery.event_id) };
            disclosures::record(client, ws, &Actor::System, &[id], purpose).await?;
            let opted_out = sql::query_opt(client, PATIENT_OPT_OUT, &[&ws, &id]).await?;
            let opted_out_of_all = opted_out.is_some_and(|row| row.get::<_, bool>(0));
            Contact {
                name: format!("{} {}", patient.given_name, patient.family_name),
                email: patient.email,
                phone: patient.phone,
                patient: Some(PatientPreferences {
                    channels: patient.contact_channels,
                    opt_outs: patient.contact_opt_outs,
                    opted_out_of_all,
                    time_zone: patient.time_zone,
                }),
            }
        }
        RecipientKind::Practitioner => {
            let id = PractitionerId::from_ulid(delivery.recipient_id);
            let Some(row) = sql::query_opt(client, PRACTITIONER_CONTACT, &[&ws, &id]).await? else {
                return Ok(Prepared::NoContact("recipient_missing"));
            };
            Contact {
                name: practitioner.display_name.clone(),
                email: row.get(0),
                phone: row.get(1),
                patient: None,
            }
        }
    };
    let usable =
        |value: &Option<String>| value.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
    let (email, phone) = (usable(&contact.email), usable(&contact.phone));
    if email.is_none() && phone.is_none() {
        return Ok(Prepared::NoContact("no_contact"));
    }
    // The addresses a provider can reach, email first; a patient's consented channel is preferred.
    let reachable: Vec<(Channel, String)> = [(Channel::Email, email), (Channel::Sms, phone)]
        .into_iter()
        .filter_map(|(channel, to)| Some((channel, to?)))
        .filter(|(channel, _)| providers.for_channel(*channel).is_some())
        .collect();
    let consented = |channel: &Channel| contact.patient.as_ref().is_none_or(|p| p.channels.contains(channel));
    let chosen = reachable.iter().find(|(channel, _)| consented(channel)).or(reachable.first());
    let Some((channel, to)) = chosen.cloned() else {
        return Ok(Prepared::NoContact("no_provider_for_channel"));
    };
    let Some(settings) = workspaces::contact_settings(client, ws).await? else {
        return Ok(Prepared::NoContact("workspace_missing"));
    };
    let zone = zone_or_utc(&settings.time_zone, ws);
    // The contact policy (DESIGN §5e), before every send to a patient.
    let mut bypassed_quiet_hours = false;
    let mut unsubscribe_url = None;
    if let (Some(patient), Some(kind)) = (&contact.patient, policy::kind_of_template(template.id)) {
        let patient_zone = patient.time_zone.as_deref().map_or(zone, |name| zone_or_utc(name, ws));
        let preferences = Preferences {
            channels: patient.channels.clone(),
            opt_outs: patient.opt_outs.clone(),
            opted_out_of_all: patient.opted_out_of_all,
            zone: patient_zone,
            quiet_hours: QuietHours { start: settings.quiet_hours_start, end: settings.quiet_hours_end },
            bypass: from_stored(&settings.quiet_hours_bypass, MessageKind::parse),
        };
        let now = Utc::now();
        let by_clinic = !matches!(envelope.actor, Actor::Patient { .. });
        let changes_today = by_clinic && policy::same_local_day(appointment.starts_at, now, patient_zone);
        match policy::decide(&preferences, channel, Notice { kind, changes_today }, now) {
            Decision::Send { bypassed_quiet_hours: bypassed } => bypassed_quiet_hours = bypassed,
            Decision::Defer { until } => return Ok(Prepared::Deferred(until)),
            Decision::Suppress(reason) => return Ok(Prepared::Suppressed(reason)),
        }
        // RFC 8058 one-click unsubscribe: an email of a kind the patient may opt out of.
        if let (Channel::Email, Some(links)) = (channel, &config.unsubscribe) {
            if unsubscribe::is_optional(kind) {
                let patient_id = PatientId::from_ulid(delivery.recipient_id);
                unsubscribe_url = Some(links.url(ws, patient_id, kind, now));
            }
        }
    }
    let starts_at = local_time(appointment.starts_at, zone);
    let ends_at = local_time(appointment.ends_at, zone);
    let clinic = match channel {
        Channel::Email => settings.name.clone(),
        Channel::Sms => sms::gsm7_safe(&settings.name, sms::CLINIC_MAX),
    };
    let values = [
        ("clinic", clinic.as_str()),
        ("recipient_name", contact.name.as_str()),
        ("practitioner", practitioner.display_name.as_str()),
        ("starts_at", starts_at.as_str()),
        ("ends_at", ends_at.as_str()),
        ("time_zone", zone.name()),
    ];
    let (from, body) = match channel {
        Channel::Email => (config.email_from.clone(), fill(template.body, &values)),
        Channel::Sms => (config.sms_sender_id.clone(), fill(template.sms, &values)),
    };
    // The start-up check proved the template fits one segment with its longest values; counted again.
    if channel == Channel::Sms && sms::gsm7_units(&body).is_none_or(|units| units > sms::SEGMENT) {
        return Ok(Prepared::NotRenderable("sms_too_long"));
    }
    let message = OutgoingMessage {
        notification_id: delivery.id,
        template: template.id.to_owned(),
        channel,
        idempotency_key: delivery.idempotency_key.clone(),
        to,
        from,
        subject: template.subject.to_owned(),
        body,
        unsubscribe_url,
    };
    Ok(Prepared::Send { message, bypassed_quiet_hours })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_parses_and_uses_known_placeholders_only() {
        for (id, _) in TEMPLATE_FILES {
            let template = template(id).unwrap_or_else(|| panic!("{id} does not parse"));
            for text in [template.subject, template.sms, template.body] {
                let mut rest = text;
                while let Some(start) = rest.find('{') {
                    let end = rest[start..].find('}').expect("unclosed placeholder") + start;
                    let name = &rest[start + 1..end];
                    assert!(PLACEHOLDERS.contains(&name), "{id} uses unknown placeholder {name}");
                    rest = &rest[end + 1..];
                }
            }
            assert!(!template.subject.contains('{'), "{id}: subjects carry no personal values");
        }
        assert!(template("appointment.unknown").is_none());
    }

    #[test]
    fn times_are_rendered_in_the_zone() {
        let at = "2026-12-01T13:30:00Z".parse().unwrap();
        assert_eq!(local_time(at, "Europe/Berlin".parse().unwrap()), "Tuesday 1 December 2026, 14:30 CET");
        assert_eq!(local_time(at, Tz::UTC), "Tuesday 1 December 2026, 13:30 UTC");
        let summer = "2026-07-01T13:30:00Z".parse().unwrap();
        assert_eq!(
            local_time(summer, "America/New_York".parse().unwrap()),
            "Wednesday 1 July 2026, 09:30 EDT"
        );
    }

    #[test]
    fn fill_replaces_every_occurrence() {
        assert_eq!(fill("{a} and {a} {b}", &[("a", "x"), ("b", "y")]), "x and x y");
    }
}
