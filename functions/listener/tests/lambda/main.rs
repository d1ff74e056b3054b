//! The listener Lambda's handler fed real SQS event JSON: the committed fixture batch, partial batch
//! failures, duplicates and the whole path over the SQS emulator.

mod contract;
mod fixture_sqs_batch;
mod handler;
mod untrusted;
