//! The PostgreSQL backend of delayq: state in one database, any number of stateless
//! instances.
//!
//! ```no_run
//! # async fn demo() -> delayq::Result<()> {
//! use std::sync::Arc;
//! use delayq::{Queue, StorageContext, SystemClock};
//! use delayq_postgres::PostgresOptions;
//!
//! let ctx = StorageContext::new(Arc::new(SystemClock::new()));
//! let storage = delayq_postgres::start(ctx.clone(), PostgresOptions::new("postgres://localhost/app")).await?;
//! let queue = Queue::new(Arc::new(storage), ctx);
//! # Ok(()) }
//! ```
//!
//! # Schema
//!
//! Everything lives in one schema (default `delayq`), created and migrated at start from the
//! versioned migrations of [`schema`]: `tasks` (one row per task, its state a column, partial
//! indexes for each order a transition needs: READY by (topic, priority, due, insertion) for
//! pop, DELAYED by due for promotion, ACTIVE/FINISHED/CANCELLED by deadline), `topics`
//! (pause, flow limits and the rate's state, the expired counter), `settings`, and the
//! sequences of insertion order and job ids. See `docs/postgres.md`.
//!
//! # Transitions
//!
//! Each operation is one transaction (`storage`): the task's row is read `FOR UPDATE`, the
//! transition decided in Rust by the same rules as the engine (`delayq_core::lifecycle`),
//! the row written back and the wake-ups sent with `pg_notify`, then committed. A pop locks
//! the READY rows it takes with `FOR UPDATE SKIP LOCKED`, so concurrent pops on any instance
//! never hand a task out twice nor wait for each other; a topic with flow limits has its
//! `topics` row locked by the pop, so its ACTIVE count and rate are exact across instances.
//! Task time comes from the queue's clock as a parameter (the conformance suite drives a
//! manual clock); a server's clock is [`PostgresClock`], the database's `clock_timestamp()`.
//!
//! # The SQL API
//!
//! An application adds, cancels and reschedules tasks inside its own transaction with SQL
//! functions of the schema (`delayq.add(...)`, `delayq.cancel(...)`, `delayq.reschedule(...)`,
//! migration 2 of [`schema`]): a rolled-back transaction leaves no task, a committed one
//! wakes the consumers of every instance (its `NOTIFY` is delivered on commit). They validate
//! with the limits and defaults each instance publishes at start and read the database's clock.
//! Under them are the core functions `enqueue`, `cancel_task` and `reschedule_task`, which
//! this backend's own add, cancel and reschedule call too: one logic for both paths.
//!
//! # Time-driven work and wake-ups
//!
//! Every instance runs a `driver` that sleeps until the earliest timer in the database and
//! does what is due with `SKIP LOCKED` (so instances split it). One instance at a time leads
//! (`lead`: it holds an advisory lock) and ticks when a timer is due; the others tick a
//! grace later, in case the lead is stuck. One LISTEN connection per instance (`events`)
//! carries the others' commits, which wake its parked consumers. No instance polls on a
//! short interval.

pub mod clock;
mod consume;
mod driver;
mod effects;
pub mod error;
mod events;
mod lead;
pub mod options;
mod pop;
mod reconnect;
pub mod schema;
mod storage;
mod task;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use delayq::{Error, Outcome, Result, StorageContext};
use parking_lot::Mutex;
use tokio::sync::watch;

pub use clock::{PostgresClock, PostgresClockOptions};
pub use driver::IDLE_LOOK;
pub use error::BackendError;
pub use options::{DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, PostgresOptions};
pub use storage::PostgresStorage;
/// The PostgreSQL client this backend uses (for a URL's check, or a test's own queries).
pub use tokio_postgres;

/// How every connection of the backend is made: the options' URL with `search_path` set to
/// the schema, a connect timeout and an application name unless given, and the TLS its
/// `sslmode` and `sslrootcert` ask for ([`tls`]).
#[derive(Clone)]
pub struct Connector {
    /// The connection settings.
    pub config: tokio_postgres::Config,
    /// The TLS connector (unused with `sslmode=disable`).
    pub tls: tokio_postgres_rustls::MakeRustlsConnect,
}

impl Connector {
    /// Opens one connection; its connection future must be spawned.
    pub async fn connect(
        &self,
    ) -> std::result::Result<
        (
            tokio_postgres::Client,
            tokio_postgres::Connection<
                tokio_postgres::Socket,
                <tokio_postgres_rustls::MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<
                    tokio_postgres::Socket,
                >>::Stream,
            >,
        ),
        tokio_postgres::Error,
    > {
        self.config.connect(self.tls.clone()).await
    }
}

/// The [`Connector`] of `options`.
pub fn connector(options: &PostgresOptions) -> Result<Connector> {
    options.check()?;
    let (mut config, tls) = options.connection()?;
    let tls = tls::connector(&tls)?;
    let search = format!("-c search_path={}", options.schema);
    let all = match config.get_options() {
        Some(o) if !o.trim().is_empty() => format!("{o} {search}"),
        _ => search,
    };
    config.options(&all);
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    if config.get_application_name().is_none() {
        config.application_name("delayq");
    }
    Ok(Connector { config, tls })
}

/// Connects, creates or migrates the schema, and starts this instance's driver and listener.
pub async fn start(ctx: StorageContext, options: PostgresOptions) -> Result<PostgresStorage> {
    let connector = connector(&options)?;
    {
        let (mut client, conn) = connector
            .connect()
            .await
            .map_err(|e| error::pg("connecting", Outcome::NotApplied, e))?;
        let conn = tokio::spawn(conn);
        let mut migrated = schema::migrate(&mut client, &options.schema).await;
        if migrated.is_ok() {
            let published =
                schema::publish_config(&client, &options.schema, &ctx.limits, &ctx.defaults).await;
            migrated = published.and(migrated);
        }
        drop(client);
        let _ = conn.await;
        migrated?;
    }
    let manager = Manager::from_config(
        connector.config.clone(),
        connector.tls.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let timeout = Some(Duration::from_secs(5));
    let pool = Pool::builder(manager)
        .max_size(options.pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(timeout)
        .create_timeout(timeout)
        .recycle_timeout(timeout)
        .build()
        .map_err(|e| Error::storage("building the connection pool", e))?;
    let seed = delayq::storage::random_u64();
    let instance = format!("{:016x}", delayq_core::hash::splitmix64(seed));
    let inner = Arc::new(storage::Inner::new(
        ctx,
        pool,
        options,
        instance,
        seed.rotate_left(17),
    ));
    let (stop, stopped) = watch::channel(false);
    let tasks = vec![
        tokio::spawn(driver::run(Arc::clone(&inner), stopped.clone())),
        tokio::spawn(lead::hold(
            Arc::clone(&inner),
            connector.clone(),
            stopped.clone(),
        )),
        tokio::spawn(events::listen(Arc::clone(&inner), connector, stopped)),
    ];
    Ok(PostgresStorage {
        inner,
        stop,
        tasks: Mutex::new(tasks),
    })
}
