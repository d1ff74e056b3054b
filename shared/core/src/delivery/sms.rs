//! What an SMS may say (DESIGN §5e, issue 40 item 4), checked for every template at start-up
//! ([`check_templates`], from [`super::DeliveryConfig::validate`]) and by the tests below over every
//! template and every time zone:
//!
//! | rule | how it holds |
//! |------|--------------|
//! | at most 160 GSM-7 characters (one segment) | the template's text with every placeholder at its longest ([`CLINIC_MAX`] for the clinic's name, [`STARTS_AT_MAX`] for a time in any zone) counts at most [`SEGMENT`] GSM-7 units; values are made GSM-7 ([`gsm7_safe`]) before they are filled in |
//! | names the clinic | the text holds `{clinic}` (the workspace's name, cut to [`CLINIC_MAX`]) |
//! | ends with the opt-out instruction | the text ends with [`OPT_OUT_INSTRUCTION`] (SNS honours STOP replies) |
//! | never a reason, a diagnosis or a specialty | only [`SMS_PLACEHOLDERS`] may be used — no reason, no practitioner (whose name or title can tell a specialty) — and the literal text holds none of [`FORBIDDEN_WORDS`] |
//!
//! Invariants: a template that breaks a rule stops the process at start-up (a configuration error),
//! so no message of it is ever rendered; the render re-counts the filled text and refuses to send an
//! SMS over one segment (`sms_too_long`, never expected).

/// One SMS segment in GSM-7 units.
pub const SEGMENT: usize = 160;
/// The longest clinic name an SMS carries (longer ones are cut).
pub const CLINIC_MAX: usize = 30;
/// The longest rendered `{starts_at}` in any zone (`Wednesday 30 September 2026, 23:59 +0530`);
/// the test below checks it against every zone of the tz database.
pub const STARTS_AT_MAX: usize = 44;
/// The text every SMS ends with.
pub const OPT_OUT_INSTRUCTION: &str = "Reply STOP to opt out.";
/// The placeholders an SMS may use.
pub const SMS_PLACEHOLDERS: &[&str] = &["clinic", "starts_at"];
/// Words an SMS template's own text may not hold (case-insensitive).
pub const FORBIDDEN_WORDS: &[&str] =
    &["reason", "diagnos", "specialt", "condition", "treatment", "test result"];

const GSM7_BASIC: &str = "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?\
¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà";
const GSM7_EXTENDED: &str = "^{}\\[~]|€\u{c}";

/// The GSM-7 units `text` takes (extended characters count two); `None` when a character is not
/// in GSM-7 (the message would go as UCS-2, 70 characters a segment).
pub fn gsm7_units(text: &str) -> Option<usize> {
    text.chars().try_fold(0, |units, c| {
        if GSM7_BASIC.contains(c) {
            Some(units + 1)
        } else if GSM7_EXTENDED.contains(c) {
            Some(units + 2)
        } else {
            None
        }
    })
}

/// `value` as GSM-7 basic characters only, at most `max` of them: other characters become `?`.
pub fn gsm7_safe(value: &str, max: usize) -> String {
    value
        .chars()
        .map(|c| if GSM7_BASIC.contains(c) && c != '\n' && c != '\r' { c } else { '?' })
        .take(max)
        .collect()
}

/// The placeholders `{name}` used in `text`.
pub fn placeholders(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let Some(end) = rest[start..].find('}') else { break };
        names.push(&rest[start + 1..start + end]);
        rest = &rest[start + end + 1..];
    }
    names
}

