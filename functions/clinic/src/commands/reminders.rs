//! `clinic reminders run`: emits `appointment.reminder_due` for booked appointments starting within
//! the lead time (`CLINIC_REMINDER_LEAD_HOURS`, default 24, or `--lead-hours`), exactly once per
//! appointment and start time (see `clinic_core::reminders`). Safe to run at any time, repeatedly
//! or concurrently with the scheduled job. It runs the housekeeping Lambda's `reminders` job
//! (`clinic_core::housekeeping::Job`) with no deadline and prints the job's report as JSON.

use std::time::Duration;

use clinic_core::housekeeping::reminders::ReminderConfig;
use clinic_core::housekeeping::{Job, Reminders};

#[derive(Debug, clap::Args)]
pub struct RemindersArgs {
    #[command(subcommand)]
    command: RemindersCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RemindersCommand {
    /// Emit the reminders that are due now.
    Run {
        /// Overrides CLINIC_REMINDER_LEAD_HOURS (default 24, 1–720).
        #[arg(long)]
        lead_hours: Option<u64>,
    },
}

pub async fn run(args: RemindersArgs) -> anyhow::Result<()> {
    match args.command {
        RemindersCommand::Run { lead_hours } => {
            let mut config: ReminderConfig = crate::settings::current().reminders;
            if let Some(hours) = lead_hours {
                anyhow::ensure!((1..=720).contains(&hours), "--lead-hours must be between 1 and 720");
                config.lead = Duration::from_secs(hours * 3600);
            }
            let (pool, _cluster) = super::outbox::pool().await?;
            let report = Reminders { pool, config }.run(None).await?;
            super::outbox::print(serde_json::to_value(report)?)
        }
    }
}
