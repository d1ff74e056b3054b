//! Session timeouts of application sessions: `statement_timeout`, `lock_timeout` and
//! `idle_in_transaction_session_timeout`, sent as startup options by every session of
//! [`super::connect_pool`].
//!
//! Invariants:
//! - The defaults equal V8's role settings of `clinic_app` (10 s, 3 s, 15 s), all below the
//!   dispatcher's 30 s lease. V8's `ALTER ROLE` reaches only sessions that log in as `clinic_app` or
//!   one of its login members; a session that takes the role with `-c role=clinic_app` (tests, `clinic
//!   dev`, the bench) does not get them — these startup options do, whatever the login.
//! - Each is configurable (milliseconds, `0` turns it off): `CLINIC_DB_STATEMENT_TIMEOUT_MS`,
//!   `CLINIC_DB_LOCK_TIMEOUT_MS`, `CLINIC_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS` (0–600000). A bad value
//!   stops start-up. A `main` reads them ([`SessionTimeouts::read`]) and passes them to
//!   [`super::connect_pool_as`]; [`super::connect_pool`] (tools, tests) uses the defaults.
//! - The connection string's own `options` come after these, so a URL that sets one of them (an
//!   operator session, `clinic chaos`'s listener URL with its own `lock_timeout`) wins.
//! - Dedicated sessions ([`super::connect_single`]: LISTEN, migrations, the testkit's and the bench's
//!   owner sessions) do not get them: a migration may wait on locks and build indexes for longer, and
//!   the owner's prefills are bulk statements. A dedicated session that wants them passes
//!   [`SessionTimeouts::options`] in its URL.

use std::time::Duration;

use crate::config::{ConfigError, Env};

/// The three timeouts of an application session (`Duration::ZERO` = off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionTimeouts {
    pub statement: Duration,
    pub lock: Duration,
    pub idle_in_transaction: Duration,
}

impl Default for SessionTimeouts {
    fn default() -> Self {
        Self {
            statement: Duration::from_secs(10),
            lock: Duration::from_secs(3),
            idle_in_transaction: Duration::from_secs(15),
        }
    }
}

/// The largest value accepted (10 minutes).
const MAX_MS: u64 = 600_000;

impl SessionTimeouts {
    /// `CLINIC_DB_STATEMENT_TIMEOUT_MS`, `CLINIC_DB_LOCK_TIMEOUT_MS`,
    /// `CLINIC_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS`; unset ones take their default.
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        let ms = |name, default: Duration| -> Result<Duration, ConfigError> {
            Ok(Duration::from_millis(env.bounded(name, default.as_millis() as u64, 0..=MAX_MS)?))
        };
        let defaults = Self::default();
        Ok(Self {
            statement: ms("CLINIC_DB_STATEMENT_TIMEOUT_MS", defaults.statement)?,
            lock: ms("CLINIC_DB_LOCK_TIMEOUT_MS", defaults.lock)?,
            idle_in_transaction: ms(
                "CLINIC_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS",
                defaults.idle_in_transaction,
            )?,
        })
    }

    /// The startup options that set them (`-c name=<ms>`; PostgreSQL reads a bare number as ms).
    pub fn options(&self) -> String {
        format!(
            "-c statement_timeout={} -c lock_timeout={} -c idle_in_transaction_session_timeout={}",
            self.statement.as_millis(),
            self.lock.as_millis(),
            self.idle_in_transaction.as_millis()
        )
    }

    /// Puts [`Self::options`] in front of the options `config` already has (so those win).
    pub fn apply(&self, config: &mut tokio_postgres::Config) {
        let options = match config.get_options().map(str::trim).filter(|own| !own.is_empty()) {
            Some(own) => format!("{} {own}", self.options()),
            None => self.options(),
        };
        config.options(&options);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_v8_and_the_url_options_come_last() {
        let defaults = SessionTimeouts::default();
        assert_eq!(
            defaults.options(),
            "-c statement_timeout=10000 -c lock_timeout=3000 -c idle_in_transaction_session_timeout=15000"
        );
        let mut config: tokio_postgres::Config =
            "host=localhost user=u options='-c role=clinic_app -c lock_timeout=1000'".parse().unwrap();
        defaults.apply(&mut config);
        assert_eq!(
            config.get_options(),
            Some(
                "-c statement_timeout=10000 -c lock_timeout=3000 -c idle_in_transaction_session_timeout=15000 \
                 -c role=clinic_app -c lock_timeout=1000"
            )
        );
        let mut bare: tokio_postgres::Config = "host=localhost user=u".parse().unwrap();
        defaults.apply(&mut bare);
        assert_eq!(bare.get_options(), Some(defaults.options().as_str()));
    }
}
