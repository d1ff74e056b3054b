//! The write path with history: the API run of row 1a (no dispatcher waiting) on empty tables, then
//! again after `--history` events (default 10,000,000; smoke 20,000) of already-dispatched history
//! were pre-filled by plain SQL into `events`, `event_resources` (the primary link) and `event_outbox`
//! — the tables every booking writes and whose indexes grow with time.
//!
//! Invariants:
//! - Both runs go through the same server child, clients and fixtures on the same database, so the
//!   ratio shows only what the history costs.
//! - The prefill (bench/history.rs, with the primary links) is untimed and followed by
//!   `VACUUM ANALYZE`.

use std::sync::Arc;

use clinic_http::auth::Role;

use super::client::BenchAuth;
use super::db::{seed, BenchConnections as _};
use super::report::{ratio, thousands, Report, Row};
use super::serve::ServerChild;
use super::write::{api_run, Slots, API_POOL, PATIENTS, PRACTITIONERS};
use super::Options;
use clinic_testkit::TestDb;

pub async fn run(db: &TestDb, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let clients = options.clients;
    let duration = options.write_duration();
    let owner = db.owner().await?;
    let fixtures = seed(&owner, PRACTITIONERS, PATIENTS).await?;
    let slots = Arc::new(Slots::new(fixtures.clone()));
    let BenchAuth { secret, header: auth } =
        BenchAuth::new(fixtures.workspace_id, fixtures.member_id, Role::Admin)?;
    let server = ServerChild::start(&db.app_url(), &secret, API_POOL, false).await?;

    eprintln!("bench: write-history: API on empty tables ({clients} clients, {duration:?})");
    let mut empty = api_run(server.address, &auth, &slots, clients, duration).await?;
    empty.check("API, empty tables")?;
    let history = options.history_rows();
    super::history::prefill(db.url(), history, None, true).await?;
    eprintln!("bench: write-history: API with {} events of history", thousands(history as f64));
    let mut with_history = api_run(server.address, &auth, &slots, clients, duration).await?;
    with_history.check("API with history")?;
    server.stop().await?;

    let (history_ratio, history_ratio_text) = ratio(with_history.per_second(), empty.per_second());
    report.push(Row {
        measure: format!(
            "1d. Write (as 1a) with {} already-dispatched events of history in events, event_resources and event_outbox",
            thousands(history as f64)
        ),
        figure: with_history.describe("req"),
        baseline: format!("the same run on empty tables, same section: {}", empty.describe("req")),
        ratio: history_ratio_text,
        target: "≥ 0.8× empty".into(),
        met: Some(history_ratio >= 0.8),
    });
    Ok(())
}
