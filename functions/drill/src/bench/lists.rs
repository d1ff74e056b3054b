//! Lists: the schedule view (`GET /v1/appointments`, a whole workspace's day) and patient search
//! (`GET /v1/patients?q=`) through the real HTTP router, page by page (50 items, following
//! `nextCursor`), beside the same statements in raw SQL on the same database in the same run.
//!
//! - Prefill (plain SQL, not timed): one workspace with 1,000,000 appointments (250 practitioners ×
//!   4,000 half-hour slots, 16 a day) and 200,000 patients named from 60 surnames × 10 endings and 60
//!   given names; `--smoke`: 20,000 and 4,000. Then `VACUUM ANALYZE`.
//! - One client, one request at a time, so a figure is one page's latency, not a queue. Each sample
//!   query walks [`PAGES`] pages; raw and API walks alternate query by query, so drift hits both.
//! - Baseline "raw tx": the route's database work by hand over one tokio-postgres connection as
//!   `clinic_app` — BEGIN, the list statement (`clinic_core`'s own text), the disclosure INSERT of the
//!   listed patients, COMMIT. Shown for scale: the same with an asynchronous commit (what the WAL
//!   flush of the disclosure rows costs) and "raw select" (the statement alone, no transaction).
//! - Target (issue 19): API p99 ≤ 10 ms per page and ≥ 0.8× raw (ratio = raw p99 / API p99).

use std::collections::BTreeSet;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use clinic_core::appointments::schedule::IN_WORKSPACE;
use clinic_core::ids::{MemberId, WorkspaceId};
use clinic_core::patients::search::{Search, SEARCH};
use clinic_http::auth::Role;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres::Client;

use super::client::{BenchAuth, Connection};
use super::db::BenchConnections as _;
use super::report::{ms, ratio, thousands, Report, Row};
use super::serve::ServerChild;
use super::stats::Samples;
use super::Options;
use clinic_testkit::TestDb;

const PAGE: i64 = 50;
const PAGES: usize = 4;
const PRACTITIONERS: i64 = 250;
const SLOTS_PER_DAY: i64 = 16;

const SURNAMES: &[&str] = &[
    "smith",
    "johnson",
    "williams",
    "brown",
    "jones",
    "garcia",
    "miller",
    "davis",
    "rodriguez",
    "martinez",
    "hernandez",
    "lopez",
    "gonzalez",
    "wilson",
    "anderson",
    "thomas",
    "taylor",
    "moore",
    "jackson",
    "martin",
    "lee",
    "perez",
    "thompson",
    "white",
    "harris",
    "sanchez",
    "clark",
    "ramirez",
    "lewis",
    "robinson",
    "walker",
    "young",
    "allen",
    "king",
    "wright",
    "scott",
    "torres",
    "nguyen",
    "hill",
    "flores",
    "green",
    "adams",
    "nelson",
    "baker",
    "hall",
    "rivera",
    "campbell",
    "mitchell",
    "carter",
    "roberts",
    "silva",
    "costa",
    "schmidt",
    "muller",
    "novak",
    "kowalski",
    "rossi",
    "dubois",
    "jansen",
    "okafor",
];
const ENDINGS: &[&str] = &["", "son", "ley", "ton", "er", "man", "field", "ford", "well", "by"];
const GIVEN: &[&str] = &[
    "maria",
    "james",
    "mary",
    "john",
    "patricia",
    "robert",
    "jennifer",
    "michael",
    "linda",
    "william",
    "elizabeth",
    "david",
    "barbara",
    "richard",
    "susan",
    "joseph",
    "jessica",
    "thomas",
    "sarah",
    "charles",
    "karen",
    "daniel",
    "nancy",
    "matthew",
    "lisa",
    "anthony",
    "betty",
    "mark",
    "margaret",
    "paul",
    "sandra",
    "steven",
    "ashley",
    "andrew",
    "emily",
    "joshua",
    "donna",
    "kenneth",
    "michelle",
    "kevin",
    "carol",
    "brian",
    "amanda",
    "george",
    "melissa",
    "timothy",
    "deborah",
    "ronald",
    "ana",
    "jose",
    "sofia",
    "luis",
    "chen",
    "wei",
    "aisha",
    "omar",
    "fatima",
    "ivan",
    "olga",
    "noor",
];

/// The raw side's own disclosure INSERT (the same rows `disclosures::record` writes).
const RAW_DISCLOSE: &str = "\
INSERT INTO patient_disclosures (id, workspace_id, patient_id, actor_kind, actor_id, purpose)
SELECT gen_random_uuid(), $1, patient_id, 'member', $2, $3 FROM unnest($4::uuid[]) AS d (patient_id)";

