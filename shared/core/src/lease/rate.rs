//! A provider's rate, shared by every sender (DESIGN §5d, issue 41 item 3): one token bucket per
//! provider and region in `provider_rate_buckets`, so the listener Lambdas, the housekeeping Lambda
//! and `clinic dev` all draw on the same budget (SES's account rate, SNS's SMS rate).
//!
//! Invariants:
//! - [`take`] is one statement on the bucket's row (locked for that statement only, never across a
//!   provider call): it refills at the rate in force, then reserves a token when the reservation's
//!   wait fits `max_wait`, and answers how long to wait before the call. A reservation it cannot
//!   make changes nothing but the refill; the caller holds its row (the lease queue's hold: no
//!   attempt spent) for the answered time.
//! - [`slow`] records a throttling answer: the rate in force is `rate × factor` until the given end,
//!   and the saved-up burst is dropped, so every sender slows down at once, for a while.
//! - [`reserve`] is the same refill on the same row, then takes as many whole tokens as are at hand
//!   now (up to what is asked, never a wait): a sender reserves before it claims and claims only
//!   as many rows as it holds tokens for, so no claimed row waits for the provider's rate. Tokens a
//!   sender did not use go back with [`give_back`] (capped at the burst, as a refill is: a token
//!   given back is never more than the bucket would have held had it not been taken, so the rate
//!   is never over-spent); tokens of a sender that dies before giving them back are lost (the rate
//!   is under-spent for that moment, never over).
//! - The configured rate and burst are written on every take: a changed setting applies at once.
//! - One row per (provider, region); nothing about a message is kept.

use std::time::Duration;

use deadpool_postgres::GenericClient;

use crate::db::sql;

/// One provider's budget: `rate_per_sec` sends a second, up to `burst` at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Pace {
    /// The provider's name (`ses`, `sns`, or a stand-in's).
    pub provider: String,
    pub region: String,
    pub rate_per_sec: f64,
    pub burst: f64,
}

impl Pace {
    /// A bucket of `rate_per_sec` whose burst is one second's worth (at least one token).
    pub fn new(provider: impl Into<String>, region: impl Into<String>, rate_per_sec: f64) -> Pace {
        Pace { provider: provider.into(), region: region.into(), rate_per_sec, burst: rate_per_sec.max(1.0) }
    }
}

/// What [`take`] answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Turn {
    /// A token is reserved: call the provider after this wait (zero when one was at hand).
    Go(Duration),
    /// No token within the allowed wait: hold the row for (about) this long.
    Hold(Duration),
}

/// The rate in force: the configured one, slowed after a throttling answer.
const RATE_IN_FORCE: &str =
    "$3::float8 * CASE WHEN slowed_until > clock_timestamp() THEN slow_factor ELSE 1 END";

fn take_sql() -> String {
    format!(
        "UPDATE provider_rate_buckets b SET rate_per_sec = $3, burst = $4, \
           tokens = CASE WHEN c.taken THEN c.available - 1 ELSE c.available END, \
           refilled_at = c.at, updated_at = c.at \
         FROM (SELECT x.*, x.available - 1 >= -($5::float8 * x.rate) AS taken FROM ({refilled}) x) c \
         WHERE b.provider = c.provider AND b.region = c.region \
         RETURNING c.taken, greatest(0, (1 - c.available) / c.rate)",
        refilled = refilled(),
    )
}

/// The refilled tokens at hand, locked for this statement (`x`: `at`, `rate`, `available`).
fn refilled() -> String {
    format!(
        "SELECT provider, region, clock_timestamp() AS at, {rate} AS rate, \
           least($4::float8, tokens + greatest(0, extract(epoch FROM clock_timestamp() - refilled_at)) \
                                        * {rate}) AS available \
         FROM provider_rate_buckets WHERE provider = $1 AND region = $2 FOR UPDATE",
        rate = RATE_IN_FORCE,
    )
}

fn reserve_sql() -> String {
    format!(
        "UPDATE provider_rate_buckets b SET rate_per_sec = $3, burst = $4, \
           tokens = c.available - c.granted, refilled_at = c.at, updated_at = c.at \
         FROM (SELECT x.*, least($5::float8, greatest(0, floor(x.available)))::float8 AS granted \
               FROM ({refilled}) x) c \
         WHERE b.provider = c.provider AND b.region = c.region \
         RETURNING c.granted::bigint, greatest(0, (1 - (c.available - c.granted)) / c.rate)",
        refilled = refilled(),
    )
}

