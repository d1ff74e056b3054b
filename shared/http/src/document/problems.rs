//! The problem answers many operations share, as `utoipa::IntoResponses` types that the handlers'
//! `#[utoipa::path(responses(…))]` name next to their own tuples. Each is one status with its
//! description and an `application/problem+json` body (the `Problem` component schema); an answer
//! whose wording is particular to one operation stays a tuple in that operation's annotation.

use std::collections::BTreeMap;

use utoipa::openapi::response::Response;
use utoipa::openapi::RefOr;

/// A problem answer with `description`, as utoipa's type.
fn problem(description: &str) -> RefOr<Response> {
    let response = serde_json::json!({
        "description": description,
        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    });
    RefOr::T(serde_json::from_value(response).expect("a response object"))
}

/// `Name = status, "description";` defines a type whose `IntoResponses` is that one problem answer.
macro_rules! problems {
    ($($(#[$doc:meta])* $name:ident = $status:literal, $description:literal;)*) => {
        $(
            $(#[$doc])*
            #[doc = concat!("`", stringify!($status), "`: ", $description, ".")]
            pub struct $name;

            impl utoipa::IntoResponses for $name {
                fn responses() -> BTreeMap<String, RefOr<Response>> {
                    BTreeMap::from([(stringify!($status).to_string(), problem($description))])
                }
            }
        )*
    };
}

problems! {
    BadRequest = 400, "Malformed JSON or invalid parameter";
    Unauthorized = 401, "Missing or invalid token";
    Forbidden = 403, "Role not allowed";
    AdminOnly = 403, "Role not allowed (admin only)";
    NotFound = 404, "Not found (or in another workspace)";
    TooLarge = 413, "Body over 64 KiB";
    NotJson = 415, "Body is not JSON";
    Invalid = 422, "Invalid field";
    Unavailable = 503, "Database unavailable";
}
