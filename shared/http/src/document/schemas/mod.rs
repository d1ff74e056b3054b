//! Bodies and answers, by name: each type here is the component schema of the same name, which a
//! handler's `#[utoipa::path(… body = schemas::Name …)]` refers to.
//!
//! Invariants:
//! - A component is derived from the Rust type that writes it (an answer) or reads it (a body) with
//!   `schemars` ([`derived!`], [`super::derive`]); a name is published once (`publish` fails on a
//!   name given twice with two texts).
//! - Each area (`clinical`, `operator`, `webhooks`) lists its own components, so the areas change
//!   apart.
//! - utoipa sees only the names: the text published for a component is `schemars`' output, put in
//!   by [`super::publish`].

use utoipa::openapi::schema::Schema;
use utoipa::openapi::RefOr;

mod clinical;
mod operator;
mod webhooks;

pub use clinical::*;
pub use operator::*;
pub use webhooks::*;

/// The problem document, derived from the type that writes it.
pub use crate::problem::ProblemBody as Problem;
/// The probes' answer, derived from the type they answer.
pub use crate::routes::health::Health;

/// Every derived component, by area: its name and its generator.
pub(super) const DERIVED: [&[super::Derived]; 3] = [clinical::DERIVED, operator::DERIVED, webhooks::DERIVED];

/// What utoipa registers for a component published from elsewhere: an empty object, replaced by the
/// component's text when the document is published.
pub(super) fn registered() -> RefOr<Schema> {
    utoipa::openapi::schema::ObjectBuilder::new().build().into()
}

/// `derived! { Name = Type, Answer; Other = Body, Body; }`: the component `Name` is `Type`'s schema as
/// it is written (`Answer`: `schemars`' serialize contract) or read (`Body`: deserialize contract).
/// Also defines the area's `DERIVED` list.
macro_rules! derived {
    ($($(#[$doc:meta])* $name:ident = $ty:ty, $direction:ident;)*) => {
        $(
            $(#[$doc])*
            #[doc = concat!("The component schema `", stringify!($name), "`, derived from `", stringify!($ty), "`.")]
            pub struct $name;

            impl utoipa::PartialSchema for $name {
                fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                    super::registered()
                }
            }

            impl utoipa::ToSchema for $name {
                fn name() -> std::borrow::Cow<'static, str> {
                    std::borrow::Cow::Borrowed(stringify!($name))
                }
            }
        )*

        /// The area's derived components.
        pub(in crate::document) const DERIVED: &[crate::document::Derived] = &[
            $((stringify!($name), || crate::document::derive::<$ty>(crate::document::Direction::$direction)),)*
        ];
    };
}
pub(crate) use derived;

macro_rules! inline {
    ($($(#[$doc:meta])* $name:ident = $schema:tt;)*) => {
        $(
            $(#[$doc])*
            pub struct $name;

            impl utoipa::PartialSchema for $name {
                fn schema() -> RefOr<Schema> {
                    serde_json::from_value(serde_json::json!($schema)).expect("a schema")
                }
            }

            impl utoipa::ToSchema for $name {}
        )*
    };
}

inline! {
/// A JSON object (the served OpenAPI document, a JSON Schema).
JsonObject = {
    "type": "object"
};
/// The AsyncAPI document.
AsyncApiDocument = {
    "description": "The AsyncAPI document (YAML; a mapping).",
    "required": [
        "asyncapi"
    ],
    "type": "object"
};
/// An endpoint with its signing secret, or (a replay) without it.
EndpointWithSecretOrNot = {
    "anyOf": [
        {
            "$ref": "#/components/schemas/WebhookEndpointWithSecret"
        },
        {
            "$ref": "#/components/schemas/WebhookEndpoint"
        }
    ],
    "description": "The endpoint with its new secret; a replay of the same Idempotency-Key answers the endpoint without it"
};
/// The RFC 8058 one-click unsubscribe form.
OneClickForm = {
    "properties": {
        "List-Unsubscribe": {
            "enum": ["One-Click"],
            "type": "string"
        }
    },
    "required": [
        "List-Unsubscribe"
    ],
    "type": "object"
};
}
