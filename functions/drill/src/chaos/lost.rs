//! The lost-message fault: messages deleted from a listener queue after the dispatcher sent them (a
//! purged queue, an expired dead-letter message). The outbox row is already `dispatched`; only the
//! custody reconciler can notice the missing receipt and start the pair again under the same identity.
//! Each stolen (event, listener) must end with its receipt and exactly one effect.

use std::time::{Duration, Instant};

use clinic_core::listeners::Listener;

/// The queue the messages are stolen from (every booking and cancellation passes through it).
pub const VICTIM_LISTENER: Listener = Listener::PractitionerScheduleChange;

/// Receives from the victim queue (competing with its consumers) until `count` messages were taken,
/// deleting each unrun; answers their (event id, listener). Bounded by `bound`.
pub async fn steal(
    sqs: &aws_sdk_sqs::Client,
    queues: &clinic_sqs::QueueMap,
    count: usize,
    bound: Duration,
) -> Vec<(String, String)> {
    let Some(url) = queues.url(VICTIM_LISTENER) else { return Vec::new() };
    let mut stolen = Vec::new();
    let until = Instant::now() + bound;
    while stolen.len() < count && Instant::now() < until {
        let want = (count - stolen.len()).min(10) as i32;
        let receive =
            sqs.receive_message().queue_url(url).max_number_of_messages(want).visibility_timeout(60).send();
        let Ok(Ok(output)) = tokio::time::timeout(Duration::from_secs(20), receive).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        for message in output.messages.unwrap_or_default() {
            let (Some(body), Some(handle)) = (message.body(), message.receipt_handle()) else { continue };
            let Ok((listener, envelope)) = clinic_sqs::parse_message(body) else { continue };
            let delete = sqs.delete_message().queue_url(url).receipt_handle(handle).send();
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(20), delete).await {
                stolen.push((envelope.id.to_string(), listener.as_str().to_owned()));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stolen
}
