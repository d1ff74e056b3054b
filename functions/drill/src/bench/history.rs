//! History for the runs "with history": already-dispatched events pre-filled by plain SQL
//! ([`super::dispatch::PREFILL`]), in chunks of 100,000 (each into a fresh workspace, or all into the
//! caller's), on two owner connections at once, then `VACUUM ANALYZE`, as a database past its first
//! autovacuum would be, then a `CHECKPOINT`, so the prefill's WAL is flushed before anything is timed
//! (otherwise its checkpoints run back to back through the timed run). Untimed by the figures.
//!
//! Invariants:
//! - Exactly `rows` events (with their outbox rows) are written, each chunk in its own statement, so
//!   a failed chunk fails the prefill instead of leaving a silent gap.
//! - With `links`, each event also gets its primary timeline link (what `store::append` writes
//!   first), for the write path, whose `event_resources` index grows with time. Links are written
//!   per chunk's workspace, so they need the fresh workspaces (the prefill refuses both at once).

use anyhow::Context;
use futures::stream::{self, StreamExt, TryStreamExt};
use tokio::time::Instant;
use ulid::Ulid;

use super::db::connect;
use super::dispatch::{catalog, PREFILL};

/// The primary timeline link of every event of workspace `$1`.
const PREFILL_LINKS: &str =
    "INSERT INTO event_resources (workspace_id, resource_type, resource_id, event_id) \
     SELECT workspace_id, resource_type, resource_id, id FROM events WHERE workspace_id = $1";

/// Rows per prefill statement.
const CHUNK: i64 = 100_000;

/// Owner connections filling at once (the bench machine has two cores).
const CONNECTIONS: usize = 2;

/// Writes `rows` dispatched events of history into the database at `owner_url` (see the module docs)
/// and says how long it took: all into `workspace`, or into a fresh workspace per chunk when `None`.
pub(super) async fn prefill(
    owner_url: &str,
    rows: i64,
    workspace: Option<uuid::Uuid>,
    links: bool,
) -> anyhow::Result<()> {
    anyhow::ensure!(!(links && workspace.is_some()), "history links need a fresh workspace per chunk");
    let started = Instant::now();
    let (types, resources) = &catalog();
    let chunks: Vec<i64> = (0..rows).step_by(CHUNK as usize).map(|from| CHUNK.min(rows - from)).collect();
    let mut clients = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS.min(chunks.len().max(1)) {
        clients.push(tokio::sync::Mutex::new(connect(owner_url).await?));
    }
    let clients = &clients;
    stream::iter(chunks.into_iter().enumerate())
        .map(|(n, chunk)| async move {
            let client = clients[n % clients.len()].lock().await;
            let workspace = workspace.unwrap_or_else(|| uuid::Uuid::from(Ulid::generate()));
            client
                .execute(PREFILL, &[&workspace, &chunk, &"dispatched", types, resources])
                .await
                .context("pre-filling history")?;
            if links {
                client.execute(PREFILL_LINKS, &[&workspace]).await.context("pre-filling history links")?;
            }
            Ok::<_, anyhow::Error>(())
        })
        .buffer_unordered(clients.len())
        .try_collect::<()>()
        .await?;
    let owner = clients[0].lock().await;
    owner.batch_execute("VACUUM ANALYZE").await?;
    checkpoint(&owner).await?;
    let seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "bench: pre-filled {rows} events of history in {seconds:.1} s ({:.0} rows/s)",
        rows as f64 / seconds.max(1e-9)
    );
    Ok(())
}

/// Flushes the prefill's WAL with `CHECKPOINT`. A role without the right to checkpoint (neither
/// superuser nor `pg_checkpoint`) gets a warning instead: the figures are then taken with the
/// prefill's checkpoints still running, as before.
async fn checkpoint(owner: &tokio_postgres::Client) -> anyhow::Result<()> {
    match owner.batch_execute("CHECKPOINT").await {
        Ok(()) => Ok(()),
        Err(error) if error.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            eprintln!("bench: no CHECKPOINT after the prefill (the role may not checkpoint); timing anyway");
            Ok(())
        }
        Err(error) => Err(error).context("checkpoint after the prefill"),
    }
}
