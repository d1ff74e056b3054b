//! An attempt whose endpoint row stays locked past the sender's `lock_timeout` while the attempt
//! is marked (a pause of the fan-out, an endpoint update or an operator's session that does not
//! end): the receiver has answered, so the attempt happened. It must be recorded and its delivery
//! marked — not rolled back and sent again after the lease — and the endpoint's seen status and its
//! audit stay as they were (no status row claims a change nobody made).

use std::sync::atomic::Ordering;

use super::support::Fixture;
use super::webhook_throttle::{delivery, one_delivery, receiver};

/// The endpoint's status rows in its audit.
async fn status_rows(fx: &Fixture) -> i64 {
    fx.count("SELECT count(*) FROM webhook_endpoint_actions WHERE action = 'status'").await
}

#[tokio::test]
async fn an_attempt_marked_while_its_endpoint_stays_locked_is_recorded_once_and_not_sent_again() {
    for answer in [200u16, 500] {
        let fx = Fixture::new().await;
        let (url, calls) = receiver(answer, "").await;
        let (sender, id) = one_delivery(&fx, url).await;

        // Another session holds the endpoint's row for longer than the sender's lock_timeout (3 s).
        let mut locker = fx.db.client().await;
        let held = locker.transaction().await.unwrap();
        held.execute("SELECT 1 FROM webhook_endpoints FOR UPDATE", &[]).await.unwrap();
        let report = sender.send_due(1).await;
        held.rollback().await.unwrap();

        assert_eq!(calls.load(Ordering::SeqCst), 1, "answer {answer}: one request");
        let report = report.unwrap_or_else(|error| panic!("answer {answer}: the step failed: {error:?}"));
        let (status, attempts, code, _) = delivery(&fx, id).await;
        let recorded = fx.count("SELECT count(*) FROM webhook_attempts").await;
        assert_eq!(recorded, 1, "answer {answer}: the attempt that happened is recorded");
        if answer == 200 {
            assert_eq!(report.delivered, 1, "{report:?}");
            assert_eq!((status.as_str(), attempts), ("delivered", 1));
        } else {
            assert_eq!(report.retried, 1, "{report:?}");
            assert_eq!((status.as_str(), attempts, code.as_deref()), ("retry", 1, Some("http_status")));
        }
        assert_eq!(status_rows(&fx).await, 0, "answer {answer}: no status change was audited");

        // Nothing is sent again while the delivery is not due (a delivered one never is).
        sender.send_due(1).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1, "answer {answer}: not sent again");
    }
}
