//! Sustained dispatch with autovacuum on: a private PostgreSQL cluster started by the bench with
//! PostgreSQL's defaults (fsync on, autovacuum on, its default naptime; the cluster `clinic dev`
//! starts, in a throwaway folder), a producer keeping a backlog, the real dispatcher draining for
//! `--sustain-seconds` (default 300; smoke 10), rate per window and the outbox's dead tuples at the
//! end beside their bound.
//!
//! Invariants:
//! - The shared server of the other sections runs with autovacuum off (CI), where the outbox's
//!   per-table autovacuum settings (migrations/V1: threshold 5,000, scale factor 0, no cost delay)
//!   cannot act; here they do, so the figure is what a deployed database sees.
//! - The cluster, its folder and its scratch database are removed at the end, also when the run fails.
//! - Bound on dead tuples: autovacuum visits the outbox at most one naptime after it passed its
//!   threshold, so dead tuples stay below threshold + rate × (naptime + one vacuum's duration); the
//!   row prints the threshold + rate × 2 × naptime envelope beside the measured figure.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use super::db::BenchConnections as _;
use super::report::{thousands, Report};
use super::Options;
use clinic::local_pg::{Durability, LocalPostgres};

const AUTOVACUUMS: &str =
    "SELECT coalesce(autovacuum_count, 0) FROM pg_stat_user_tables WHERE relname = 'event_outbox'";

const THRESHOLD: &str =
    "SELECT coalesce((SELECT split_part(o, '=', 2)::bigint FROM unnest(c.reloptions) AS o \
     WHERE o LIKE 'autovacuum_vacuum_threshold=%'), current_setting('autovacuum_vacuum_threshold')::bigint) \
     FROM pg_class c WHERE c.relname = 'event_outbox'";

/// `autovacuum_naptime` in seconds (pg_settings keeps it in its unit, `s`).
const NAPTIME_SECS: &str = "SELECT setting::bigint FROM pg_settings WHERE name = 'autovacuum_naptime'";

pub async fn run(options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let folder = clinic::settings::data_dir().join(format!("bench-pg-{}", ulid::Ulid::generate()));
    let port = clinic_testkit::free_port()?;
    let cluster = tokio::task::spawn_blocking({
        let folder = folder.clone();
        move || LocalPostgres::own(&folder, port, Durability::Durable)
    })
    .await??;
    // Where the data really is (as root it may be a symlink to a folder the server's account can reach).
    let real = std::fs::canonicalize(&folder).unwrap_or_else(|_| folder.clone());
    let outcome = measure(&cluster.url(), options, report).await;
    let stopped = cluster.stop();
    drop(cluster);
    remove(&folder, &real);
    stopped?;
    outcome
}

async fn measure(admin_url: &str, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let db = super::db::create(admin_url).await?;
    let owner = db.owner().await?;
    let setting = |name: &'static str| {
        let owner = &owner;
        async move { owner.query_one(&format!("SHOW {name}"), &[]).await.map(|row| row.get::<_, String>(0)) }
    };
    let autovacuum = setting("autovacuum").await?;
    let naptime = setting("autovacuum_naptime").await?;
    let fsync = setting("fsync").await?;
    let naptime_secs: i64 = owner.query_one(NAPTIME_SECS, &[]).await?.get(0);
    let threshold: i64 = owner.query_one(THRESHOLD, &[]).await?.get(0);
    let duration = options.sustain_duration();
    let window = if options.smoke { Duration::from_secs(2) } else { Duration::from_secs(30) };
    eprintln!(
        "bench: sustained: {duration:?} on a private cluster (autovacuum {autovacuum}, naptime {naptime})"
    );
    let run = super::dispatch::sustained(&db, &owner, options.batch, duration, window, false).await?;
    let autovacuums: i64 = owner.query_one(AUTOVACUUMS, &[]).await?.get(0);
    let peak = run.rates.iter().copied().fold(0.0, f64::max);
    let bound = threshold as f64 + peak * 2.0 * naptime_secs as f64;
    super::dispatch::push_sustained(
        report,
        "2c",
        &run,
        duration,
        window,
        &format!(
            "a private PostgreSQL cluster with its defaults: autovacuum {autovacuum}, naptime {naptime}, fsync {fsync}; \
             {autovacuums} autovacuums of event_outbox; dead-tuple bound threshold {} + peak rate × 2 × naptime = {}{}",
            thousands(threshold as f64),
            thousands(bound),
            if (run.dead_tuples_at_end as f64) <= bound { " (within)" } else { " (**exceeded**)" }
        ),
    );
    drop(owner);
    drop(db);
    Ok(())
}

/// Removes the cluster's folder (and the folder it points to, when it is a symlink).
fn remove(folder: &Path, real: &Path) {
    for path in [real, folder] {
        let removed = match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => std::fs::remove_file(path),
            Ok(_) => std::fs::remove_dir_all(path),
            Err(_) => Ok(()),
        };
        if let Err(error) = removed.with_context(|| format!("removing {}", path.display())) {
            eprintln!("bench: sustained: {error:#}");
        }
    }
}
