//! The OpenAPI document generated from the router (STYLE.md pattern 27). The handlers'
//! `#[utoipa::path(…)]` give each operation (method, path, id, summary, parameters, request body,
//! responses); `utoipa_axum::routes!` registers it with the router and the document at once.
//!
//! Invariants:
//! - Every operation's parameters are types of [`params`], its bodies types of [`schemas`]: a
//!   schema a handler names is registered in the document's components under that name.
//! - The component schemas, the response header and the security scheme are still written by hand
//!   in `components.json` (the domain types live in `clinic-core`, which must not link utoipa);
//!   [`schemas`] reads them from there, so a named schema is never two texts.
//! - Every response documents `X-Correlation-Id` (the `correlation` middleware sets it on every
//!   answer), and the public routes' `security(())` is published as no requirement (`[]`).

pub mod params;
pub mod problems;

use std::sync::LazyLock;

use serde_json::{json, Value};
use utoipa::openapi::path::Parameter;

/// The hand-written components (`securitySchemes`, `schemas`, `headers`).
static COMPONENTS: LazyLock<Value> =
    LazyLock::new(|| serde_json::from_str(include_str!("components.json")).expect("components.json is JSON"));

/// The component schema `name` of `components.json`, as utoipa's type.
fn component(name: &str) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    let schema = COMPONENTS["schemas"].get(name).unwrap_or_else(|| panic!("no component schema {name}"));
    serde_json::from_value(schema.clone()).unwrap_or_else(|e| panic!("component schema {name}: {e}"))
}

/// `{"type": "integer"}`, for a field whose Rust type would add a `format` the document does not state.
pub(crate) fn integer() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new().schema_type(utoipa::openapi::schema::Type::Integer).build()
}

/// One OpenAPI Parameter Object, written as JSON, as utoipa's type.
pub(crate) fn parameter(object: Value) -> Parameter {
    serde_json::from_value(object).expect("a parameter object")
}

/// `Name = { …Parameter Object… };` defines a type whose `IntoParams` is that one parameter.
macro_rules! parameters {
    ($($(#[$doc:meta])* $name:ident = $object:tt;)*) => {
        $(
            $(#[$doc])*
            pub struct $name;

            impl utoipa::IntoParams for $name {
                fn into_params(
                    _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
                ) -> Vec<utoipa::openapi::path::Parameter> {
                    vec![super::parameter(serde_json::json!($object))]
                }
            }
        )*
    };
}
pub(crate) use parameters;

/// Bodies and answers, by name: each type is the component schema of the same name.
pub mod schemas {
    use std::borrow::Cow;

    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;

    macro_rules! components {
        ($($name:ident),* $(,)?) => {
            $(
                #[doc = concat!("The component schema `", stringify!($name), "`.")]
                pub struct $name;

                impl utoipa::PartialSchema for $name {
                    fn schema() -> RefOr<Schema> {
                        super::component(stringify!($name))
                    }
                }

                impl utoipa::ToSchema for $name {
                    fn name() -> Cow<'static, str> {
                        Cow::Borrowed(stringify!($name))
                    }
                }
            )*
        };
    }

    /// The problem document, derived from the type that writes it.
    pub use crate::problem::ProblemBody as Problem;
    /// The probes' answer, derived from the type they answer.
    pub use crate::routes::health::Health;

    components!(
        Appointment,
        AppointmentList,
        BulkAnswer,
        BulkReplayRequest,
        BulkRequest,
        Cancel,
        Complete,
        DeliveryAction,
        DeliveryList,
        DisclosureList,
        Explanation,
        ListenerList,
        NewAppointment,
        NewPatient,
        NewPractitioner,
        NewWebhookEndpoint,
        NotificationBulkRequest,
        NotificationList,
        OperatorAction,
        OperatorActionRequest,
        OperatorReasonRequest,
        OutboxList,
        Overview,
        Patient,
        PatientChanges,
        PatientList,
        PauseRecord,
        PauseRequest,
        Practitioner,
        PractitionerChanges,
        PractitionerList,
        RejectionList,
        Reschedule,
        Timeline,
        UnsettledList,
        WebhookDeliveryAction,
        WebhookDeliveryBulkRequest,
        WebhookDeliveryList,
        WebhookEndpoint,
        WebhookEndpointChange,
        WebhookEndpointList,
        WebhookRecoverRequest,
        WebhookRecovered,
        WebhookReplay,
        WebhookRotateRequest
    );

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
}

/// The published document: `generated`'s paths with the hand-written components, every response's
/// `X-Correlation-Id` header.
pub fn publish(generated: &utoipa::openapi::OpenApi) -> Value {
    let mut document = serde_json::to_value(generated).expect("the document serialises");
    // The schemas derived from Rust types (collected by utoipa from the handlers' annotations), then
    // the hand-written components over them (the types named by hand-written schemas read them
    // from there already; copying them keeps the text exactly as written).
    let derived = document["components"]["schemas"].take();
    document["components"] = COMPONENTS.clone();
    for (name, schema) in derived.as_object().into_iter().flatten() {
        if COMPONENTS["schemas"].get(name).is_none() {
            document["components"]["schemas"][name] = schema.clone();
        }
    }
    document["info"] = json!({
        "title": "Clinic scheduling API",
        "version": "1.0.0",
        "description": "Identifier-only domain events behind a transactional outbox. Errors are application/problem+json (RFC 9457); every response carries X-Correlation-Id."
    });
    document["servers"] = json!([{"url": "http://127.0.0.1:3000"}]);
    document["security"] = json!([{"bearer": []}]);
    let header = json!({"X-Correlation-Id": {"$ref": "#/components/headers/X-Correlation-Id"}});
    for item in document["paths"].as_object_mut().into_iter().flat_map(|paths| paths.values_mut()) {
        for operation in item.as_object_mut().into_iter().flat_map(|item| item.values_mut()) {
            let responses = operation["responses"].as_object_mut().into_iter().flat_map(|r| r.values_mut());
            for response in responses {
                response["headers"] = header.clone();
            }
        }
    }
    document
}
