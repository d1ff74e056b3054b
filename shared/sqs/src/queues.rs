//! Creating the queues of every listener on an SQS endpoint: what `clinic dev` does against a local
//! emulator, and what the tests do for each run.
//!
//! In AWS the queues (and their dead-letter queues and policies) come from `template.yaml`; this is
//! never called there.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use clinic_core::listeners::Listener;

use crate::config::QueueMap;

/// Creates one queue per listener, named `<prefix>-<listener>` (FIFO when `fifo`).
pub async fn create_queues(
    client: &aws_sdk_sqs::Client,
    prefix: &str,
    fifo: bool,
) -> Result<QueueMap, Box<dyn std::error::Error + Send + Sync>> {
    let mut queues = HashMap::new();
    for listener in Listener::ALL {
        let name = format!("{prefix}-{}", listener.as_str().replace('_', "-"));
        let mut request = client.create_queue();
        if fifo {
            request = request
                .queue_name(format!("{name}.fifo"))
                .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
        } else {
            request = request.queue_name(name);
        }
        let output = request.send().await?;
        let url = output.queue_url().ok_or("no queue url")?.to_owned();
        queues.insert(*listener, url);
    }
    Ok(QueueMap::new(queues)?)
}

/// [`create_queues`], retried every 100 ms until `within` has passed: for an emulator that was just
/// started (or is reached through a proxy that is still binding) and may refuse the first calls.
/// Answers the last error when every attempt failed.
pub async fn create_queues_when_ready(
    client: &aws_sdk_sqs::Client,
    prefix: &str,
    fifo: bool,
    within: Duration,
) -> Result<QueueMap, Box<dyn std::error::Error + Send + Sync>> {
    let deadline = Instant::now() + within;
    loop {
        match create_queues(client, prefix, fifo).await {
            Ok(queues) => return Ok(queues),
            Err(error) if Instant::now() >= deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
