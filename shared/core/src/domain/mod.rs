//! Parsing input into valid values: request-body field readers and value types.

pub mod contact;
pub mod input;
pub mod schema;
pub mod values;
