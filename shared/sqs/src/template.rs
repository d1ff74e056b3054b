//! The listener parts of `template.yaml`, generated from the listener catalog, so that adding a
//! listener changes one place: [`Listener`] (and [`purpose`] / [`sends_notifications`] here, both
//! exhaustive matches that do not compile until the new listener is described).
//!
//! Invariants:
//! - Every per-listener region of the template lies between a `# generated: <region>` line and a
//!   `# end generated: <region>` line, and equals what [`render`] makes of it; a test fails on any
//!   drift and `UPDATE_TEMPLATE=1 cargo test -p clinic-sqs --lib template` rewrites the regions.
//! - Everything outside the markers is written by hand and left alone.
//! - Per listener: a queue with its dead-letter queue and redrive, a queue policy letting only the
//!   dispatcher send (one queue per listener, see this crate's root), a log group, a role that
//!   consumes only its own queue, a function running `clinic-listener`, a dead-letter alarm and the
//!   queue URLs as outputs; the dispatcher may send to every listener queue and both the dispatcher
//!   and housekeeping read the queue map; only notifying listeners may call SES and SNS.

use std::fmt::Write;

use clinic_core::events::EventType;
use clinic_core::listeners::{listeners, Listener};

use crate::config::{queue_url_var, template_logical_id as logical};

/// What the listener does, after its event types in the function's description.
fn purpose(listener: Listener) -> &'static str {
    match listener {
        Listener::PatientBookingConfirmation => "booking confirmation to the patient",
        Listener::PractitionerScheduleChange => "schedule change to the practitioner",
        Listener::PatientRescheduleNotice => "reschedule notice to the patient",
        Listener::PatientCancellationNotice => "cancellation notice to the patient",
        Listener::PatientReminder => "reminder to the patient",
        Listener::CancelFutureAppointments => "cancel the patient's future appointments (actor system)",
        Listener::WebhookFanOut => "webhook deliveries and their first attempt",
    }
}

/// Whether the listener sends to people right after its commit (the fast path): its function gets
/// `CLINIC_NOTIFIER` and its role the SES/SNS send policy.
fn sends_notifications(listener: Listener) -> bool {
    match listener {
        Listener::PatientBookingConfirmation
        | Listener::PractitionerScheduleChange
        | Listener::PatientRescheduleNotice
        | Listener::PatientCancellationNotice
        | Listener::PatientReminder => true,
        Listener::CancelFutureAppointments | Listener::WebhookFanOut => false,
    }
}

/// Extra environment lines of the listener's function (12 spaces of indentation).
fn extra_environment(listener: Listener) -> &'static str {
    match listener {
        Listener::WebhookFanOut => concat!(
            "          # Webhooks (docs/webhooks.md): first attempts go to public https endpoints only, through\n",
            "          # the VPC's NAT egress (docs/deploy.md, \"Webhook egress\"); bounded below the timeout.\n",
            "          CLINIC_WEBHOOKS_CONNECT_TIMEOUT_MS: \"5000\"\n",
            "          CLINIC_WEBHOOKS_TIMEOUT_MS: \"10000\"\n",
            "          # The KMS key that opens the endpoints' secrets (WebhookSecretsOpenPolicy), and the older\n",
            "          # keyring for values sealed before it: an ARN, read at start-up (WebhookKeyReadPolicy).\n",
            "          CLINIC_WEBHOOK_KMS_KEY_ID: !GetAtt WebhookSecretsKey.Arn\n",
            "          CLINIC_WEBHOOK_KEY_SECRET_ARN: !Ref WebhookKeySecret\n",
        ),
        _ => "",
    }
}

/// The event types a listener runs for, as the description names them.
fn events(listener: Listener) -> String {
    if listener == Listener::WebhookFanOut {
        return "subscribed events".into();
    }
    let types: Vec<&str> = EventType::ALL
        .iter()
        .filter(|event_type| listeners(**event_type).contains(&listener))
        .map(|event_type| event_type.as_str())
        .collect();
    types.join(" / ")
}

const LISTENER_BLOCK: &str = include_str!("template_listener.yaml");

fn listener_block(listener: Listener) -> String {
    let notifier = if sends_notifications(listener) {
        concat!(
            "          CLINIC_NOTIFIER: ses,sns # fast path: send right after the commit\n",
            "          CLINIC_PUBLIC_BASE_URL: !If [HasPublicBaseUrl, !Ref PublicBaseUrl, !Sub \"https://${HttpApi}.execute-api.${AWS::Region}.${AWS::URLSuffix}\"]\n",
        )
    } else {
        ""
    };
    LISTENER_BLOCK
        .replace("{Logical}", &logical(listener))
        .replace("{name}", listener.as_str())
        .replace("{summary}", &format!("{}: {}", events(listener), purpose(listener)))
        .replace("{notifier}\n", notifier)
        .replace("{extra_environment}\n", extra_environment(listener))
}

