//! Value types: each has private fields and a `parse` that returns a [`FieldError`] naming the field.
//!
//! Once constructed, a value is known to be valid: names are trimmed and non-empty, times are UTC and
//! within a sane range, a [`TimeSlot`] ends after it starts. Text never contains NUL (PostgreSQL
//! cannot store it); other characters, including quotes and SQL meta-characters, are kept verbatim.

use chrono::{DateTime, Datelike, NaiveDate, SubsecRound, Timelike, Utc};

use super::input::FieldError;

fn text(field: &str, raw: String, max_chars: usize) -> Result<String, FieldError> {
    if raw.contains('\0') {
        return Err(FieldError::new(field, "must not contain NUL characters"));
    }
    if raw.trim().is_empty() {
        return Err(FieldError::new(field, "must not be empty"));
    }
    if raw.chars().count() > max_chars {
        return Err(FieldError::new(field, format!("must be at most {max_chars} characters")));
    }
    Ok(raw)
}

macro_rules! text_value {
    ($(#[$doc:meta])* $name:ident, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name(String);

        impl $name {
            pub fn parse(field: &str, raw: String) -> Result<Self, FieldError> {
                text(field, raw, $max).map(Self)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        crate::inline_schema!($name, |_: &mut schemars::SchemaGenerator| {
            super::schema::text($max)
        });
    };
}

text_value!(
    /// A given or family name, or a practitioner's display name (health data for patients).
    Name,
    200
);
text_value!(
    /// Free text about an appointment or a cancellation: health data, never logged or sent.
    Reason,
    2000
);
text_value!(
    /// A practitioner's specialty.
    Specialty,
    200
);

/// An email address: one `@` with text on both sides, no white space or control characters, at most
/// 254 characters (counted as characters, as JSON Schema's `maxLength` does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email(String);

impl Email {
    /// The most characters an address may have.
    pub const MAX_CHARS: usize = 254;

    /// [`Email::parse`]'s rule as a pattern: text without `@`, white space (Rust's `is_whitespace`,
    /// U+0085 included) or control characters (`is_control`: C0, DEL and C1) on both sides of one `@`.
    pub const PATTERN: &str = concat!(
        r"^[^",
        super::schema::white_space!(),
        r"@\x00-\x1f\x7f-\x9f]+@[^",
        super::schema::white_space!(),
        r"@\x00-\x1f\x7f-\x9f]+$"
    );

    pub fn parse(field: &str, raw: String) -> Result<Self, FieldError> {
        let valid = raw.chars().count() <= Self::MAX_CHARS
            && !raw.chars().any(|c| c.is_whitespace() || c.is_control())
            && matches!(raw.split_once('@'), Some((local, domain))
                if !local.is_empty() && !domain.is_empty() && !domain.contains('@'));
        if valid {
            Ok(Self(raw))
        } else {
            Err(FieldError::new(field, "must be an email address"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

crate::inline_schema!(Email, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "maxLength": Self::MAX_CHARS,
        "pattern": Self::PATTERN,
        "description": "An address: one @ with text on both sides, no white space or control characters, at most 254 characters. The API checks this shape only (not the format \"email\" grammar); delivery finds out the rest."
    })
});

/// A phone number: digits with optional `+`, spaces, dots, dashes and parentheses; 5–20 digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phone(String);

impl Phone {
    /// The most characters (all ASCII, so bytes) a number may have.
    pub const MAX_CHARS: usize = 32;

    /// [`Phone::parse`]'s rule as a pattern: 5 to 20 digits, with the separators ` +().-` around them.
    pub const PATTERN: &str = r"^[ +().-]*([0-9][ +().-]*){5,20}$";

    pub fn parse(field: &str, raw: String) -> Result<Self, FieldError> {
        let allowed = raw.chars().all(|c| c.is_ascii_digit() || " +-.()".contains(c));
        let digits = raw.chars().filter(char::is_ascii_digit).count();
        if allowed && (5..=20).contains(&digits) && raw.len() <= Self::MAX_CHARS {
            Ok(Self(raw))
        } else {
            Err(FieldError::new(field, "must be a phone number (5 to 20 digits)"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

crate::inline_schema!(Phone, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "maxLength": Self::MAX_CHARS,
        "pattern": Self::PATTERN,
        "description": "5 to 20 digits, with spaces and + - . ( ) allowed between them."
    })
});

/// A date of birth as [`parse_date_of_birth`] reads it, for a request field's schema: use with
/// `#[schemars(with = "DateOfBirth")]` on the parsed `NaiveDate`. Not in the future depends on today's
/// date, which JSON Schema cannot state: the pattern bounds the year to 1900-2099.
pub struct DateOfBirth;

crate::inline_schema!(DateOfBirth, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "format": "date",
        "pattern": "^(19|20)[0-9]{2}-[0-9]{2}-[0-9]{2}$",
        "description": "YYYY-MM-DD, from 1900-01-01 to today. Not in the future is checked against today's date, which JSON Schema cannot state (the pattern bounds the year to 1900-2099)."
    })
});

/// A date of birth: `YYYY-MM-DD`, not in the future, not before 1900.
pub fn parse_date_of_birth(field: &str, raw: &str) -> Result<NaiveDate, FieldError> {
    let date = NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .filter(|_| raw.len() == 10)
        .ok_or_else(|| FieldError::new(field, "must be a date as YYYY-MM-DD"))?;
    if date.year() < 1900 || date > Utc::now().date_naive() {
        return Err(FieldError::new(field, "must be a past date after 1900-01-01"));
    }
    Ok(date)
}

/// The current time at PostgreSQL's precision (microseconds), so a value answered before and after
/// a round trip through the database is the same.
pub fn now() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// An RFC 3339 instant in UTC (`Z` or `+00:00`), between the years 1900 and 9999.
pub fn parse_utc(field: &str, raw: &str) -> Result<DateTime<Utc>, FieldError> {
    let parsed = DateTime::parse_from_rfc3339(raw)
        .map_err(|_| FieldError::new(field, "must be an RFC 3339 time, e.g. 2026-12-01T09:00:00Z"))?;
    if parsed.offset().local_minus_utc() != 0 {
        return Err(FieldError::new(field, "must be in UTC (end with Z)"));
    }
    let utc = parsed.with_timezone(&Utc).trunc_subsecs(6);
    // chrono keeps a leap second (`23:59:60`) as a second that sorts before the next minute, while
    // PostgreSQL stores it as the next minute: the two would disagree about ordering (a slot ending at
    // 00:00:00 would start after it ends once stored). Reject it with the field named.
    if utc.nanosecond() >= 1_000_000_000 {
        return Err(FieldError::new(field, "must not be a leap second (23:59:60)"));
    }
    if !(1900..=9999).contains(&utc.year()) {
        return Err(FieldError::new(field, "must be between the years 1900 and 9999"));
    }
    Ok(utc)
}

/// When an appointment takes place: `starts_at < ends_at`, at most 24 hours long.
///
/// Its schema is the two request fields (`startsAt`, `endsAt`) that [`TimeSlot::parse`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeSlot {
    /// RFC 3339 in UTC (Z or +00:00), years 1900-9999. endsAt must be after startsAt and at most 24 hours later: a rule between two fields that JSON Schema cannot state (the one documented exclusion, tests/fuzz-api.hooks.py).
    #[schemars(with = "super::schema::UtcInstant")]
    starts_at: DateTime<Utc>,
    /// RFC 3339 in UTC (Z or +00:00), years 1900-9999. endsAt must be after startsAt and at most 24 hours later: a rule between two fields that JSON Schema cannot state (the one documented exclusion, tests/fuzz-api.hooks.py).
    #[schemars(with = "super::schema::UtcInstant")]
    ends_at: DateTime<Utc>,
}

impl TimeSlot {
    pub fn parse(starts_at: &str, ends_at: &str) -> Result<Self, FieldError> {
        let starts_at = parse_utc("startsAt", starts_at)?;
        let ends_at = parse_utc("endsAt", ends_at)?;
        Self::new(starts_at, ends_at)
    }

    pub fn new(starts_at: DateTime<Utc>, ends_at: DateTime<Utc>) -> Result<Self, FieldError> {
        if ends_at <= starts_at {
            return Err(FieldError::new("endsAt", "must be after startsAt"));
        }
        if ends_at - starts_at > chrono::Duration::hours(24) {
            return Err(FieldError::new("endsAt", "must be at most 24 hours after startsAt"));
        }
        Ok(Self { starts_at, ends_at })
    }

    pub fn starts_at(&self) -> DateTime<Utc> {
        self.starts_at
    }

    pub fn ends_at(&self) -> DateTime<Utc> {
        self.ends_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keeps_meta_characters_but_rejects_nul_and_blank() {
        let tricky = "Robert'); DROP TABLE patients;-- 👩‍⚕️ Ω".to_string();
        assert_eq!(Name::parse("givenName", tricky.clone()).unwrap().as_str(), tricky);
        assert!(Name::parse("givenName", "a\0b".into()).is_err());
        assert_eq!(Name::parse("givenName", "   ".into()).unwrap_err().field, "givenName");
    }

    #[test]
    fn times_must_be_utc_and_ordered() {
        assert!(TimeSlot::parse("2026-12-01T09:00:00Z", "2026-12-01T09:30:00Z").is_ok());
        assert!(TimeSlot::parse("2026-12-01T09:00:00+00:00", "2026-12-01T09:30:00Z").is_ok());
        assert_eq!(
            TimeSlot::parse("2026-12-01T09:00:00+02:00", "2026-12-01T09:30:00Z").unwrap_err().field,
            "startsAt"
        );
        assert_eq!(
            TimeSlot::parse("2026-12-01T09:00:00Z", "2026-12-01T09:00:00Z").unwrap_err().field,
            "endsAt"
        );
        assert_eq!(TimeSlot::parse("yesterday", "2026-12-01T09:00:00Z").unwrap_err().field, "startsAt");
    }

    #[test]
    fn contact_details_are_checked() {
        assert!(Email::parse("email", "a@b.example".into()).is_ok());
        assert!(Email::parse("email", "nope".into()).is_err());
        // 254 characters, as the OpenAPI document's maxLength counts them (not bytes).
        let long = format!("{}@b.example", "é".repeat(244));
        assert!(Email::parse("email", long.clone()).is_ok());
        assert!(Email::parse("email", format!("é{long}")).is_err());
        assert!(Phone::parse("phone", "+1 (555) 010-0000".into()).is_ok());
        assert!(Phone::parse("phone", "call me".into()).is_err());
        assert!(parse_date_of_birth("dateOfBirth", "1980-02-29").is_ok());
        assert!(parse_date_of_birth("dateOfBirth", "1981-02-29").is_err());
        assert!(parse_date_of_birth("dateOfBirth", "3000-01-01").is_err());
    }
}
