//! What both emulator tests share: the dispatcher settings for runs over SQS.

use std::time::Duration;

use clinic_core::dispatch::DispatchConfig;
use clinic_core::outbox::{Backoff, Jitter};

/// A 5 s lease (an SQS round trip on a busy machine stays well inside it) and retry backoffs of
/// 10–50 ms, so a retried row is due again within a test's short wait; the rest is the default.
pub fn sqs_config() -> DispatchConfig {
    DispatchConfig {
        lease: Duration::from_secs(5),
        backoff: Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            jitter: Jitter::Equal,
        },
        ..DispatchConfig::default()
    }
}
