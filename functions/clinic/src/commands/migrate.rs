//! `clinic migrate`: applies pending migrations and says which.

use anyhow::Context;

pub async fn run() -> anyhow::Result<()> {
    let (url, _cluster) = crate::settings::database()?;
    let applied = apply(&url).await?;
    if applied.is_empty() {
        println!("database is up to date");
    } else {
        println!("applied migrations: {applied:?}");
    }
    Ok(())
}

/// Applies pending migrations over a dedicated connection (TLS per the URL's sslmode).
pub async fn apply(url: &str) -> anyhow::Result<Vec<i32>> {
    let ca_file = crate::settings::current().ca_file.as_deref();
    let mut client =
        clinic_core::db::connect_single(url, ca_file, None).await.context("connecting to the database")?;
    Ok(clinic_core::db::migrate(&mut client).await?)
}