const PREFILL_PATIENTS: &str = "\
INSERT INTO patients (id, workspace_id, given_name, family_name, email, date_of_birth, created_at, updated_at)
SELECT gen_random_uuid(), $1,
       initcap(($3::text[])[1 + (n * 7) % cardinality($3::text[])]),
       initcap(($4::text[])[1 + n % cardinality($4::text[])] || ($5::text[])[1 + (n / 61) % cardinality($5::text[])]),
       'bench' || n || '@example.test', DATE '1940-01-01' + (n % 25000)::int, now(), now()
FROM generate_series(1, $2::bigint) AS n";

const PREFILL_PRACTITIONERS: &str = "\
INSERT INTO practitioners (id, workspace_id, display_name, specialty, created_at, updated_at)
SELECT gen_random_uuid(), $1, 'Dr. Bench ' || n, 'General practice', now(), now()
FROM generate_series(1, $2::bigint) AS n";

/// Appointment g: practitioner g mod P, slot g div P (16 half-hour slots a day from 08:00), a patient
/// spread over all of them; one in ten cancelled, one in ten completed.
const PREFILL_APPOINTMENTS: &str = "\
WITH doc AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM practitioners WHERE workspace_id = $1),
     pat AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM patients WHERE workspace_id = $1)
INSERT INTO appointments (id, workspace_id, patient_id, practitioner_id, starts_at, ends_at, status, reason,
                          version, created_at, updated_at)
SELECT gen_random_uuid(), $1, pat.id, doc.id, slot.starts_at, slot.starts_at + interval '30 minutes',
       CASE g % 10 WHEN 0 THEN 'cancelled' WHEN 1 THEN 'completed' ELSE 'booked' END,
       'Follow-up visit', 1, now(), now()
FROM generate_series(0, $2::bigint - 1) AS g
JOIN doc ON doc.k = g % $3::bigint
JOIN pat ON pat.k = (g * 7919) % $4::bigint
CROSS JOIN LATERAL (SELECT $5::timestamptz + ((g / $3::bigint) / 16) * interval '1 day' + interval '8 hours'
                           + ((g / $3::bigint) % 16) * interval '30 minutes' AS starts_at) AS slot";

struct Sizes {
    appointments: i64,
    patients: i64,
    queries: usize,
}

fn sizes(options: &Options) -> Sizes {
    if options.smoke {
        Sizes { appointments: 20_000, patients: 4_000, queries: 10 }
    } else {
        Sizes { appointments: 1_000_000, patients: 200_000, queries: 400 }
    }
}

fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 7, 0, 0, 0).single().unwrap_or_else(Utc::now)
}

/// Latencies of one side: API, raw transaction, raw select.
#[derive(Default)]
struct Sides {
    api: Samples,
    raw_tx: Samples,
    raw_async: Samples,
    raw_select: Samples,
    items: u64,
}

pub async fn run(db: &TestDb, options: &Options, report: &mut Report) -> anyhow::Result<()> {
    let sizes = sizes(options);
    let owner = db.owner().await?;
    let (workspace, member) = prefill(&owner, &sizes).await?;

    let auth = BenchAuth::new(workspace, member, Role::Staff)?;
    let server = ServerChild::start(&db.app_url(), &auth.secret, 4, false).await?;
    let mut api = Connection::open(server.address, auth.header).await?;
    let raw = super::db::connect(&db.app_url()).await?;
    let select_schedule = raw.prepare(IN_WORKSPACE).await?;
    let select_search = raw.prepare(SEARCH).await?;
    let disclose = raw.prepare(RAW_DISCLOSE).await?;
    let raw = Raw { client: &raw, workspace, member, disclose };

    let days = (sizes.appointments / PRACTITIONERS / SLOTS_PER_DAY).max(1);
    let mut schedule = Sides::default();
    let mut search = Sides::default();
    eprintln!("bench: lists: {} sample queries × {PAGES} pages each, schedule then search", sizes.queries);
    for i in 0..sizes.queries {
        let day = (i as i64 * 37) % days;
        let from = base() + chrono::Duration::days(day) + chrono::Duration::hours(8 + (i as i64 % 8));
        let to = from + chrono::Duration::days(1);
        schedule.items += raw.schedule(&select_schedule, from, to, &mut schedule.raw_tx, Mode::Tx).await?;
        raw.schedule(&select_schedule, from, to, &mut schedule.raw_async, Mode::TxAsyncCommit).await?;
        raw.schedule(&select_schedule, from, to, &mut schedule.raw_select, Mode::Select).await?;
        let query = format!(
            "/v1/appointments?from={}&to={}&limit={PAGE}",
            from.to_rfc3339_opts(SecondsFormat::Secs, true),
            to.to_rfc3339_opts(SecondsFormat::Secs, true)
        );
        api_walk(&mut api, &query, &mut schedule.api).await?;

        let prefix = prefix_of(i);
        search.items += raw.search(&select_search, &prefix, &mut search.raw_tx, Mode::Tx).await?;
        raw.search(&select_search, &prefix, &mut search.raw_async, Mode::TxAsyncCommit).await?;
        raw.search(&select_search, &prefix, &mut search.raw_select, Mode::Select).await?;
        api_walk(&mut api, &format!("/v1/patients?q={prefix}&limit={PAGE}"), &mut search.api).await?;
    }
    server.stop().await?;

    let scale = format!(
        "{} appointments, {} patients",
        thousands(sizes.appointments as f64),
        thousands(sizes.patients as f64)
    );
    push(
        report,
        &format!("5a. Schedule view: GET /v1/appointments, a workspace's day, page of {PAGE} ({scale})"),
        schedule,
    );
    push(
        report,
        &format!("5b. Patient search: GET /v1/patients?q=<2–4 letters>, page of {PAGE} ({scale})"),
        search,
    );
    report.note(format!(
        "Lists: one client, {PAGES} pages per sample query (first page and three followed by nextCursor); raw tx = \
         BEGIN, the same list statement, the disclosure INSERT, COMMIT over one connection as clinic_app; the \
         ratio is raw-tx p99 / API p99."
    ));
    Ok(())
}

