//! The API server of the write and latency runs, as a child process (`clinic bench serve`, hidden), so
//! its peak RSS is its own and not the load generator's.
//!
//! The child serves the real router (`clinic_http::router`) with `axum::serve` on
//! `127.0.0.1:0`, like `clinic dev` (same pool size, same `clinic_app` role), optionally with the
//! dispatcher loop and the local transport beside it, exactly as `clinic dev` wires them. It prints
//! `listening <address>` once ready and stops when its stdin closes.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use clinic_core::db::connect_pool;
use clinic_http::ApiConfig;
use clinic_http::{router, AppState};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const URL_VAR: &str = "CLINIC_BENCH_DATABASE_URL";
const SECRET_VAR: &str = "CLINIC_JWT_SECRET";

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Connections in the API pool (`clinic dev` uses 16).
    #[arg(long, default_value_t = 16)]
    pool: usize,
    /// Run the dispatcher loop with the local transport beside the API, as `clinic dev` does.
    #[arg(long)]
    dispatcher: bool,
    /// With `--dispatcher`: start listeners through the no-op transport with this latency per call
    /// (bench/latency_transport.rs) instead of running them locally.
    #[arg(long)]
    transport_latency_ms: Option<u64>,
}

/// The child side.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    super::init_logging();
    let url = crate::settings::current()
        .bench_database_url
        .clone()
        .with_context(|| format!("{URL_VAR} is not set"))?;
    let secret =
        clinic::settings::current().jwt_secret.clone().with_context(|| format!("{SECRET_VAR} is not set"))?;
    let pool = connect_pool(&url, args.pool, None)?;
    let dispatcher = match (args.dispatcher, args.transport_latency_ms) {
        (false, _) => None,
        (true, None) => Some(clinic::dev_dispatcher::spawn_local(&url, pool.clone()).await?),
        (true, Some(ms)) => {
            let transport = super::latency_transport::LatencyTransport::new(Duration::from_millis(ms));
            Some(clinic::dev_dispatcher::spawn_transport(&url, pool.clone(), std::sync::Arc::new(transport))?)
        }
    };
    let state = AppState {
        pool,
        api: ApiConfig::local(
            &clinic::settings::current().api,
            &clinic::settings::current().local_keys,
            &secret,
            clinic_core::webhooks::secret_box::WebhookKey::generate(),
        )?,
    };
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    println!("listening {}", listener.local_addr()?);
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async {
            // Blocking read on a thread of its own: the parent closing our stdin is the stop signal.
            let _ = tokio::task::spawn_blocking(|| {
                let mut sink = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)
            })
            .await;
        })
        .await
        .context("serving HTTP")?;
    if let Some(dispatcher) = dispatcher {
        dispatcher.stop().await;
    }
    Ok(())
}

/// The parent side: a running server child.
pub struct ServerChild {
    child: Child,
    pub address: SocketAddr,
    pid: u32,
}

impl ServerChild {
    /// Starts `clinic bench serve` on `app_url` (a URL that connects as the service role).
    pub async fn start(app_url: &str, secret: &str, pool: usize, dispatcher: bool) -> anyhow::Result<Self> {
        Self::start_with(app_url, secret, pool, dispatcher, None).await
    }

    /// Like [`ServerChild::start`]; with `transport_latency_ms`, the dispatcher starts listeners
    /// through the no-op transport with that latency per call instead of running them.
    pub async fn start_with(
        app_url: &str,
        secret: &str,
        pool: usize,
        dispatcher: bool,
        transport_latency_ms: Option<u64>,
    ) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("locating the clinic binary")?;
        let mut command = Command::new(exe);
        command.args(["bench", "serve", "--pool", &pool.to_string()]);
        if dispatcher {
            command.arg("--dispatcher");
        }
        if let Some(ms) = transport_latency_ms {
            command.args(["--transport-latency-ms", &ms.to_string()]);
        }
        let mut child = command
            .env(URL_VAR, app_url)
            .env(SECRET_VAR, secret)
            // The dispatcher's EMF metric lines would go to our stdout pipe; the bench has no use for them.
            .env("CLINIC_METRICS", "off")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the bench server child")?;
        let pid = child.id().context("the bench server child has no pid")?;
        let stdout = child.stdout.take().context("no stdout of the server child")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("the bench server child did not start within 30 s")??
            .context("the bench server child exited during start-up")?;
        // Keep reading whatever else the child prints, so it never writes into a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let address: SocketAddr = line
            .strip_prefix("listening ")
            .and_then(|a| a.parse().ok())
            .with_context(|| format!("unexpected start-up line from the server child: {line}"))?;
        Ok(Self { child, address, pid })
    }

    /// Peak resident set size so far (`VmHWM` of `/proc/<pid>/status`), in KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid, "VmHWM:")
    }

    /// Closes the child's stdin (its stop signal) and waits for it; kills it after 15 s.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        drop(self.child.stdin.take());
        match tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await {
            Ok(status) => {
                let status = status?;
                anyhow::ensure!(status.success(), "the bench server child failed: {status}");
            }
            Err(_) => {
                self.child.start_kill()?;
                let _ = self.child.wait().await;
                anyhow::bail!("the bench server child did not stop within 15 s; killed");
            }
        }
        Ok(())
    }
}

/// A `kB` field of `/proc/<pid>/status`.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}