/// What [`reserve`] answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reserved {
    /// Tokens taken (each one send, now).
    pub granted: u32,
    /// When none was at hand: how long until the next one is.
    pub next_in: Duration,
}

/// Takes up to `want` whole tokens of `pace`'s bucket that are at hand now (no wait).
pub async fn reserve(
    client: &impl GenericClient,
    pace: &Pace,
    want: u32,
) -> Result<Reserved, tokio_postgres::Error> {
    static RESERVE: std::sync::LazyLock<String> = std::sync::LazyLock::new(reserve_sql);
    let want = f64::from(want);
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&pace.provider, &pace.region, &pace.rate_per_sec, &pace.burst, &want];
    let mut rows = sql::query(client, &RESERVE, &params).await?;
    if rows.is_empty() {
        sql::execute(client, CREATE, &params[..4]).await?;
        rows = sql::query(client, &RESERVE, &params).await?;
    }
    let Some(row) = rows.first() else { return Ok(Reserved { granted: 0, next_in: Duration::ZERO }) };
    let (granted, next_in): (i64, f64) = (row.get(0), row.get(1));
    Ok(Reserved {
        granted: u32::try_from(granted.max(0)).unwrap_or(0),
        next_in: if granted > 0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(next_in.clamp(0.0, 3600.0))
        },
    })
}

const GIVE_BACK: &str = "UPDATE provider_rate_buckets SET tokens = least(burst, tokens + $3), \
       updated_at = clock_timestamp() WHERE provider = $1 AND region = $2 \
       AND (slowed_until IS NULL OR slowed_until <= clock_timestamp())";

/// Returns `count` reserved tokens that were not used (capped at the burst; dropped while the
/// bucket is slowed after a throttling answer, as [`slow`] drops the saved-up burst).
pub async fn give_back(
    client: &impl GenericClient,
    pace: &Pace,
    count: u32,
) -> Result<(), tokio_postgres::Error> {
    if count == 0 {
        return Ok(());
    }
    let count = f64::from(count);
    sql::execute(client, GIVE_BACK, &[&pace.provider, &pace.region, &count]).await.map(drop)
}

const CREATE: &str = "INSERT INTO provider_rate_buckets (provider, region, rate_per_sec, burst, tokens) \
     VALUES ($1, $2, $3, $4, $4) ON CONFLICT (provider, region) DO NOTHING";

/// Reserves one send of `pace`'s provider when it can start within `max_wait`.
pub async fn take(
    client: &impl GenericClient,
    pace: &Pace,
    max_wait: Duration,
) -> Result<Turn, tokio_postgres::Error> {
    static TAKE: std::sync::LazyLock<String> = std::sync::LazyLock::new(take_sql);
    let max_wait = max_wait.as_secs_f64();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&pace.provider, &pace.region, &pace.rate_per_sec, &pace.burst, &max_wait];
    let mut rows = sql::query(client, &TAKE, &params).await?;
    if rows.is_empty() {
        sql::execute(client, CREATE, &params[..4]).await?;
        rows = sql::query(client, &TAKE, &params).await?;
    }
    let Some(row) = rows.first() else { return Ok(Turn::Go(Duration::ZERO)) };
    let (taken, wait): (bool, f64) = (row.get(0), row.get(1));
    let wait = Duration::from_secs_f64(wait.clamp(0.0, 3600.0));
    Ok(if taken { Turn::Go(wait) } else { Turn::Hold(wait) })
}

const SLOW: &str = "UPDATE provider_rate_buckets SET slow_factor = $3, \
       slowed_until = clock_timestamp() + $4::float8 * interval '1 millisecond', \
       tokens = least(tokens, 0), throttled = throttled + 1, updated_at = clock_timestamp() \
     WHERE provider = $1 AND region = $2";

/// After a throttling answer: `pace`'s provider runs at `factor` of its rate for `period`.
pub async fn slow(
    client: &impl GenericClient,
    pace: &Pace,
    factor: f64,
    period: Duration,
) -> Result<(), tokio_postgres::Error> {
    let period_ms = period.as_secs_f64() * 1000.0;
    let factor = factor.clamp(0.01, 1.0);
    sql::execute(client, SLOW, &[&pace.provider, &pace.region, &factor, &period_ms]).await.map(drop)
}
