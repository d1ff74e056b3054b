//! `clinic bench write|write-history|dispatch|sustained|latency|lambda-window|operator|disclosure|lists|recovery|fairness|all
//! [--smoke]`: measures the pipeline beside the raw-SQL limit,
//! in one run, on one database, and prints a markdown table (machine description first).
//!
//! Invariants:
//! - Every figure is printed beside a baseline measured in the same run against the same database, so
//!   drift on a shared machine shows up in both (the ratio is the figure that matters).
//! - Each section runs in its own fresh database (the testkit's scratch database, `clinic_test_<ulid>`,
//!   a copy of the migrated template) on the server named by `DATABASE_URL` (or the local dev
//!   cluster), dropped at the end, even when the section fails.
//! - SQL: the raw baselines and the prefills are the bench's own statements on purpose (they are what
//!   the service is compared with), each a named const beside the function that runs it; catalog
//!   facts (event types, the NOTIFY channel) come from the Rust source of truth. One-word
//!   maintenance commands (`VACUUM`, `ANALYZE`, `BEGIN`, `SET …`) stay inline.
//! - Load goes only to 127.0.0.1: the API is a child process of this one (`clinic bench serve`,
//!   hidden) serving the real router with `axum::serve` on `127.0.0.1:0`, so its peak RSS is its own.
//! - `--smoke` runs every code path for seconds, with small volumes; it proves the benchmark works and
//!   says nothing about speed.
//! - Logging: the bench processes log at `warn` unless `RUST_LOG` says otherwise, so per-request and
//!   per-event info lines are not part of the figures.

mod best_config;
pub(crate) mod client;
mod db;
mod disclosure;
mod dispatch;
mod fairness;
mod history;
mod lambda_window;
mod latency;
mod latency_transport;
mod lists;
mod operator;
mod outbox_fair;
mod recovery;
mod report;
mod runtime_api;
mod serve;
mod stats;
mod sustained;
mod write;
mod write_history;

use std::time::Duration;

use report::Report;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    target: Target,
}

#[derive(Debug, clap::Subcommand)]
enum Target {
    /// Write path: appointments through the HTTP API beside raw SQL, plus the server's peak RSS.
    Write(Options),
    /// Write path on empty tables and again with `--history` events of history.
    WriteHistory(Options),
    /// Dispatch: the real dispatcher (no-op transport, and with `--transport-latency-ms`) beside a raw
    /// claim-and-mark loop, empty and with history.
    Dispatch(Options),
    /// Sustained dispatch with a producer on a private PostgreSQL cluster with autovacuum on.
    Sustained(Options),
    /// Latency: commit → listener receipt at two rates, and commit → accepted with a slow transport.
    Latency(Options),
    /// The dispatcher Lambda binary under a local Runtime API on a (compressible) schedule.
    LambdaWindow(Options),
    /// Operator queries: outbox list and stats with and without 1,000,000 events of history.
    Operator(Options),
    /// The cost of the disclosure log on the read and write paths.
    Disclosure(Options),
    /// Lists: the schedule view and patient search, page by page, beside the same statements in raw SQL.
    Lists(Options),
    /// Bulk recovery: 1,000 dead rows retried through the operator's bulk path beside raw SQL.
    Recovery(Options),
    /// Fairness: quiet clinics' notices beside one clinic's burst, at a provider's rate, fair claim
    /// beside oldest-first.
    Fairness(Options),
    /// Everything above, one table.
    All(Options),
    /// The API server child of the write and latency runs (internal).
    #[command(hide = true)]
    Serve(serve::ServeArgs),
}