fn prefix_of(i: usize) -> String {
    let (list, len) = if i % 3 == 2 { (GIVEN, 2 + i % 2) } else { (SURNAMES, 2 + i % 3) };
    let name = list[(i * 13) % list.len()];
    name.chars().take(len).collect()
}

fn push(report: &mut Report, measure: &str, mut sides: Sides) {
    let api_p99 = sides.api.quantile_ms(0.99);
    let raw_p99 = sides.raw_tx.quantile_ms(0.99);
    let (r, ratio_text) = ratio(raw_p99.unwrap_or(0.0), api_p99.unwrap_or(f64::MAX));
    let met = api_p99.map(|p99| p99 <= 10.0 && r >= 0.8);
    report.push(Row {
        measure: measure.to_owned(),
        figure: format!(
            "API p50 {} · p99 {} ({} pages, {} items listed)",
            ms(sides.api.quantile_ms(0.5)),
            ms(api_p99),
            sides.api.len(),
            thousands(sides.items as f64)
        ),
        baseline: format!(
            "raw tx p50 {} · p99 {}; raw tx with an asynchronous commit p50 {} · p99 {}; raw select p50 {} · p99 {}",
            ms(sides.raw_tx.quantile_ms(0.5)),
            ms(raw_p99),
            ms(sides.raw_async.quantile_ms(0.5)),
            ms(sides.raw_async.quantile_ms(0.99)),
            ms(sides.raw_select.quantile_ms(0.5)),
            ms(sides.raw_select.quantile_ms(0.99)),
        ),
        ratio: ratio_text,
        target: "p99 ≤ 10 ms and ≥ 0.8×".into(),
        met,
    });
}

/// Walks up to [`PAGES`] pages of `path` through the API, timing each request.
async fn api_walk(api: &mut Connection, path: &str, samples: &mut Samples) -> anyhow::Result<()> {
    let mut url = path.to_owned();
    for _ in 0..PAGES {
        let started = Instant::now();
        let (status, body) = api.get(&url).await?;
        samples.push(started.elapsed());
        anyhow::ensure!(status.is_success(), "GET {path}: {status}: {}", String::from_utf8_lossy(&body));
        let page: serde_json::Value = serde_json::from_slice(&body).context("a list answer")?;
        match page["nextCursor"].as_str() {
            Some(cursor) => url = format!("{path}&cursor={cursor}"),
            None => break,
        }
    }
    Ok(())
}

/// What a raw page does: the statement alone, or the route's transaction (its commit durable, or
/// `synchronous_commit = off` to show what the WAL flush of the disclosure rows costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Select,
    Tx,
    TxAsyncCommit,
}

struct Raw<'a> {
    client: &'a Client,
    workspace: WorkspaceId,
    member: MemberId,
    disclose: tokio_postgres::Statement,
}

