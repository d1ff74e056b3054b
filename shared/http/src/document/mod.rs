//! The OpenAPI document generated from the router and the types (STYLE.md pattern 27). The handlers'
//! `#[utoipa::path(…)]` give each operation (method, path, id, summary, parameters, request body,
//! responses); `utoipa_axum::routes!` registers it with the router and the document at once. The
//! component schemas are derived with `schemars` from the `clinic-core` types that write or read
//! them ([`derive`]; the core must not link utoipa, and `schemars` already derives its event
//! schemas), JSON Schema 2020-12 being OpenAPI 3.1's own dialect.
//!
//! Invariants:
//! - Every operation's parameters are types of [`params`], its bodies types of [`schemas`]: a
//!   schema a handler names is published in the document's components under that name, exactly
//!   once ([`publish`] fails on a name with two texts, and on a named schema without a text).
//! - Only the response header and the security scheme are written by hand (`components.json`);
//!   every component schema is derived.
//! - Every response documents `X-Correlation-Id` (the `correlation` middleware sets it on every
//!   answer), and the public routes' `security(())` is published as no requirement (`[]`).

pub mod params;
pub mod problems;

use serde_json::{json, Map, Value};
use utoipa::openapi::path::Parameter;
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
pub mod schemas;

/// Whether a component is a type's schema as the API writes it or as it reads it (`schemars`'
/// serialize and deserialize contracts: an answer's `Option` field is required and may be null; a
/// body's may be absent).
pub(crate) enum Direction {
    Answer,
    Body,
}

/// One derived component: its name, and what derives its schema.
pub(crate) type Derived = (&'static str, fn() -> (Value, Map<String, Value>));

/// `T`'s schema, and the schemas it refers to by name, with references into
/// `#/components/schemas/`. Each component's own `title` and `description` are dropped: they are
/// the Rust type's documentation, written for the code's readers (the fields' documentation stays:
/// it is written for the API's); so are `default`s
/// ([`clinic_core::contract::schemas::strip_defaults`]).
pub(crate) fn derive<T: schemars::JsonSchema>(direction: Direction) -> (Value, Map<String, Value>) {
    let settings = schemars::generate::SchemaSettings::draft2020_12();
    let mut settings = match direction {
        Direction::Answer => settings.for_serialize(),
        Direction::Body => settings.for_deserialize(),
    };
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    let mut schema = settings.into_generator().into_root_schema_for::<T>().to_value();
    let root = schema.as_object_mut().expect("a schema object");
    let mut referred = match root.remove("components") {
        Some(Value::Object(mut components)) => match components.remove("schemas") {
            Some(Value::Object(schemas)) => schemas,
            _ => Map::new(),
        },
        _ => Map::new(),
    };
    for component in std::iter::once(&mut schema).chain(referred.values_mut()) {
        if let Some(object) = component.as_object_mut() {
            object.remove("title");
            object.remove("description");
        }
        clinic_core::contract::schemas::strip_defaults(component);
    }
    (schema, referred)
}

/// Puts `schema` into `schemas` as `name`; a name given twice must be the same text.
fn insert(schemas: &mut Map<String, Value>, name: &str, schema: Value) {
    match schemas.get(name) {
        Some(existing) => assert_eq!(existing, &schema, "component schema {name} has two texts"),
        None => {
            schemas.insert(name.to_owned(), schema);
        }
    }
}

/// The components: the security scheme and the response header (`components.json`), and every
/// derived schema.
fn components() -> Value {
    let mut components: Map<String, Value> =
        serde_json::from_str(include_str!("components.json")).expect("components.json is a JSON object");
    components.insert("schemas".into(), json!({}));
    let schemas = components["schemas"].as_object_mut().expect("the schemas");
    for (name, derive) in schemas::DERIVED.iter().flat_map(|area| area.iter()) {
        let (schema, referred) = derive();
        insert(schemas, name, schema);
        for (name, schema) in referred {
            insert(schemas, &name, schema);
        }
    }
    Value::Object(components)
}

/// The published document: `generated`'s paths with the components, every response's
/// `X-Correlation-Id` header.
pub fn publish(generated: &utoipa::openapi::OpenApi) -> Value {
    let mut document = serde_json::to_value(generated).expect("the document serialises");
    // The names utoipa collected from the handlers' annotations: the schemas utoipa derived itself
    // (Problem, Health) are taken as they are; every other name must have a text of its own.
    let collected = document["components"]["schemas"].take();
    document["components"] = components();
    let schemas = document["components"]["schemas"].as_object_mut().expect("schemas");
    for (name, schema) in collected.as_object().into_iter().flatten() {
        if !schemas.contains_key(name) {
            assert_ne!(
                schema,
                &serde_json::to_value(schemas::registered()).unwrap(),
                "component schema {name} has no text"
            );
            schemas.insert(name.clone(), schema.clone());
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