/// The first rule `sms` breaks, if any.
pub fn check(sms: &str) -> Result<(), String> {
    let used = placeholders(sms);
    if let Some(name) = used.iter().find(|name| !SMS_PLACEHOLDERS.contains(name)) {
        return Err(format!("uses {{{name}}}; an SMS may use only {SMS_PLACEHOLDERS:?}"));
    }
    if !used.contains(&"clinic") {
        return Err("does not name the clinic ({clinic})".into());
    }
    if !sms.ends_with(OPT_OUT_INSTRUCTION) {
        return Err(format!("does not end with \"{OPT_OUT_INSTRUCTION}\""));
    }
    let lower = sms.to_lowercase();
    if let Some(word) = FORBIDDEN_WORDS.iter().find(|word| lower.contains(*word)) {
        return Err(format!("holds \"{word}\": an SMS never carries a reason, a diagnosis or a specialty"));
    }
    let longest =
        sms.replace("{clinic}", &"C".repeat(CLINIC_MAX)).replace("{starts_at}", &"S".repeat(STARTS_AT_MAX));
    match gsm7_units(&longest) {
        None => Err("holds a character outside GSM-7".into()),
        Some(units) if units > SEGMENT => {
            Err(format!("takes {units} GSM-7 characters with its longest values; at most {SEGMENT}"))
        }
        Some(_) => Ok(()),
    }
}

/// Checks every template's SMS text; the message names the template and the rule it breaks.
pub fn check_templates() -> Result<(), String> {
    for (id, _) in super::render::TEMPLATE_FILES {
        let template = super::render::template(id).ok_or_else(|| format!("template {id} does not parse"))?;
        check(template.sms).map_err(|rule| format!("the SMS of template {id} {rule}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, Utc};
    use chrono_tz::TZ_VARIANTS;

    use super::*;
    use crate::delivery::render::{local_time, template, TEMPLATE_FILES};

    #[test]
    fn every_template_keeps_the_sms_rules() {
        check_templates().unwrap();
    }

    #[test]
    fn the_rules_refuse_what_they_say() {
        let ok = "{clinic}: your appointment is on {starts_at}. Reply STOP to opt out.";
        assert!(check(ok).is_ok());
        assert!(check("{clinic}: {starts_at} with {practitioner}. Reply STOP to opt out.").is_err());
        assert!(check("Your appointment is on {starts_at}. Reply STOP to opt out.").is_err());
        assert!(check("{clinic}: your appointment is on {starts_at}.").is_err());
        assert!(check("{clinic}: the reason for your visit, {starts_at}. Reply STOP to opt out.").is_err());
        assert!(check(&format!("{{clinic}}: {}. Reply STOP to opt out.", "x".repeat(120))).is_err());
        assert!(check("{clinic}: your appointment is on {starts_at} ✓. Reply STOP to opt out.").is_err());
        assert_eq!(gsm7_units("a€"), Some(3));
        assert_eq!(gsm7_safe("Clínica Saúde\n", 30), "Cl?nica Sa?de?");
    }

    /// Every template, filled with the longest clinic name and a time in every zone of the tz
    /// database (on the longest day and month names, across the year for DST abbreviations), fits
    /// one GSM-7 segment, names the clinic and ends with the opt-out instruction. The templates have
    /// one locale (English) today; a new locale's files join this loop.
    #[test]
    fn every_template_under_every_zone_fits_one_segment() {
        let clinic = gsm7_safe(&"Ł".repeat(200), CLINIC_MAX);
        let wednesday: DateTime<Utc> = "2026-09-30T23:59:00Z".parse().unwrap();
        for (id, _) in TEMPLATE_FILES {
            let sms = template(id).unwrap().sms;
            for zone in TZ_VARIANTS {
                for days in [0, 91, 182, 273] {
                    let starts_at = local_time(wednesday + Duration::days(days), zone);
                    assert!(starts_at.chars().count() <= STARTS_AT_MAX, "{zone}: {starts_at}");
                    let text = sms.replace("{clinic}", &clinic).replace("{starts_at}", &starts_at);
                    let units = gsm7_units(&text).unwrap_or_else(|| panic!("{id} {zone}: not GSM-7: {text}"));
                    assert!(units <= SEGMENT, "{id} {zone}: {units} units: {text}");
                    assert!(text.contains(&clinic) && text.ends_with(OPT_OUT_INSTRUCTION), "{id}");
                }
            }
        }
    }
}
