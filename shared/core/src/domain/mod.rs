//! Parsing input into valid values: request-body field readers and value types.

pub mod input;
pub mod values;
