//! The JSON Schemas the HTTP API publishes for its input values, kept beside the parsers they describe
//! ([`super::values`], [`super::input`]), so a rule and its published form change together.
//!
//! Invariants:
//! - Each schema states what its parser accepts, no more and no less, where JSON Schema can say it
//!   (the API fuzzing sends data generated from these schemas and data that breaks them, and fails
//!   when the parser disagrees). A rule JSON Schema cannot state is named in the field's description.
//! - These are the API's schemas. The events' ids are published by [`crate::ids::ulid_schema`]
//!   (upper case only, as the pipeline writes them); the API also accepts lower case.
//! - Every schema here is inline: a field reads as its own text, not as a reference.
//! - A value's schema is written with [`inline_schema!`](crate::inline_schema), next to its parser
//!   wherever that is, so every inline schema of the crate has the same three-method shape once.

use schemars::{json_schema, Schema};

/// White space as Rust's `trim` and `char::is_whitespace` see it (U+0085 included, which
/// ECMA-262's `\s` lacks), as the body of a pattern's character class: the one text every pattern
/// of the crate that excludes white space is built from (with `concat!`).
macro_rules! white_space {
    () => {
        r"\x09-\x0d\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
    };
}
pub(crate) use white_space;

/// Not blank and no NUL: at least one character that is not white space ([`white_space!`]).
pub const NOT_BLANK_NO_NUL: &str = concat!(r"^[^\x00]*[^", white_space!(), r"\x00][^\x00]*$");

/// An RFC 3339 instant in UTC (`Z` or `+00:00`) with a year from 1900 to 9999, as
/// [`super::values::parse_utc`] reads it.
pub const UTC_INSTANT: &str = r"^(19[0-9]{2}|[2-9][0-9]{3})-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?([Zz]|[+-]00:00)$";

/// A ULID as the API reads it (either case; [`crate::ids::parse_ulid`]). Use with
/// `#[schemars(with = "crate::domain::schema::ApiUlid")]`.
pub struct ApiUlid;

crate::inline_schema!(ApiUlid, |_: &mut schemars::SchemaGenerator| {
    json_schema!({
        "type": "string",
        "pattern": "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$",
        "minLength": 26,
        "maxLength": 26
    })
});

/// An instant the API reads ([`super::values::parse_utc`]). Use with
/// `#[schemars(with = "crate::domain::schema::UtcInstant")]`.
pub struct UtcInstant;

crate::inline_schema!(UtcInstant, |_: &mut schemars::SchemaGenerator| {
    json_schema!({ "type": "string", "format": "date-time", "pattern": UTC_INSTANT })
});

/// Text that is not blank, has no NUL and has at most `max` characters (the value types of
/// [`super::values`]).
pub fn text(max: usize) -> Schema {
    json_schema!({ "type": "string", "minLength": 1, "maxLength": max, "pattern": NOT_BLANK_NO_NUL })
}

/// `expectedVersion` ([`super::input::Fields::optional_version`]): a positive 32-bit integer. Use
/// with `#[schemars(with = "Option<crate::domain::schema::ExpectedVersion>")]`.
pub struct ExpectedVersion;

crate::inline_schema!(ExpectedVersion, |_: &mut schemars::SchemaGenerator| {
    json_schema!({ "type": "integer", "minimum": 1, "maximum": i32::MAX })
});

/// Adds to a change body's `schema` that it names at least one of `fields` (`anyOf` of one
/// `required` each), the rule of a parser refusing a body that changes nothing.
pub fn at_least_one_of(schema: &mut Schema, fields: &[&str]) {
    let any_of: Vec<serde_json::Value> =
        fields.iter().map(|field| serde_json::json!({ "required": [field] })).collect();
    schema.insert("anyOf".into(), any_of.into());
}

/// `inline_schema!(Type, |generator| schema)` implements `schemars::JsonSchema` for `Type`: an inline
/// schema (a field reads as its own text) named after the type, from the closure (which may use
/// `Self` and the generator, e.g. for an item schema). `inline_schema!(/// doc
/// struct Name, …)` first declares `Name`, a type that only carries a schema, for
/// `#[schemars(with = "Name")]`. `inline_schema!(Type as "Name", …)` names it otherwise (one name for
/// several types that share a schema, like the typed ids' `Ulid`).
#[macro_export]
macro_rules! inline_schema {
    ($(#[$doc:meta])* $vis:vis struct $name:ident, $schema:expr) => {
        $(#[$doc])*
        $vis struct $name;
        $crate::inline_schema!($name, $schema);
    };
    ($ty:ty, $schema:expr) => {
        $crate::inline_schema!($ty as stringify!($ty), $schema);
    };
    ($ty:ty as $name:expr, $schema:expr) => {
        impl ::schemars::JsonSchema for $ty {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                ($name).into()
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(generator: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ($schema)(generator)
            }
        }
    };
}
