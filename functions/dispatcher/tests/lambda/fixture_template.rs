//! `template.yaml` against the code: every listener in the catalog has its queue, dead-letter queue,
//! consumer function and queue-URL variable, and the dispatcher's windows overlap, fit its timeout and
//! its reserved slots.
//!
//! A listener added to the catalog without its queue would stop the dispatcher at start-up in AWS
//! (`QueueMap::read` requires every listener's URL); this test catches it before a deploy.

use clinic_core::listeners::Listener;
use clinic_dispatcher::DEADLINE_MARGIN;
use clinic_sqs::template_logical_id as camel;

const TEMPLATE: &str = include_str!("../../../../template.yaml");

/// The lines of the top-level entry `logical_id` (a resource or a parameter), without its header.
fn resource(logical_id: &str) -> String {
    let header = format!("\n  {logical_id}:\n");
    let start = TEMPLATE.find(&header).unwrap_or_else(|| panic!("template.yaml has no entry {logical_id}"))
        + header.len();
    TEMPLATE[start..]
        .lines()
        .take_while(|line| line.is_empty() || line.starts_with("    "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn count(needle: &str) -> usize {
    TEMPLATE.matches(needle).count()
}

#[test]
fn every_listener_has_a_queue_a_dead_letter_queue_and_a_consumer() {
    for listener in Listener::ALL {
        let stem = camel(*listener);
        let queue = resource(&format!("{stem}Queue"));
        assert!(queue.contains("Type: AWS::SQS::Queue"), "{stem}Queue");
        assert!(
            queue.contains(&format!("deadLetterTargetArn: !GetAtt {stem}DeadLetterQueue.Arn")),
            "{stem}Queue redrives to its dead-letter queue"
        );
        assert!(resource(&format!("{stem}DeadLetterQueue")).contains("Type: AWS::SQS::Queue"));

        let function = resource(&format!("{stem}Function"));
        assert!(function.contains("Binary: clinic-listener"), "{stem}Function");
        assert!(function.contains(&format!("Queue: !GetAtt {stem}Queue.Arn")), "{stem}Function");
        assert!(function.contains("- ReportBatchItemFailures"), "{stem}Function");

        // Visibility timeout at least six times the consumer's timeout.
        let timeout: u64 = number_after(&function, "Timeout: ");
        let visibility: u64 = number_after(&queue, "VisibilityTimeout: ");
        assert!(visibility >= 6 * timeout, "{stem}: visibility {visibility} s < 6 x {timeout} s");

        let role = resource(&format!("{stem}Role"));
        assert!(role.contains(&format!("Resource: !GetAtt {stem}Queue.Arn")), "{stem}Role");

        assert!(
            resource(&format!("{stem}DeadLetterAlarm"))
                .contains(&format!("Value: !GetAtt {stem}DeadLetterQueue.QueueName")),
            "{stem}DeadLetterAlarm"
        );

        let variable = clinic_sqs::queue_url_var(*listener);
        let dispatcher = resource("DispatcherFunction");
        assert!(
            dispatcher.contains(&format!("{variable}: !Ref {stem}Queue")),
            "the dispatcher gets {variable}"
        );
        let dispatcher_role = resource("DispatcherRole");
        assert!(dispatcher_role.contains(&format!("- !GetAtt {stem}Queue.Arn")));
    }
    assert_eq!(count("Type: AWS::SQS::Queue\n"), 2 * Listener::ALL.len(), "no stray queues");
    assert_eq!(count("Binary: clinic-listener"), Listener::ALL.len());
}

/// Seconds a new invocation may need before it drains (a cold start, then the custody pass) while the
/// previous window still runs.
const START_ALLOWANCE_SECS: u64 = 5;

#[test]
fn the_dispatcher_windows_overlap_and_fit_the_timeout_and_the_reserved_slots() {
    let function = resource("DispatcherFunction");
    let timeout: u64 = number_after(&function, "Timeout: ");
    let reserved: u64 = number_after(&function, "ReservedConcurrentExecutions: ");
    assert!(function.contains("Schedule: rate(1 minute)"));
    let period = 60;
    let window = resource("DispatchWindowSecs");
    let shortest: u64 = number_after(&window, "MinValue: ");
    let longest: u64 = number_after(&window, "MaxValue: ");
    let default: u64 = number_after(&window, "Default: ");
    assert!((shortest..=longest).contains(&default));
    // No gap: even the shortest window outlasts the period by the next invocation's start-up.
    assert!(
        shortest >= period + START_ALLOWANCE_SECS,
        "window {shortest} s must outlast the {period} s schedule by {START_ALLOWANCE_SECS} s"
    );
    assert!(
        longest + DEADLINE_MARGIN.as_secs() <= timeout,
        "window {longest} s + margin {DEADLINE_MARGIN:?} must fit the timeout {timeout} s"
    );
    // Every tick finds a slot: invocations last at most the timeout, so ceil(timeout / period) run at once.
    assert!(
        reserved >= timeout.div_ceil(period),
        "{reserved} slots for {timeout} s invocations every {period} s"
    );
    assert!(reserved <= 3, "a few dispatchers at most: each holds its pool and a LISTEN connection");
}

fn number_after(text: &str, key: &str) -> u64 {
    let at = text.find(key).unwrap_or_else(|| panic!("no {key:?} in\n{text}")) + key.len();
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{key:?} is not followed by a number"))
}

#[test]
fn only_the_dispatcher_can_send_to_a_listener_queue() {
    for listener in Listener::ALL {
        let stem = camel(*listener);
        let policy = resource(&format!("{stem}QueuePolicy"));
        assert!(policy.contains("Type: AWS::SQS::QueuePolicy"), "{stem}QueuePolicy");
        assert!(policy.contains(&format!("- !Ref {stem}Queue")), "{stem}QueuePolicy applies to {stem}Queue");
        // Everyone but the dispatcher (and the optional redrive role) is denied SendMessage …
        let deny = policy.split("- Sid: OnlyTheDispatcherSends").nth(1).expect("a deny statement");
        let deny = deny.split("- Sid:").next().unwrap();
        for line in [
            "Effect: Deny",
            "Principal: \"*\"",
            "Action: sqs:SendMessage",
            "ArnNotEquals:",
            "aws:PrincipalArn: !If",
            "- [!GetAtt DispatcherRole.Arn, !Ref ListenerRedriveRoleArn]",
            "- [!GetAtt DispatcherRole.Arn]",
        ] {
            assert!(deny.contains(line), "{stem}QueuePolicy deny lacks {line:?}");
        }
        assert!(
            deny.contains(&format!("Resource: !GetAtt {stem}Queue.Arn")),
            "{stem}QueuePolicy deny resource"
        );
        // … and the dispatcher is allowed it.
        let allow = policy.split("- Sid: TheDispatcherSends").nth(1).expect("an allow statement");
        for line in ["Effect: Allow", "AWS: !GetAtt DispatcherRole.Arn", "Action: sqs:SendMessage"] {
            assert!(allow.contains(line), "{stem}QueuePolicy allow lacks {line:?}");
        }
        // The dead-letter queue stays without such a policy, so SQS's redrive into it still works,
        // and the listener checks the same source the dispatcher publishes.
        assert!(!TEMPLATE.contains(&format!("- !Ref {stem}DeadLetterQueue\n      PolicyDocument")));
        let function = resource(&format!("{stem}Function"));
        assert!(
            function.contains("CLINIC_CLOUDEVENTS_SOURCE: !Sub /clinic/${AWS::StackName}"),
            "{stem}Function"
        );
    }
    assert_eq!(count("Type: AWS::SQS::QueuePolicy"), Listener::ALL.len(), "one policy per listener queue");
    assert!(TEMPLATE.contains("HasListenerRedriveRole: !Not [!Equals [!Ref ListenerRedriveRoleArn, \"\"]]"));
}
