//! [`SqsTransport`]: starts listener workflows by sending CloudEvents to each listener's queue.

use std::collections::BTreeMap;

use async_trait::async_trait;
use std::sync::Arc;

use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use clinic_core::dispatch::{Start, StartError, StartResult, Transport};
use clinic_core::listeners::Listener;

use crate::breaker::Breakers;
use crate::cloudevents::to_cloud_event;
use crate::config::{QueueMap, SqsConfig};

/// SendMessageBatch accepts at most this many entries.
pub const MAX_BATCH_ENTRIES: usize = 10;

/// Sends each start to its listener's queue (see the crate docs for the format and the decision).
#[derive(Debug, Clone)]
pub struct SqsTransport {
    client: aws_sdk_sqs::Client,
    queues: QueueMap,
    source_prefix: String,
    breakers: Arc<Breakers>,
}

/// True when a whole-call error says SQS (or the way to it) is unreachable or throttling rather than
/// that this call is wrong: timeouts, connection failures, unparseable answers, internal errors,
/// throttling (also KMS's). A missing or forbidden queue is not an outage: it is retried and counts
/// toward `dead` like any other refusal (and alarms).
fn is_unavailable<E: ProvideErrorMetadata>(
    error: &SdkError<E, aws_sdk_sqs::config::http::HttpResponse>,
) -> bool {
    match error {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or_default();
            service.raw().status().as_u16() >= 500
                || code.contains("Throttl")
                || code.contains("ServiceUnavailable")
                || code.contains("InternalError")
                || code.contains("InternalFailure")
        }
        _ => false,
    }
}

impl SqsTransport {
    pub fn new(client: aws_sdk_sqs::Client, queues: QueueMap, source_prefix: impl Into<String>) -> Self {
        Self { client, queues, source_prefix: source_prefix.into(), breakers: Arc::default() }
    }

    pub fn from_config(client: aws_sdk_sqs::Client, config: &SqsConfig) -> Self {
        Self::new(client, config.queues.clone(), config.source_prefix.clone())
    }

    fn entry(
        &self,
        index: usize,
        start: &Start<'_>,
        fifo: bool,
    ) -> Result<SendMessageBatchRequestEntry, StartError> {
        let event = to_cloud_event(start.envelope, start.listener, &self.source_prefix);
        let body = serde_json::to_string(&event)
            .map_err(|e| StartError::permanent("encode_failed", e.to_string()))?;
        let listener_attribute = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(start.listener.as_str())
            .build()
            .map_err(|e| StartError::permanent("encode_failed", e.to_string()))?;
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(index.to_string())
            .message_body(body)
            .message_attributes("listener", listener_attribute);
        if fifo {
            entry = entry
                .message_group_id(start.envelope.resource_id.to_string())
                .message_deduplication_id(format!("{}:{}", start.envelope.id, start.listener.as_str()));
        } else {
            // A standard queue with message groups is an SQS fair queue: one workspace's burst does
            // not hold back the other workspaces' messages (their dwell time stays low).
            entry = entry.message_group_id(start.envelope.workspace_id.to_string());
        }
        entry.build().map_err(|e| StartError::permanent("encode_failed", e.to_string()))
    }

    /// Sends one chunk (≤ 10 starts, one queue); one result per start, in order.
    async fn send_chunk(&self, url: &str, chunk: &[(usize, Start<'_>)]) -> Vec<StartResult> {
        let fifo = url.ends_with(".fifo");
        let mut results: Vec<Option<StartResult>> = vec![None; chunk.len()];
        let mut entries = Vec::with_capacity(chunk.len());
        for (position, (_, start)) in chunk.iter().enumerate() {
            match self.entry(position, start, fifo) {
                Ok(entry) => entries.push(entry),
                Err(error) => results[position] = Some(Err(error)),
            }
        }
        if !entries.is_empty() && !self.breakers.allows(url) {
            for slot in results.iter_mut().filter(|slot| slot.is_none()) {
                *slot = Some(Err(StartError::unavailable(
                    "sqs_breaker_open",
                    "queue breaker open; probing later",
                )));
            }
        } else if !entries.is_empty() {
            let sent =
                self.client.send_message_batch().queue_url(url).set_entries(Some(entries)).send().await;
            match sent {
                Ok(output) => {
                    self.breakers.record(url, false);
                    for ok in output.successful() {
                        if let Some(slot) = ok.id().parse::<usize>().ok().and_then(|i| results.get_mut(i)) {
                            *slot = Some(Ok(Some(ok.message_id().to_owned())));
                        }
                    }
                    for failed in output.failed() {
                        if let Some(slot) = failed.id().parse::<usize>().ok().and_then(|i| results.get_mut(i))
                        {
                            let message = failed.message().unwrap_or("entry rejected").to_owned();
                            let code = format!("sqs_{}", failed.code());
                            // `SenderFault = false`: the service failed this entry (a partial
                            // incident), nothing about the message — a hold, not an attempt.
                            *slot = Some(Err(if failed.sender_fault() {
                                StartError::retryable(code, message)
                            } else {
                                StartError::unavailable(code, message)
                            }));
                        }
                    }
                }
                Err(error) => {
                    let code =
                        error.code().map_or_else(|| "sqs_unreachable".to_owned(), |c| format!("sqs_{c}"));
                    let message = DisplayErrorContext(&error).to_string();
                    let unavailable = is_unavailable(&error);
                    self.breakers.record(url, unavailable);
                    let error = if unavailable {
                        StartError::unavailable(code, message)
                    } else {
                        StartError::retryable(code, message)
                    };
                    for slot in results.iter_mut().filter(|slot| slot.is_none()) {
                        *slot = Some(Err(error.clone()));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| {
                    Err(StartError::retryable("sqs_no_answer", "entry missing from the SQS answer"))
                })
            })
            .collect()
    }
}

#[async_trait]
impl Transport for SqsTransport {
    fn name(&self) -> &'static str {
        "sqs"
    }

    fn ordered(&self, listener: Listener) -> bool {
        self.queues.url(listener).is_some_and(|url| url.ends_with(".fifo"))
    }

    async fn start(&self, starts: &[Start<'_>]) -> Vec<StartResult> {
        let mut results: Vec<Option<StartResult>> = vec![None; starts.len()];
        let mut by_listener: BTreeMap<Listener, Vec<(usize, Start<'_>)>> = BTreeMap::new();
        for (index, start) in starts.iter().enumerate() {
            by_listener.entry(start.listener).or_default().push((index, *start));
        }
        let mut calls = Vec::new();
        for (listener, group) in &by_listener {
            let Some(url) = self.queues.url(*listener) else {
                for (index, _) in group {
                    results[*index] = Some(Err(StartError::unavailable(
                        "sqs_no_queue",
                        format!("no queue for {listener}"),
                    )));
                }
                continue;
            };
            for chunk in group.chunks(MAX_BATCH_ENTRIES) {
                calls.push(async move { (chunk, self.send_chunk(url, chunk).await) });
            }
        }
        for (chunk, answers) in futures::future::join_all(calls).await {
            for ((index, _), answer) in chunk.iter().zip(answers) {
                results[*index] = Some(answer);
            }
        }
        results
            .into_iter()
            .map(|slot| {
                slot.unwrap_or_else(|| Err(StartError::retryable("sqs_no_answer", "start was not sent")))
            })
            .collect()
    }
}
