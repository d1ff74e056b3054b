//! The bench database: the testkit's scratch database (a copy of the migrated template), fresh per
//! section, seeded by plain SQL, dropped at the end.

use anyhow::Context;
use clinic_core::db::{connect_pool, connect_single, url_with_role};
use clinic_core::ids::{MemberId, WorkspaceId};
use clinic_testkit::TestDb;
use deadpool_postgres::Pool;
use tokio_postgres::Client;
use ulid::Ulid;

/// What a bench section needs of its scratch database (the testkit's [`TestDb`]: a copy of the
/// migrated template on the bench server, dropped when the value is dropped).
pub trait BenchConnections {
    /// The owner's URL (migrations, prefills, statistics).
    fn url(&self) -> &str;

    /// The URL the service itself uses: sessions run as the restricted `clinic_app` role, like `clinic dev`.
    fn app_url(&self) -> String {
        url_with_role(self.url(), "clinic_app")
    }

    /// A dedicated owner connection.
    async fn owner(&self) -> anyhow::Result<Client> {
        connect(self.url()).await
    }

    /// A pool of `size` connections as the service role.
    fn app_pool(&self, size: usize) -> anyhow::Result<Pool> {
        Ok(connect_pool(&self.app_url(), size, None)?)
    }
}

impl BenchConnections for TestDb {
    fn url(&self) -> &str {
        &self.url
    }
}

/// A fresh scratch database for one section on the bench server.
pub async fn create(admin_url: &str) -> anyhow::Result<TestDb> {
    clinic_testkit::scratch_db(admin_url).await.map_err(|error| anyhow::anyhow!(error))
}

pub async fn connect(url: &str) -> anyhow::Result<Client> {
    connect_single(url, None, None).await.context("connecting to the bench server")
}

/// What the write and latency runs book against: one workspace, its admin, and many practitioners and
/// patients, so that concurrent bookings never compete for one practitioner's slots.
#[derive(Debug, Clone)]
pub struct Fixtures {
    pub workspace_id: WorkspaceId,
    pub member_id: MemberId,
    pub practitioners: Vec<Ulid>,
    pub patients: Vec<Ulid>,
}

const SEED_WORKSPACE: &str = "INSERT INTO workspaces (id, name) VALUES ($1, 'Bench Clinic')";

const SEED_ADMIN: &str =
    "INSERT INTO members (id, workspace_id, role, display_name) VALUES ($1, $2, 'admin', 'Bench Admin')";

const SEED_PRACTITIONERS: &str =
    "INSERT INTO practitioners (id, workspace_id, display_name, specialty, created_at, updated_at) \
             SELECT id, $1, 'Dr. Bench ' || n, 'General practice', now(), now() \
             FROM unnest($2::uuid[]) WITH ORDINALITY AS p (id, n)";

const SEED_PATIENTS: &str =
    "INSERT INTO patients (id, workspace_id, given_name, family_name, email, created_at, updated_at) \
             SELECT id, $1, 'Pat', 'Bench ' || n, 'pat' || n || '@example.test', now(), now() \
             FROM unnest($2::uuid[]) WITH ORDINALITY AS p (id, n)";

/// Seeds the fixtures by plain SQL (not timed).
pub async fn seed(client: &Client, practitioners: usize, patients: usize) -> anyhow::Result<Fixtures> {
    let workspace_id = WorkspaceId::generate();
    let member_id = MemberId::generate();
    client.execute(SEED_WORKSPACE, &[&workspace_id]).await?;
    client.execute(SEED_ADMIN, &[&member_id, &workspace_id]).await?;
    let practitioners = ids(practitioners);
    let patients = ids(patients);
    client
        .execute(
            SEED_PRACTITIONERS,
            &[&workspace_id, &practitioners.iter().map(|u| uuid::Uuid::from(*u)).collect::<Vec<_>>()],
        )
        .await?;
    client
        .execute(
            SEED_PATIENTS,
            &[&workspace_id, &patients.iter().map(|u| uuid::Uuid::from(*u)).collect::<Vec<_>>()],
        )
        .await?;
    client.batch_execute("ANALYZE").await?;
    Ok(Fixtures { workspace_id, member_id, practitioners, patients })
}

fn ids(count: usize) -> Vec<Ulid> {
    (0..count).map(|_| clinic_core::ids::new_ulid()).collect()
}
