//! Statement helpers: every query goes through the connection's prepared-statement cache, so a
//! statement is parsed once per connection and each later call is a single round trip.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

pub async fn query(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query(&statement, params).await
}

pub async fn query_opt(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Option<Row>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query_opt(&statement, params).await
}

pub async fn query_one(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<Row, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.query_one(&statement, params).await
}

pub async fn execute(
    client: &impl GenericClient,
    sql: &str,
    params: Params<'_>,
) -> Result<u64, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql).await?;
    client.execute(&statement, params).await
}

/// Runs a pipelined group: `statements` (every statement the group's futures send) are put into
/// the connection's cache first — those not yet there are prepared together, in one round trip —
/// then the futures of `group` (a tuple of the helpers above, one statement each) are joined in
/// the order written.
///
/// Why that gives one round trip in order: once each statement of a group is cached, the
/// helpers above send their statement when first polled, without waiting for anything, and
/// [`Group::join_in_order`] polls its futures in the order written (`futures::future::join*`;
/// never `tokio::join!`, which rotates). So the group goes out in one round trip, in that order,
/// and PostgreSQL runs the statements one after another in that order, exactly as if each had
/// been awaited before the next. Without the cache step, a statement that had to be prepared
/// first could be overtaken by a later cached one. When one statement of a group fails, the
/// later ones fail too (the transaction is aborted), so a caller reads the results in order and
/// answers the first failure.
pub async fn pipeline<G: Group>(
    client: &impl GenericClient,
    statements: &[&str],
    group: G,
) -> Result<G::Output, tokio_postgres::Error> {
    futures::future::try_join_all(statements.iter().map(|sql| client.prepare_cached(sql))).await?;
    Ok(group.join_in_order().await)
}

/// The futures of a pipelined group (see [`pipeline`]): tuples of two or three, joined by a join
/// that polls them in the order written.
pub trait Group {
    type Output;
    type Joined: std::future::Future<Output = Self::Output>;
    fn join_in_order(self) -> Self::Joined;
}

impl<A: std::future::Future, B: std::future::Future> Group for (A, B) {
    type Output = (A::Output, B::Output);
    type Joined = futures::future::Join<A, B>;
    fn join_in_order(self) -> Self::Joined {
        futures::future::join(self.0, self.1)
    }
}

impl<A: std::future::Future, B: std::future::Future, C: std::future::Future> Group for (A, B, C) {
    type Output = (A::Output, B::Output, C::Output);
    type Joined = futures::future::Join3<A, B, C>;
    fn join_in_order(self) -> Self::Joined {
        futures::future::join3(self.0, self.1, self.2)
    }
}
