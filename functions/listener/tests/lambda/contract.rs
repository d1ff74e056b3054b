//! The envelope only grows (DESIGN §4a): a listener acts on a message whatever fields the contract
//! added since it was built — newer fields it does not know are ignored — and on a message of an older
//! dispatcher that lacks the fields added later (`dataschema`, `publishedName`, `producer`,
//! `metadata`, `changedFields`, `idempotencyKey`).

use aws_lambda_events::event::sqs::SqsEvent;
use clinic_core::listeners::Listener;
use clinic_listener::{handle, State};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};

fn batch(bodies: &[(&str, Value)]) -> LambdaEvent<SqsEvent> {
    let records: Vec<Value> = bodies
        .iter()
        .map(|(id, body)| {
            json!({
                "messageId": id, "receiptHandle": format!("AQEB{id}"), "body": body.to_string(),
                "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:clinic-listener",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    LambdaEvent::new(serde_json::from_value(json!({ "Records": records })).unwrap(), Context::default())
}

#[tokio::test]
async fn a_listener_ignores_fields_it_does_not_know_and_reads_messages_without_the_new_ones() {
    clinic_testkit::init_test_logging();
    let db = clinic_testkit::fresh_db().await;
    let mut events = clinic_testkit::seed::booked_appointments(&db, 2).await;
    let (newer, older) = (events.remove(0), events.remove(0));
    let listener = Listener::PatientBookingConfirmation;

    // From a future build: unknown CloudEvents extensions and unknown envelope fields.
    let mut future = serde_json::to_value(clinic_sqs::to_cloud_event(&newer, listener, "/clinic")).unwrap();
    future["futureextension"] = json!("x");
    future["data"]["futureField"] = json!({"nested": [1, 2, 3]});
    future["data"]["metadata"]["futureHint"] = json!(true);
    // From an older build: none of the fields the contract added.
    let mut past = serde_json::to_value(clinic_sqs::to_cloud_event(&older, listener, "/clinic")).unwrap();
    past.as_object_mut().unwrap().remove("dataschema");
    for added in ["publishedName", "producer", "metadata", "changedFields", "idempotencyKey"] {
        past["data"].as_object_mut().unwrap().remove(added);
    }

    let state = State::new(db.pool.clone());
    let response = handle(&state, batch(&[("m-future", future), ("m-past", past)])).await.unwrap();
    assert!(response.batch_item_failures.is_empty(), "{:?}", response.batch_item_failures);
    let conn = db.client().await;
    let notified: i64 = conn
        .query_one(
            "SELECT count(*) FROM notifications WHERE listener = $1 AND event_id = ANY($2)",
            &[&listener.as_str(), &vec![newer.id.uuid(), older.id.uuid()]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(notified, 2, "both messages were acted on");
}
