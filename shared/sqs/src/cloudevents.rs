//! The message body: a CloudEvents 1.0.2 structured-mode JSON document. The one builder and parser
//! live in `clinic_core::contract::cloudevent` (webhooks publish the same document); re-exported here.

pub use clinic_core::contract::cloudevent::*;
