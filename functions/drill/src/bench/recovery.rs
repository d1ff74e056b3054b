//! `clinic bench recovery`: a bulk retry of N dead rows (default 1,000; smoke 200) through
//! `clinic_core::operator::bulk` — the real code path, one locked row, one status check, one change and
//! one audit row per target, 200 per transaction — beside a raw-SQL baseline that does the same
//! change and audit for all rows in one statement. Target: 1,000 rows in ≤ 10 s.

use std::time::Instant;

use clinic_core::ids::WorkspaceId;
use clinic_core::lease::ActionKind;
use clinic_core::operator::{bulk, ActionRequest, BulkRequest, Operator, OutboxFilter};
use clinic_core::outbox::OutboxStatus;

use super::db::BenchConnections as _;
use super::report::{ratio, thousands, Report, Row};
use super::Options;
use clinic_testkit::TestDb;

/// Every row back to `dead` with a code, as planted.
const BURY: &str = "UPDATE event_outbox SET status = 'dead', last_error_code = 'bench_dead', attempts = 5";
/// The baseline: the same change and one audit row per row, in one statement.
const RAW_RETRY: &str = "WITH t AS ( \
         UPDATE event_outbox o SET status = 'pending', available_at = now(), claim_token = NULL, \
             claimed_by = NULL, claimed_until = NULL, updated_at = now() \
         FROM events e WHERE e.id = o.event_id AND e.workspace_id = $1 AND o.status = 'dead' \
         RETURNING o.event_id) \
     INSERT INTO operator_actions (id, workspace_id, event_id, action, actor, reason, status_before, status_after, batch_id) \
     SELECT gen_random_uuid(), $1, t.event_id, 'retry', 'bench', 'bench', 'dead', 'pending', $2 FROM t";

pub async fn run(db: &TestDb, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let rows: i64 = if options.smoke { 200 } else { 1_000 };
    let owner = db.owner().await?;
    let workspace = WorkspaceId::generate();
    owner.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'Bench Clinic')", &[&workspace]).await?;
    let (types, resources) = super::dispatch::catalog();
    owner.execute(super::dispatch::PREFILL, &[&workspace, &rows, &"dead", &types, &resources]).await?;
    owner.batch_execute(BURY).await?;
    owner.batch_execute("ANALYZE").await?;

    let pool = db.app_pool(2)?;
    let mut client = pool.get().await?;
    let request = BulkRequest {
        filter: OutboxFilter {
            workspace: Some(workspace),
            status: Some(OutboxStatus::Dead),
            error_code: Some("bench_dead".into()),
            ..OutboxFilter::default()
        },
        workspace: Some(workspace),
        action: ActionRequest::new(ActionKind::Retry, "bench", None)?,
        dry_run: false,
        limit: rows,
    };
    let operator = Operator::parse("bench")?;
    let started = Instant::now();
    let answer = bulk::run::<clinic_core::operator::Outbox>(&mut client, &request, &operator).await?;
    let figure = started.elapsed().as_secs_f64();
    anyhow::ensure!(answer.applied as i64 == rows, "bulk retry applied {} of {rows}", answer.applied);

    owner.batch_execute(BURY).await?;
    let batch = uuid::Uuid::from(ulid::Ulid::generate());
    let started = Instant::now();
    let raw = client.execute(RAW_RETRY, &[&workspace, &batch]).await?;
    let baseline = started.elapsed().as_secs_f64();
    anyhow::ensure!(raw as i64 == rows, "raw retry changed {raw} of {rows}");

    let (_, ratio_text) = ratio(figure, baseline);
    report.push(Row {
        measure: format!("Bulk retry of {} dead rows (s, one audit row each)", thousands(rows as f64)),
        figure: format!("{figure:.2} s"),
        baseline: format!("{baseline:.2} s (raw SQL, one statement)"),
        ratio: ratio_text,
        target: "≤ 10 s for 1,000".into(),
        met: (!options.smoke).then_some(figure <= 10.0),
    });
    Ok(())
}
