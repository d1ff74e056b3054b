//! `GET /v1/system/outbox/unsettled`: the pairs the custody reconciler handed to operators, for
//! admins of their own workspace only.

use std::sync::Arc;

use super::support::{fast_config, Scene};
use clinic_core::dispatch::testing::NoopTransport;

#[tokio::test]
async fn admins_list_their_stuck_pairs_and_nobody_else_does() {
    let scene = Scene::new().await;
    // The broker accepted the starts and lost them; the reconciler gave up on one.
    scene.dispatcher(Arc::new(NoopTransport), fast_config()).drain_once().await.unwrap();
    let stuck = scene
        .execute(
            // What the reconciler leaves behind: the pair moved off the outbox row into a start row.
            "WITH moved AS ( \
                 UPDATE event_outbox SET awaiting = array_remove(awaiting, 'patient_booking_confirmation') \
                 WHERE event_id = $1 RETURNING dispatched_at) \
             INSERT INTO listener_starts (event_id, listener, started_at, restarts, stuck_at) \
             SELECT $1, 'patient_booking_confirmation', dispatched_at, 3, now() FROM moved",
            scene.created,
        )
        .await;
    assert_eq!(stuck, 1);
    let admin = scene.app.workspace.admin.clone();
    let listed = scene.app.call("GET", "/v1/system/outbox/unsettled", Some(&admin), None).await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let items = listed.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{}", listed.text);
    assert_eq!(items[0]["eventId"], scene.created.to_string());
    assert_eq!(items[0]["listener"], "patient_booking_confirmation");
    assert_eq!(items[0]["restarts"], 3);
    let all = scene.app.call("GET", "/v1/system/outbox/unsettled?all=true", Some(&admin), None).await;
    assert_eq!(all.body["items"].as_array().unwrap().len(), 2, "{}", all.text);

    let staff = scene.app.workspace.staff.clone();
    assert_eq!(scene.app.call("GET", "/v1/system/outbox/unsettled", Some(&staff), None).await.status, 403);
    let bad = scene.app.call("GET", "/v1/system/outbox/unsettled?all=yes", Some(&admin), None).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(bad.body["field"], "all");
    let bad = scene.app.call("GET", "/v1/system/outbox/unsettled?limit=0", Some(&admin), None).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
}
