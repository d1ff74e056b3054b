//! `clinic dev`: the whole service in one local process.
//!
//! Starts (or adopts) the project-local PostgreSQL cluster unless `DATABASE_URL` is set, applies
//! migrations, seeds a demo workspace once (an admin and two practitioners), prints a ready admin token
//! and the base URL, then serves the API on 127.0.0.1 with the dispatcher loop and the in-process
//! listeners running beside it. The API path connects as the restricted `clinic_app` role.
//!
//! Invariants:
//! - `clinic dev` owns its data folder (`local_pg::LocalPostgres::own`): a second one on the same
//!   folder is refused with the first one's pid and URLs; Ctrl-C (SIGINT) and SIGTERM stop the server,
//!   the dispatcher and the cluster, whether this run started it or adopted it after a crash. A
//!   database named by `DATABASE_URL` is never started or stopped.
//! - The signal handlers are installed before anything starts, so a signal during start-up still
//!   ends in the same orderly stop.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clinic_core::context::Ctx;
use clinic_core::db::{connect_pool_as, url_with_role};
use clinic_core::domain::values::{Name, Specialty};
use clinic_core::ids::{MemberId, WorkspaceId};
use clinic_core::practitioners::{self, NewPractitioner};
use clinic_core::telemetry::{self, LogFormat};
use clinic_core::workspaces;
use clinic_http::auth::{issue_token, Role};
use clinic_http::ApiConfig;
use clinic_http::{router, AppState};

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Address to serve on (loopback only by default).
    #[arg(long, env = "CLINIC_HOST", default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// Port to serve on.
    #[arg(long, env = "CLINIC_PORT", default_value_t = 3000)]
    port: u16,
    /// A throwaway cluster with fast, non-durable settings (fsync off), wiped on exit.
    #[arg(long, env = "CLINIC_PG_EPHEMERAL")]
    ephemeral: bool,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    telemetry::init(LogFormat::Text, &crate::settings::current().telemetry);
    let shutdown = Shutdown::install()?;
    let ephemeral = args.ephemeral;
    let (url, mut cluster) =
        tokio::task::spawn_blocking(move || crate::settings::owned_database(ephemeral)).await??;
    if let Some(cluster) = &mut cluster {
        cluster.note_owner(format!("api: http://{}", SocketAddr::new(args.host, args.port)))?;
    }
    let outcome = serve(args, &url, shutdown).await;
    if let Some(cluster) = cluster {
        tokio::task::spawn_blocking(move || cluster.stop())
            .await?
            .context("stopping the local PostgreSQL cluster")?;
    }
    outcome
}

/// SIGINT (Ctrl-C) or SIGTERM (a process manager, `docker stop`), registered at once.
struct Shutdown {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Shutdown {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Shutdown {
            interrupt: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    async fn received(mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => tracing::info!("SIGINT received; stopping"),
            _ = self.terminate.recv() => tracing::info!("SIGTERM received; stopping"),
        }
    }
}

async fn serve(args: DevArgs, url: &str, shutdown: Shutdown) -> anyhow::Result<()> {
    crate::commands::migrate::apply(url).await?;
    let app_url = url_with_role(url, "clinic_app");
    let settings = crate::settings::current();
    let ca_file = settings.ca_file.as_deref();
    let pool = connect_pool_as(&app_url, 16, ca_file, None, &settings.db_timeouts)?;
    // Tenants and members are the owner's to create: `clinic_app` may only read them (migration V6).
    let (workspace_id, admin_id) =
        seed(&connect_pool_as(url, 1, ca_file, None, &settings.db_timeouts)?).await?;
    let secret = crate::settings::jwt_secret()?;
    let token = issue_token(
        secret.as_bytes(),
        workspace_id,
        admin_id.ulid(),
        Role::Admin,
        Duration::from_secs(7 * 24 * 3600),
    )?;

    let address = SocketAddr::new(args.host, args.port);
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address} (set CLINIC_PORT or --port to use another port)"))?;
    // Every published `dataschema` names this server (which serves `/schemas/…`), at the address it
    // is reached at, before anything is published (CLINIC_SCHEMA_BASE_URL, when set, wins).
    let reached = match listener.local_addr()? {
        bound if bound.ip().is_unspecified() => SocketAddr::new([127, 0, 0, 1].into(), bound.port()),
        bound => bound,
    };
    clinic_core::contract::serve_schemas_at(&format!("http://{reached}"), settings.schema_base.as_deref());

    // One delivery sender: the listeners' fast path and the loop that sends what it left.
    let sender = crate::commands::deliveries::sender(pool.clone(), &format!("http://{reached}")).await?;
    let dispatcher = crate::dev_dispatcher::spawn(&app_url, pool.clone(), Some(sender.clone())).await?;
    let sender = crate::commands::deliveries::spawn(sender);

    let api =
        ApiConfig::local(&settings.api, &settings.local_keys, &secret, crate::settings::webhook_key()?)?;
    let state = AppState { pool, api };
    println!("clinic dev is running");
    println!("  base URL:   http://{address}");
    println!("  database:   {}", clinic_core::db::redact(url));
    println!("  workspace:  {workspace_id}");
    println!("  admin:      {admin_id}");
    println!("  token:      {token}");
    println!("  try:        curl -s http://{address}/healthz");
    println!("Press Ctrl-C to stop.");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.received())
        .await
        .context("serving HTTP")?;
    dispatcher.stop().await;
    sender.stop().await;
    println!("stopped");
    Ok(())
}

/// Seeds the demo workspace once; later runs find it and reuse it.
async fn seed(pool: &deadpool_postgres::Pool) -> anyhow::Result<(WorkspaceId, MemberId)> {
    let mut conn = pool.get().await?;
    if let Some(found) = workspaces::first_admin(&conn).await? {
        return Ok(found);
    }
    let workspace_id = WorkspaceId::generate();
    let admin_id = MemberId::generate();
    let tx = conn.transaction().await?;
    workspaces::insert_workspace(&tx, workspace_id, "Demo Clinic").await?;
    workspaces::insert_member(&tx, admin_id, workspace_id, "admin", "Demo Admin").await?;
    let ctx = Ctx::system(workspace_id);
    for (name, specialty) in [("Dr. Ada Demo", "General practice"), ("Dr. Grace Demo", "Dermatology")] {
        let command = NewPractitioner::new(
            Name::parse("displayName", name.into())?,
            Some(Specialty::parse("specialty", specialty.into())?),
        );
        practitioners::create(&tx, &ctx, command).await?;
    }
    tx.commit().await?;
    Ok((workspace_id, admin_id))
}
