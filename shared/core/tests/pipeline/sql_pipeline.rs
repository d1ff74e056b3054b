//! `sql::pipeline`: a group of statements sent together runs in the order written, on a fresh
//! connection (nothing cached yet) and on a warm one, and a failure aborts the statements after it.

use clinic_core::db::sql;

const INSERT: &str = "INSERT INTO pipeline_seen VALUES (1)";
const COUNT: &str = "SELECT count(*) FROM pipeline_seen";
const FAIL: &str = "SELECT 1 / 0";

#[tokio::test]
async fn a_group_runs_in_the_order_written_whatever_the_cache_holds() {
    let db = clinic_testkit::fresh_db().await;
    let mut client = db.client().await;
    let tx = client.transaction().await.unwrap();
    tx.batch_execute("CREATE TEMP TABLE pipeline_seen (n int)").await.unwrap();
    for round in 0..10_i64 {
        // The count is sent first (it sees the rows so far), then the insert, then the count again.
        let (before, inserted, after) = sql::pipeline(
            &tx,
            &[COUNT, INSERT],
            (
                sql::query_one(&tx, COUNT, &[]),
                sql::execute(&tx, INSERT, &[]),
                sql::query_one(&tx, COUNT, &[]),
            ),
        )
        .await
        .unwrap();
        assert_eq!(before.unwrap().get::<_, i64>(0), round);
        assert_eq!(inserted.unwrap(), 1);
        assert_eq!(after.unwrap().get::<_, i64>(0), round + 1, "round {round}");
    }
}

#[tokio::test]
async fn a_failed_statement_fails_the_ones_after_it() {
    let db = clinic_testkit::fresh_db().await;
    let mut client = db.client().await;
    let tx = client.transaction().await.unwrap();
    tx.batch_execute("CREATE TEMP TABLE pipeline_seen (n int)").await.unwrap();
    let (inserted, failed, counted) = sql::pipeline(
        &tx,
        &[INSERT, FAIL, COUNT],
        (sql::execute(&tx, INSERT, &[]), sql::query_one(&tx, FAIL, &[]), sql::query_one(&tx, COUNT, &[])),
    )
    .await
    .unwrap();
    assert_eq!(inserted.unwrap(), 1);
    assert!(failed.is_err());
    assert!(counted.is_err(), "the transaction is aborted after the failure");
}
