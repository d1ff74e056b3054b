//! The SQS transport against the local emulator (`moto_server`) and real PostgreSQL: CloudEvents
//! bodies, batching, FIFO attributes, per-queue failures and the PHI scan of everything sent.

mod outages_and_custody;
mod phi_scan;
mod sqs_transport;
mod support;
