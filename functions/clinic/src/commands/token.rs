//! `clinic token --workspace W --sub S --role R`: prints only the token, so scripts can capture it.

use std::time::Duration;

use anyhow::Context;
use clinic_core::ids::{parse_ulid, WorkspaceId};
use clinic_http::auth::{issue_token, Role};

#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// The workspace (ULID).
    #[arg(long)]
    workspace: String,
    /// The subject: a member id for staff/admin, the patient's id for patient (ULID).
    #[arg(long)]
    sub: String,
    /// staff, admin or patient.
    #[arg(long, default_value = "staff")]
    role: String,
    /// Lifetime in hours.
    #[arg(long, default_value_t = 24)]
    ttl_hours: u64,
}

pub fn run(args: TokenArgs) -> anyhow::Result<()> {
    let workspace: WorkspaceId =
        args.workspace.parse().map_err(|_| anyhow::anyhow!("--workspace must be a ULID"))?;
    let sub = parse_ulid(&args.sub).map_err(|_| anyhow::anyhow!("--sub must be a ULID"))?;
    let role = Role::parse(&args.role).context("--role must be staff, admin, patient or integration")?;
    let secret = crate::settings::jwt_secret()?;
    let token =
        issue_token(secret.as_bytes(), workspace, sub, role, Duration::from_secs(args.ttl_hours * 3600))?;
    println!("{token}");
    Ok(())
}
