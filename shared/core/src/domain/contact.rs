//! The contact vocabulary shared by a patient's preferences and the send-time policy
//! (DESIGN §5e): the channels a message can take and the kinds of message a patient may opt out of.
//!
//! Invariants:
//! - Both are closed sets with stable stored names (the database CHECKs in V22 hold the same names).
//! - A parsed list is canonical: sorted in declaration order, no duplicates, so comparing two lists
//!   says whether a preference changed.

use serde::Serialize;
use serde_json::Value;

use super::input::FieldError;

/// How a message reaches its recipient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Email,
    Sms,
}

impl Channel {
    pub const ALL: &'static [Channel] = &[Channel::Email, Channel::Sms];

    pub const fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Sms => "sms",
        }
    }

    pub fn parse(name: &str) -> Option<Channel> {
        Self::ALL.iter().copied().find(|channel| channel.as_str() == name)
    }
}

crate::inline_schema!(Channel, |_: &mut schemars::SchemaGenerator| {
    let names: Vec<&str> = Self::ALL.iter().map(|channel| channel.as_str()).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
});

/// The kinds of patient message a patient may opt out of, one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// "Your appointment is booked".
    BookingConfirmation,
    /// A reschedule or cancellation notice: it changes what the patient must do.
    ChangeNotice,
    /// "Your appointment is tomorrow".
    Reminder,
}

impl MessageKind {
    pub const ALL: &'static [MessageKind] =
        &[MessageKind::BookingConfirmation, MessageKind::ChangeNotice, MessageKind::Reminder];

    pub const fn as_str(self) -> &'static str {
        match self {
            MessageKind::BookingConfirmation => "booking_confirmation",
            MessageKind::ChangeNotice => "change_notice",
            MessageKind::Reminder => "reminder",
        }
    }

    pub fn parse(name: &str) -> Option<MessageKind> {
        Self::ALL.iter().copied().find(|kind| kind.as_str() == name)
    }
}

crate::inline_schema!(MessageKind, |_: &mut schemars::SchemaGenerator| {
    let names: Vec<&str> = Self::ALL.iter().map(|kind| kind.as_str()).collect();
    schemars::json_schema!({ "type": "string", "enum": names })
});

/// The most items [`parse_set`] reads (duplicates included).
pub const MAX_SET_ITEMS: usize = 8;

/// A JSON array of distinct names from a closed set, canonical (sorted, deduplicated), or a
/// [`FieldError`] naming `field`. `null` is refused: a list is cleared with `[]`.
pub fn parse_set<T: Copy + Ord>(
    field: &str,
    value: Value,
    parse: impl Fn(&str) -> Option<T>,
    expected: &str,
) -> Result<Vec<T>, FieldError> {
    let Value::Array(items) = value else {
        return Err(FieldError::new(field, format!("must be an array of {expected}")));
    };
    if items.len() > MAX_SET_ITEMS {
        return Err(FieldError::new(field, format!("must be an array of {expected}")));
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let parsed = item.as_str().and_then(&parse);
        let Some(parsed) = parsed else {
            return Err(FieldError::new(field, format!("must be an array of {expected}")));
        };
        out.push(parsed);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Stored names (a `text[]` column) back to values; names this build does not know are skipped.
pub fn from_stored<T>(names: &[String], parse: impl Fn(&str) -> Option<T>) -> Vec<T> {
    names.iter().filter_map(|name| parse(name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sets_are_canonical_and_refuse_unknown_names_naming_the_field() {
        let parsed = parse_set("contactChannels", json!(["sms", "email", "sms"]), Channel::parse, "x");
        assert_eq!(parsed.unwrap(), vec![Channel::Email, Channel::Sms]);
        let refused = parse_set("contactOptOuts", json!(["reminder", "spam"]), MessageKind::parse, "x");
        assert_eq!(refused.unwrap_err().field, "contactOptOuts");
        assert!(parse_set("contactChannels", json!(null), Channel::parse, "x").is_err());
        assert!(parse_set("contactChannels", json!("email"), Channel::parse, "x").is_err());
        assert_eq!(parse_set("contactChannels", json!([]), Channel::parse, "x").unwrap(), vec![]);
        for kind in MessageKind::ALL {
            assert_eq!(MessageKind::parse(kind.as_str()), Some(*kind));
        }
    }
}