/// Knobs shared by every section; the defaults are the issue's.
#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Seconds-long check of every code path (small volumes; figures mean nothing).
    #[arg(long)]
    smoke: bool,
    /// Concurrent clients of the write path.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Seconds per write-path run (default 10; smoke 1).
    #[arg(long)]
    seconds: Option<u64>,
    /// Pending events drained per dispatch run (default 100000; smoke 5000).
    #[arg(long)]
    events: Option<i64>,
    /// Already-dispatched history rows for the dispatch and write runs with history (default
    /// 10000000; smoke 20000).
    #[arg(long)]
    history: Option<i64>,
    /// Rows claimed per step, for the dispatcher and the raw loop alike.
    #[arg(long, default_value_t = 100)]
    batch: i64,
    /// Batches the real dispatcher keeps between claim and mark (CLINIC_DISPATCH_STEPS_IN_FLIGHT).
    #[arg(long, default_value_t = clinic_core::dispatch::DispatchConfig::default().steps_in_flight)]
    steps_in_flight: usize,
    /// Seconds of the sustained dispatch run (default 300; smoke 10).
    #[arg(long)]
    sustain_seconds: Option<u64>,
    /// Latencies (ms, comma-separated) of the transport the dispatch runs also drain through.
    #[arg(long, value_delimiter = ',', default_value = "0,5,20")]
    transport_latency_ms: Vec<u64>,
    /// Events per second of the latency run.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Events per second of the second latency run.
    #[arg(long, default_value_t = 1000)]
    high_rate: u32,
    /// Latency (ms) of the transport of the commit → accepted run.
    #[arg(long, default_value_t = 10)]
    latency_transport_ms: u64,
    /// Seconds between scheduled ticks of the Lambda run (default 60, as deployed; smoke 3).
    #[arg(long)]
    tick_secs: Option<u64>,
    /// Ticks of the Lambda run per schedule, writes spread over them (default 5; smoke 1).
    #[arg(long)]
    lambda_ticks: Option<u32>,
    /// Events per second committed during the Lambda run.
    #[arg(long, default_value_t = 20)]
    lambda_rate: u32,
    /// Seconds of each latency run (default 20; smoke 1).
    #[arg(long)]
    latency_seconds: Option<u64>,
    /// Reminders in the fairness run's burst (default 10000; smoke 200).
    #[arg(long)]
    fairness_burst: Option<usize>,
    /// Seconds of each fairness scenario's trickle (default 20; smoke 3).
    #[arg(long)]
    fairness_seconds: Option<u64>,
    /// Rows each of the fairness run's senders claims at a time (CLINIC_DELIVERY_BATCH).
    #[arg(long, default_value_t = clinic_core::delivery::DEFAULT_BATCH)]
    fairness_batch: i64,
    /// Sends a second the fairness run's provider stand-in allows (its shared token bucket).
    #[arg(long, default_value_t = 50)]
    provider_rate: u32,
}

