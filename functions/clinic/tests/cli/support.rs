//! Running the built `clinic` binary against a test database, as an operator would from a shell.

use clinic_testkit::app::TestApp;
use serde_json::Value;

/// What one `clinic` run printed and how it exited.
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Stdout as JSON, after asserting the run succeeded.
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "stdout: {}\nstderr: {}", self.stdout, self.stderr);
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }
}

/// One data folder per test process, under the system's temporary folder.
fn scratch_data_dir() -> &'static std::path::Path {
    static DIR: std::sync::LazyLock<std::path::PathBuf> = std::sync::LazyLock::new(|| {
        std::env::temp_dir().join(format!("clinic-cli-data-{}", ulid::Ulid::generate()))
    });
    DIR.as_path()
}

/// Runs `clinic args…` on `app`'s database (logs at `warn`).
pub async fn clinic(app: &TestApp, args: &[&str]) -> Output {
    clinic_with(app, &[], args).await
}

/// Like [`clinic`], with extra environment variables.
pub async fn clinic_with(app: &TestApp, env: &[(&str, &str)], args: &[&str]) -> Output {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_clinic"))
        .args(args)
        .env("DATABASE_URL", &app.db.url)
        .env("RUST_LOG", "warn")
        .env("CLINIC_WEBHOOK_KEY_FILE", clinic_testkit::webhook_key_file())
        // Local files (the generated JWT secret, mail) go to a scratch folder, never the source tree.
        .env("CLINIC_DATA_DIR", scratch_data_dir())
        .envs(env.iter().copied())
        .output()
        .await
        .expect("run clinic");
    Output {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