impl Raw<'_> {
    /// One timed page: the statement alone, or BEGIN + statement + disclosures + COMMIT (see [`Mode`]).
    async fn page(
        &self,
        statement: &tokio_postgres::Statement,
        params: &[&(dyn ToSql + Sync)],
        purpose: &str,
        patient_column: &str,
        mode: Mode,
        samples: &mut Samples,
    ) -> anyhow::Result<Vec<tokio_postgres::Row>> {
        let started = Instant::now();
        match mode {
            Mode::Select => {}
            Mode::Tx => self.client.batch_execute("BEGIN").await?,
            Mode::TxAsyncCommit => {
                self.client.batch_execute("BEGIN; SET LOCAL synchronous_commit = off").await?
            }
        }
        let rows = self.client.query(statement, params).await?;
        if mode != Mode::Select {
            let patients: BTreeSet<uuid::Uuid> = rows.iter().map(|row| row.get(patient_column)).collect();
            let patients: Vec<uuid::Uuid> = patients.into_iter().collect();
            let member = self.member.uuid();
            self.client.execute(&self.disclose, &[&self.workspace, &member, &purpose, &patients]).await?;
            self.client.batch_execute("COMMIT").await?;
        }
        samples.push(started.elapsed());
        Ok(rows)
    }

    async fn schedule(
        &self,
        statement: &tokio_postgres::Statement,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        samples: &mut Samples,
        mode: Mode,
    ) -> anyhow::Result<u64> {
        let (mut after_at, mut after_id) = (from, uuid::Uuid::nil());
        let mut listed = 0;
        for _ in 0..PAGES {
            let status: Option<&str> = None;
            let params: [&(dyn ToSql + Sync); 6] =
                [&self.workspace, &after_at, &after_id, &to, &status, &PAGE];
            let rows =
                self.page(statement, &params, "GET /v1/appointments", "patient_id", mode, samples).await?;
            listed += rows.len() as u64;
            match rows.last() {
                Some(last) if rows.len() as i64 == PAGE => {
                    (after_at, after_id) = (last.get("starts_at"), last.get("id"))
                }
                _ => break,
            }
        }
        Ok(listed)
    }

    async fn search(
        &self,
        statement: &tokio_postgres::Statement,
        prefix: &str,
        samples: &mut Samples,
        mode: Mode,
    ) -> anyhow::Result<u64> {
        let search = Search::new(prefix, None).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (mut after_key, mut after_id) = (search.prefix().to_owned(), uuid::Uuid::nil());
        let dob: Option<chrono::NaiveDate> = None;
        let mut listed = 0;
        for _ in 0..PAGES {
            let params: [&(dyn ToSql + Sync); 7] =
                [&self.workspace, &search.prefix(), &search.end(), &after_key, &after_id, &dob, &PAGE];
            let rows = self.page(statement, &params, "GET /v1/patients", "id", mode, samples).await?;
            listed += rows.len() as u64;
            match rows.last() {
                Some(last) if rows.len() as i64 == PAGE => {
                    (after_key, after_id) = (last.get("sort_key"), last.get("id"))
                }
                _ => break,
            }
        }
        Ok(listed)
    }
}

/// The workspace, a staff member, practitioners, patients and appointments, by plain SQL.
async fn prefill(owner: &Client, sizes: &Sizes) -> anyhow::Result<(WorkspaceId, MemberId)> {
    let started = Instant::now();
    let workspace = WorkspaceId::generate();
    let member = MemberId::generate();
    owner.execute("INSERT INTO workspaces (id, name) VALUES ($1, 'Bench Clinic')", &[&workspace]).await?;
    owner
        .execute(
            "INSERT INTO members (id, workspace_id, role, display_name) VALUES ($1, $2, 'staff', 'Bench Staff')",
            &[&member, &workspace],
        )
        .await?;
    let (given, surnames, endings) = (strings(GIVEN), strings(SURNAMES), strings(ENDINGS));
    owner.execute(PREFILL_PATIENTS, &[&workspace, &sizes.patients, &given, &surnames, &endings]).await?;
    owner.execute(PREFILL_PRACTITIONERS, &[&workspace, &PRACTITIONERS]).await?;
    owner
        .execute(
            PREFILL_APPOINTMENTS,
            &[&workspace, &sizes.appointments, &PRACTITIONERS, &sizes.patients, &base()],
        )
        .await
        .context("prefilling appointments")?;
    owner.batch_execute("VACUUM ANALYZE").await?;
    eprintln!(
        "bench: lists: prefilled {} appointments and {} patients in {:.1} s",
        thousands(sizes.appointments as f64),
        thousands(sizes.patients as f64),
        started.elapsed().as_secs_f64()
    );
    Ok((workspace, member))
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}
