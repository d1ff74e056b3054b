//! The problem answers many operations share, as `utoipa::IntoResponses` types that the handlers'
//! `#[utoipa::path(responses(…))]` name next to their own tuples. Each is one status with its
//! description and an `application/problem+json` body (the `Problem` component schema); an answer
//! whose wording is particular to one operation stays a tuple in that operation's annotation.

use std::collections::BTreeMap;

use utoipa::openapi::response::Response;
use utoipa::openapi::RefOr;
use utoipa::IntoResponses;

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

/// `Name = "422 description" + Extra;` defines a type whose `IntoResponses` is what every operator
/// action answers besides its own 200, 404 and 409 — 400, 401, 403, 413 and 415 — with 422 described
/// as given (what the action's body may get wrong) and the answers of the `Extra` types.
macro_rules! action_problems {
    ($($(#[$doc:meta])* $name:ident = $invalid:literal $(+ $extra:ident)*;)*) => {
        $(
            $(#[$doc])*
            pub struct $name;

            impl IntoResponses for $name {
                fn responses() -> BTreeMap<String, RefOr<Response>> {
                    let mut responses = BTreeMap::from([("422".to_string(), problem($invalid))]);
                    for shared in [
                        BadRequest::responses(),
                        Unauthorized::responses(),
                        Forbidden::responses(),
                        TooLarge::responses(),
                        NotJson::responses(),
                        $($extra::responses(),)*
                    ] {
                        responses.extend(shared);
                    }
                    responses
                }
            }
        )*
    };
}

action_problems! {
    /// A retry, replay or discard of one outbox row.
    OutboxRowAction = "Invalid field (reason missing or blank, unknown listener, or an Idempotency-Key used before with another request)" + Unavailable;
    /// A retry or discard of one delivery, a notification's or a webhook's (no listeners).
    DeliveryRowAction = "Invalid field (reason missing or blank, or an Idempotency-Key used before with another request)" + Unavailable;
    /// A bulk action on the outbox (its filter may name a listener).
    OutboxBulkAction = "Invalid field (reason missing or blank, filter, listener, limit, or an Idempotency-Key used before with another request)";
    /// A bulk action on deliveries, a notification's or a webhook's.
    DeliveryBulkAction = "Invalid field (reason missing or blank, filter, limit, or an Idempotency-Key used before with another request)";
}
