//! The shared conformance suite against the PostgreSQL backend: one PostgreSQL server of the
//! test's own per test (never the machine's on 5432), a fresh schema in it.

use delayq::{Backend, StorageContext};
use delayq_postgres::PostgresOptions;
use delayq_testkit::PostgresServer;

async fn served(ctx: StorageContext) -> Backend {
    let server = PostgresServer::start();
    let storage = delayq_postgres::start(ctx, PostgresOptions::new(server.url()).pool_size(8))
        .await
        .expect("start the PostgreSQL backend");
    delayq_conformance::with_guard(std::sync::Arc::new(storage).into(), server)
}

delayq_conformance::suite!(|ctx| async move { served(ctx).await });
delayq_conformance::flow_suite!(|ctx| async move { served(ctx).await });