/// The text of one generated region (without its marker lines).
fn render(region: &str) -> Option<String> {
    let mut out = String::new();
    match region {
        "listener-queue-arns" => {
            for listener in Listener::ALL {
                let _ = writeln!(out, "                  - !GetAtt {}Queue.Arn", logical(*listener));
            }
        }
        "listener-queue-urls" => {
            for listener in Listener::ALL {
                let _ =
                    writeln!(out, "          {}: !Ref {}Queue", queue_url_var(*listener), logical(*listener));
            }
        }
        "listener-roles" => {
            for listener in Listener::ALL {
                let _ = writeln!(out, "        - !Ref {}Role", logical(*listener));
            }
        }
        "notifying-listener-roles" => {
            for listener in Listener::ALL.iter().filter(|listener| sends_notifications(**listener)) {
                let _ = writeln!(out, "        - !Ref {}Role", logical(*listener));
            }
        }
        "listeners" => {
            for listener in Listener::ALL {
                out.push_str(&listener_block(*listener));
            }
        }
        "listener-outputs" => {
            for (index, listener) in Listener::ALL.iter().enumerate() {
                if index > 0 {
                    out.push('\n');
                }
                let (logical, name) = (logical(*listener), listener.as_str());
                let _ = writeln!(out, "  {logical}QueueUrl:");
                let _ = writeln!(out, "    Description: Queue of listener {name}");
                let _ = writeln!(out, "    Value: !Ref {logical}Queue");
                let _ = writeln!(out, "  {logical}DeadLetterQueueUrl:");
                let _ = writeln!(
                    out,
                    "    Description: Dead-letter queue of listener {name} (redrive from the SQS console or start-message-move-task)"
                );
                let _ = writeln!(out, "    Value: !Ref {logical}DeadLetterQueue");
            }
        }
        _ => return None,
    }
    Some(out)
}

/// Rewrites every generated region of `template`; errors name a marker without its end or a region
/// this module does not know.
fn regenerate(template: &str) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut lines = template.split_inclusive('\n');
    let mut regions = 0;
    while let Some(line) = lines.next() {
        out.push_str(line);
        let Some(region) = line.trim().strip_prefix("# generated: ") else { continue };
        let region = region.split_whitespace().next().unwrap_or_default().to_string();
        let text = render(&region).ok_or_else(|| format!("unknown generated region {region:?}"))?;
        out.push_str(&text);
        let end = format!("# end generated: {region}");
        loop {
            let Some(skipped) = lines.next() else { return Err(format!("no {end:?} line")) };
            if skipped.trim() == end {
                out.push_str(skipped);
                break;
            }
        }
        regions += 1;
    }
    if regions == 0 {
        return Err("template.yaml has no generated region".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGIONS: &[&str] = &[
        "listener-queue-arns",
        "listener-queue-urls",
        "notifying-listener-roles",
        "listener-roles",
        "listeners",
        "listener-outputs",
    ];

    fn template_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../template.yaml")
    }

    #[test]
    fn the_templates_listener_regions_match_the_listener_catalog() {
        let path = template_path();
        let current = std::fs::read_to_string(&path).unwrap();
        let generated = regenerate(&current).unwrap();
        if std::env::var_os("UPDATE_TEMPLATE").is_some() {
            std::fs::write(&path, &generated).unwrap();
            return;
        }
        assert!(
            current == generated,
            "template.yaml's listener regions drifted from the listener catalog: run \
             UPDATE_TEMPLATE=1 cargo test -p clinic-sqs --lib template and review the diff"
        );
    }

    #[test]
    fn every_region_appears_in_the_template() {
        let current = std::fs::read_to_string(template_path()).unwrap();
        for region in REGIONS {
            let begin = format!("# generated: {region}");
            assert!(current.lines().filter(|line| line.trim().starts_with(&begin)).count() >= 1, "{region}");
        }
    }

    #[test]
    fn a_marker_without_its_end_or_an_unknown_region_is_an_error() {
        assert!(regenerate("a\n  # generated: listeners\nb\n").unwrap_err().contains("no"));
        assert!(regenerate("  # generated: nothing\n  # end generated: nothing\n")
            .unwrap_err()
            .contains("unknown"));
        assert!(regenerate("plain\n").is_err());
    }

    #[test]
    fn logical_ids_are_pascal_case_of_the_listener_name() {
        assert_eq!(logical(Listener::PatientBookingConfirmation), "PatientBookingConfirmation");
        assert_eq!(logical(Listener::WebhookFanOut), "WebhookFanOut");
        assert_eq!(
            events(Listener::PractitionerScheduleChange),
            "appointment.created / appointment.cancelled"
        );
    }
}