impl Options {
    fn write_duration(&self) -> Duration {
        Duration::from_secs(self.seconds.unwrap_or(if self.smoke { 1 } else { 10 }))
    }
    fn pending_events(&self) -> i64 {
        self.events.unwrap_or(if self.smoke { 5_000 } else { 100_000 })
    }
    fn history_rows(&self) -> i64 {
        self.history.unwrap_or(if self.smoke { 20_000 } else { 10_000_000 })
    }
    fn sustain_duration(&self) -> Duration {
        Duration::from_secs(self.sustain_seconds.unwrap_or(if self.smoke { 10 } else { 300 }))
    }
    fn tick_period(&self) -> Duration {
        Duration::from_secs(self.tick_secs.unwrap_or(if self.smoke { 3 } else { 60 }))
    }
    fn lambda_ticks(&self) -> u32 {
        self.lambda_ticks.unwrap_or(if self.smoke { 1 } else { 5 })
    }
    fn fairness_burst(&self) -> usize {
        self.fairness_burst.unwrap_or(if self.smoke { 200 } else { 10_000 })
    }
    fn fairness_duration(&self) -> Duration {
        Duration::from_secs(self.fairness_seconds.unwrap_or(if self.smoke { 3 } else { 20 }))
    }
    fn latency_duration(&self) -> Duration {
        Duration::from_secs(self.latency_seconds.unwrap_or(if self.smoke { 1 } else { 20 }))
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let (options, sections): (Options, &[Section]) = match args.target {
        Target::Serve(serve_args) => return serve::run(serve_args).await,
        Target::Write(o) => (o, &[Section::Write]),
        Target::WriteHistory(o) => (o, &[Section::WriteHistory]),
        Target::Dispatch(o) => (o, &[Section::Dispatch]),
        Target::Sustained(o) => (o, &[Section::Sustained]),
        Target::Latency(o) => (o, &[Section::Latency]),
        Target::LambdaWindow(o) => (o, &[Section::LambdaWindow]),
        Target::Operator(o) => (o, &[Section::Operator]),
        Target::Disclosure(o) => (o, &[Section::Disclosure]),
        Target::Lists(o) => (o, &[Section::Lists]),
        Target::Recovery(o) => (o, &[Section::Recovery]),
        Target::Fairness(o) => (o, &[Section::Fairness]),
        Target::All(o) => (
            o,
            &[
                Section::Write,
                Section::WriteHistory,
                Section::Dispatch,
                Section::Sustained,
                Section::Latency,
                Section::LambdaWindow,
                Section::Operator,
                Section::Disclosure,
                Section::Lists,
                Section::Recovery,
                Section::Fairness,
            ],
        ),
    };
    init_logging();
    anyhow::ensure!(options.clients >= 1, "--clients must be at least 1");
    anyhow::ensure!((1..=1000).contains(&options.batch), "--batch must be 1-1000");
    anyhow::ensure!((1..=16).contains(&options.steps_in_flight), "--steps-in-flight must be 1-16");
    anyhow::ensure!(options.rate >= 1, "--rate must be at least 1");
    anyhow::ensure!(options.high_rate >= 1, "--high-rate must be at least 1");
    anyhow::ensure!((1..=1000).contains(&options.lambda_rate), "--lambda-rate must be 1-1000");
    anyhow::ensure!(options.tick_period() >= Duration::from_secs(2), "--tick-secs must be at least 2");
    anyhow::ensure!(options.lambda_ticks() >= 1, "--lambda-ticks must be at least 1");
    anyhow::ensure!((1..=10_000).contains(&options.provider_rate), "--provider-rate must be 1-10000");
    anyhow::ensure!((1..=100).contains(&options.fairness_batch), "--fairness-batch must be 1-100");
    anyhow::ensure!(
        (1..=1_000_000).contains(&options.fairness_burst()),
        "--fairness-burst must be 1-1000000"
    );
    anyhow::ensure!(
        options.fairness_duration() >= Duration::from_secs(1),
        "--fairness-seconds must be at least 1"
    );
    anyhow::ensure!(
        options.transport_latency_ms.iter().all(|ms| *ms <= 10_000),
        "--transport-latency-ms values must be 0-10000"
    );
    if sections.iter().any(|section| matches!(section, Section::LambdaWindow)) {
        lambda_window::prerequisites()?;
    }
    let (admin_url, cluster) = clinic::settings::database()?;
    let outcome = run_sections(&admin_url, &options, sections).await;
    if let Some(cluster) = cluster {
        cluster.stop()?;
    }
    outcome
}

#[derive(Debug, Clone, Copy)]
enum Section {
    Write,
    WriteHistory,
    Dispatch,
    Sustained,
    Latency,
    LambdaWindow,
    Operator,
    Disclosure,
    Lists,
    Recovery,
    Fairness,
}

async fn run_sections(admin_url: &str, options: &Options, sections: &[Section]) -> anyhow::Result<()> {
    let mut report = Report::new(admin_url, options.smoke).await?;
    let outcome = run_each(admin_url, options, sections, &mut report).await;
    // The rows measured so far are printed also when a later section failed.
    println!("{}", report.render());
    outcome
}

async fn run_each(
    admin_url: &str,
    options: &Options,
    sections: &[Section],
    report: &mut Report,
) -> anyhow::Result<()> {
    for section in sections {
        if let Section::Sustained = section {
            // Its own private cluster, not the bench server.
            sustained::run(options, report).await?;
            continue;
        }
        let bench_db = db::create(admin_url).await?;
        eprintln!("bench: database {}", bench_db.name);
        match section {
            Section::Write => write::run(&bench_db, options, report).await?,
            Section::WriteHistory => write_history::run(&bench_db, options, report).await?,
            Section::Dispatch => dispatch::run(&bench_db, options, report).await?,
            Section::Sustained => {}
            Section::Latency => latency::run(&bench_db, options, report).await?,
            Section::LambdaWindow => lambda_window::run(&bench_db, options, report).await?,
            Section::Operator => operator::run(admin_url, &bench_db, options, report).await?,
            Section::Disclosure => disclosure::run(&bench_db, options, report).await?,
            Section::Lists => lists::run(&bench_db, options, report).await?,
            Section::Recovery => recovery::run(&bench_db, options, report).await?,
            Section::Fairness => fairness::run(&bench_db, options, report).await?,
        }
        // Dropping `bench_db` drops the database (also when the section failed).
    }
    Ok(())
}

/// Bench processes log warnings only (unless `RUST_LOG` is set): the figures should not include
/// formatting a log line per request or per event. With `OTEL_EXPORTER_OTLP_ENDPOINT` set the spans
/// are exported as in production (`clinic_core::telemetry`; set `RUST_LOG=warn` for the same log
/// level), so the cost of the export per event can be measured.
pub(crate) fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let settings = crate::settings::current();
    if settings.telemetry.export {
        clinic_core::telemetry::init(clinic_core::telemetry::LogFormat::Text, &settings.telemetry);
        return;
    }
    let filter = settings
        .rust_log
        .as_deref()
        .and_then(|filter| EnvFilter::try_new(filter).ok())
        .unwrap_or_else(|| EnvFilter::new("warn"));
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).compact().try_init();
}
