//! A local stand-in for the Lambda platform in front of one function: the Runtime API
//! (`/2018-06-01/runtime/invocation/next`, `…/{id}/response`, `…/{id}/error`, `…/init/error`) served to
//! real child processes of the function's binary, and the asynchronous invoker that hands each
//! scheduled tick to an execution environment.
//!
//! Invariants (what the platform does, as far as a schedule-driven function can tell):
//! - One execution environment is one child process with its own Runtime API endpoint
//!   (`AWS_LAMBDA_RUNTIME_API`); it runs one invocation at a time. Environments are started on demand
//!   (a cold start inside the measured run), at most `reserved` of them (ReservedConcurrentExecutions).
//! - A tick goes to an idle environment; with none idle and none left to start, it waits (the
//!   platform's throttling retries) and is dropped once older than `max_event_age`.
//! - The deadline header is the moment the runtime received the invocation plus the timeout.
//! - Children are killed when the [`Platform`] is dropped (`kill_on_drop`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The function as deployed: binary, environment and the platform settings of the template.
#[derive(Debug, Clone)]
pub struct Function {
    pub binary: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub reserved: usize,
    pub max_event_age: Duration,
}

/// What happened to one tick.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub delivered: u64,
    pub cold_starts: u64,
    pub dropped: u64,
    pub errors: u64,
    pub succeeded: u64,
}

struct Invocation {
    id: String,
    body: String,
}

struct Environment {
    busy: Arc<AtomicBool>,
    invocations: mpsc::Sender<Invocation>,
    _child: Child,
}

#[derive(Clone)]
struct Endpoint {
    next: Arc<tokio::sync::Mutex<mpsc::Receiver<Invocation>>>,
    busy: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
    timeout: Duration,
}

/// The platform in front of one function.
pub struct Platform {
    function: Function,
    environments: Vec<Environment>,
    tally: Arc<Mutex<Tally>>,
    invocations: u64,
}

impl Platform {
    pub fn new(function: Function) -> Self {
        Self { function, environments: Vec::new(), tally: Arc::default(), invocations: 0 }
    }

    /// Hands `body` (an event's JSON) to an idle environment, starting one when allowed, waiting for
    /// one to become idle otherwise — at most until the event is `max_event_age` old.
    pub async fn invoke(&mut self, body: String) -> anyhow::Result<()> {
        let created = Instant::now();
        loop {
            let idle = self.environments.iter().position(|e| !e.busy.load(Ordering::SeqCst));
            let index = match idle {
                Some(index) => index,
                None if self.environments.len() < self.function.reserved => {
                    self.environments.push(self.start_environment().await?);
                    self.tally.lock().map_err(poisoned)?.cold_starts += 1;
                    self.environments.len() - 1
                }
                None if created.elapsed() >= self.function.max_event_age => {
                    self.tally.lock().map_err(poisoned)?.dropped += 1;
                    return Ok(());
                }
                None => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let environment = &self.environments[index];
            environment.busy.store(true, Ordering::SeqCst);
            self.invocations += 1;
            let id = format!("bench-{:08}", self.invocations);
            environment
                .invocations
                .send(Invocation { id, body })
                .await
                .context("an execution environment stopped")?;
            self.tally.lock().map_err(poisoned)?.delivered += 1;
            return Ok(());
        }
    }

    pub fn tally(&self) -> Tally {
        self.tally.lock().map(|t| t.clone()).unwrap_or_default()
    }

    async fn start_environment(&self) -> anyhow::Result<Environment> {
        let (invocations, next) = mpsc::channel(1);
        let busy = Arc::new(AtomicBool::new(false));
        let endpoint = Endpoint {
            next: Arc::new(tokio::sync::Mutex::new(next)),
            busy: busy.clone(),
            tally: self.tally.clone(),
            timeout: self.function.timeout,
        };
        let address = serve(endpoint).await?;
        let name = format!("bench-{}", self.environments.len() + 1);
        let child = Command::new(&self.function.binary)
            .envs(self.function.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "clinic-dispatcher-bench")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", &name)
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "/clinic/bench/dispatcher")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.function.binary.display()))?;
        Ok(Environment { busy, invocations, _child: child })
    }
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> anyhow::Error {
    anyhow::anyhow!("the platform's tally lock is poisoned")
}

/// Serves one environment's Runtime API on 127.0.0.1 (a free port), in a background task.
async fn serve(endpoint: Endpoint) -> anyhow::Result<SocketAddr> {
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route("/2018-06-01/runtime/invocation/{id}/response", post(response))
        .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
        .route("/2018-06-01/runtime/init/error", post(init_error))
        .with_state(endpoint);
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(address)
}

async fn next(State(endpoint): State<Endpoint>) -> (StatusCode, HeaderMap, String) {
    let invocation = endpoint.next.lock().await.recv().await;
    let Some(invocation) = invocation else {
        // The platform is gone: the child is about to be killed; never answer.
        return std::future::pending().await;
    };
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let deadline_ms = now_ms + endpoint.timeout.as_millis() as u64;
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    set("lambda-runtime-aws-request-id", &invocation.id);
    set("lambda-runtime-deadline-ms", &deadline_ms.to_string());
    set(
        "lambda-runtime-invoked-function-arn",
        "arn:aws:lambda:us-east-1:000000000000:function:clinic-dispatcher-bench",
    );
    set("lambda-runtime-trace-id", "Root=1-00000000-000000000000000000000000");
    set("content-type", "application/json");
    (StatusCode::OK, headers, invocation.body)
}

fn finish(endpoint: &Endpoint, ok: bool) -> StatusCode {
    if let Ok(mut tally) = endpoint.tally.lock() {
        if ok {
            tally.succeeded += 1;
        } else {
            tally.errors += 1;
        }
    }
    endpoint.busy.store(false, Ordering::SeqCst);
    StatusCode::ACCEPTED
}

async fn response(State(endpoint): State<Endpoint>, Path(_id): Path<String>) -> StatusCode {
    finish(&endpoint, true)
}

async fn error(State(endpoint): State<Endpoint>, Path(id): Path<String>, body: String) -> StatusCode {
    eprintln!("bench: lambda-window: invocation {id} failed: {}", body.chars().take(500).collect::<String>());
    finish(&endpoint, false)
}

async fn init_error(State(endpoint): State<Endpoint>, body: String) -> StatusCode {
    eprintln!("bench: lambda-window: init failed: {}", body.chars().take(500).collect::<String>());
    finish(&endpoint, false)
}
