//! Test support (feature `testing`): a local SQS emulator (`moto_server`) and a receive helper.
//!
//! Used by this crate's and the functions' tests only (their queues come from [`crate::queues`]).
//! `CLINIC_TEST_SQS_ENDPOINT` (exported by `tests/run` when it runs an emulator) is used as is;
//! otherwise a `moto_server` child process is started on a free port and killed when the
//! [`Emulator`] is dropped. When neither is available, [`Emulator::start`] answers `None` and the
//! caller skips loudly. A run that must not share the emulator (the chaos run: the shared one has
//! served every test before it) takes [`Emulator::start_private`].

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};

/// Timeouts for a client of the emulator that must not give up on it: one Python process on a
/// loaded machine can take seconds to answer a call SQS answers in milliseconds (seen: a single
/// SendMessage outliving three 3 s attempts while the chaos run's consumers polled it).
pub const PATIENT_TIMEOUTS: crate::SqsTimeouts = crate::SqsTimeouts {
    operation: Duration::from_secs(60),
    attempt: Duration::from_secs(20),
    connect: Duration::from_secs(5),
};

/// A reachable SQS endpoint, owning the emulator process when it started one.
#[derive(Debug)]
pub struct Emulator {
    pub endpoint: String,
    child: Option<Child>,
}

impl Emulator {
    /// The configured endpoint, or a fresh `moto_server`; `None` when neither can be had.
    pub fn start() -> Option<Emulator> {
        if let Ok(endpoint) = std::env::var("CLINIC_TEST_SQS_ENDPOINT") {
            if !endpoint.trim().is_empty() {
                return Some(Emulator { endpoint, child: None });
            }
        }
        Emulator::start_private()
    }

    /// A fresh `moto_server` child on a free port of 127.0.0.1, whatever `CLINIC_TEST_SQS_ENDPOINT`
    /// says; `None` (after saying why) when it cannot be started.
    pub fn start_private() -> Option<Emulator> {
        let port = clinic_testkit::free_port().ok()?;
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(child) => child,
            Err(error) => {
                eprintln!("!!! SKIPPING SQS TEST: moto_server could not be started ({error}); install it or set CLINIC_TEST_SQS_ENDPOINT");
                return None;
            }
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(Emulator { endpoint: format!("http://127.0.0.1:{port}"), child: Some(child) });
            }
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!("!!! SKIPPING SQS TEST: moto_server exited early ({status})");
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("!!! SKIPPING SQS TEST: moto_server did not listen within 30 s");
        None
    }

    /// A client for the emulator: test credentials, `us-east-1`.
    pub fn client(&self) -> aws_sdk_sqs::Client {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "clinic-tests"))
            .endpoint_url(&self.endpoint)
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// Whether the emulator this value started has exited (`Some(status)`); `None` while it runs or
    /// when it was not started here.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|child| child.try_wait().ok().flatten())
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Receives (and so hides for the visibility timeout) every message now in the queue, with all
/// attributes.
pub async fn receive_all(client: &aws_sdk_sqs::Client, url: &str) -> Vec<Message> {
    let mut messages = Vec::new();
    loop {
        let output = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .wait_time_seconds(0)
            .send()
            .await
            .expect("ReceiveMessage");
        let batch = output.messages.unwrap_or_default();
        if batch.is_empty() {
            return messages;
        }
        for message in &batch {
            clinic_core::contract::capture::record("sqs", || message.body().unwrap_or_default());
        }
        messages.extend(batch);
    }
}
