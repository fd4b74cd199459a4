//! The schema: created and migrated at start from versioned migrations.
//!
//! `<schema>.schema_version` holds one row, the version of the newest migration applied.
//! [`migrate`] takes a transaction-scoped advisory lock of the schema (so instances starting
//! together migrate once, one after the other), reads the version, applies every newer
//! migration of [`MIGRATIONS`] in the same transaction and records the new version: a
//! migration is applied whole or not at all. An instance that finds a version newer than it
//! knows refuses to start ([`BackendError::SchemaTooNew`]) rather than write rows an older
//! build does not understand.
//!
//! Every connection of the backend runs with `search_path` set to the schema, so the
//! statements name tables unqualified; the migrations qualify every name they create (and
//! every name the SQL functions use: an application calls them under its own `search_path`).
//!
//! Migration 2 adds the SQL API an application calls inside its own transaction
//! (`<schema>.add`, `.cancel`, `.reschedule`) and the core functions under it (`enqueue`,
//! `cancel_task`, `reschedule_task`), which the backend's own add, cancel and reschedule call
//! too: one logic for both paths. The SQL API validates with the limits and defaults of
//! `<schema>.sql_config`, which [`publish_config`] writes at each instance's start.
//!
//! Migration 3 adds `enqueue_batch`, the backend's add of a batch: the answers and notices of
//! `enqueue` called once a task in batch order, from one `INSERT` of the tasks whose ids are
//! new and a call of `enqueue_row` (the row logic `enqueue` now calls too) for each of the
//! rest.
//!
//! Migration 4 turns the primary key into (id, topic) and drops the index on the id alone,
//! which the key's prefix now serves: one index fewer for every row version a state change
//! writes.

use delayq_core::validate::{Limits, TaskDefaults};
use tokio_postgres::Client;

use crate::error::{BackendError, pg};
use delayq::{Error, Outcome, Result};

/// The migrations, oldest first; migration `i` brings the schema to version `i + 1`.
/// `{s}` stands for the schema name (an identifier checked by
/// [`PostgresOptions::check`](crate::PostgresOptions::check), so it is safe to paste).
pub const MIGRATIONS: &[&str] = &[
    // 1: tasks, topics, settings, the counters.
    r#"
CREATE SEQUENCE {s}.task_seq;
CREATE SEQUENCE {s}.job_ids;
CREATE TABLE {s}.tasks (
    topic text NOT NULL,
    id text NOT NULL,
    -- 0 delayed, 1 ready, 2 active, 3 finished, 4 cancelled, 5 dead (the API's codes)
    state smallint NOT NULL,
    priority bigint NOT NULL,
    due_ms bigint NOT NULL,
    -- insertion order: FIFO among equal priority and due (rule 11)
    seq bigint NOT NULL DEFAULT nextval('{s}.task_seq'),
    -- ACTIVE: ttr deadline; FINISHED/CANCELLED: end of retention; else 0
    deadline_ms bigint NOT NULL DEFAULT 0,
    updated_at_ms bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    receipt text,
    retries integer NOT NULL DEFAULT 0,
    ttr_ms bigint NOT NULL,
    max_retries bigint NOT NULL,
    expires_at_ms bigint,
    on_expire smallint NOT NULL DEFAULT 0,
    key text,
    body bytea NOT NULL,
    trace jsonb,
    extra jsonb,
    PRIMARY KEY (topic, id)
);
-- pop order (rule 11)
CREATE INDEX tasks_ready ON {s}.tasks (topic, priority, due_ms, seq) WHERE state = 1;
-- promotion: the earliest due of all topics
CREATE INDEX tasks_delayed ON {s}.tasks (due_ms) WHERE state = 0;
-- ttr expiry and the end of retention
CREATE INDEX tasks_deadline ON {s}.tasks (deadline_ms) WHERE state IN (2, 3, 4);
-- expiry of tasks not handed out
CREATE INDEX tasks_expiry ON {s}.tasks (expires_at_ms)
    WHERE state IN (0, 1) AND expires_at_ms IS NOT NULL;
-- list, counts, a topic's promotion
CREATE INDEX tasks_topic_state_due ON {s}.tasks (topic, state, due_ms, seq);
-- kick and peek-buried: oldest buried first
CREATE INDEX tasks_dead ON {s}.tasks (topic, updated_at_ms, seq) WHERE state = 5;
-- beanstalkd's job ids name no tube (migration 4 drops it: the key leads with the id)
CREATE INDEX tasks_id ON {s}.tasks (id);
CREATE TABLE {s}.topics (
    topic text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false,
    pause_until_ms bigint,
    limits jsonb,
    -- the rate's theoretical arrival time (delayq_core::flow::take)
    tat double precision NOT NULL DEFAULT 0,
    -- when a rate-held topic may hand out again
    rate_wake_ms bigint,
    expired bigint NOT NULL DEFAULT 0
);
CREATE TABLE {s}.settings (
    namespace text NOT NULL,
    key text NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (namespace, key)
);
"#,
    // 2: the SQL API (`delayq.add`, `delayq.cancel`, `delayq.reschedule`) and the core
    // functions the backend's own add, cancel and reschedule call as well.
    include_str!("migrations/002_sql_api.sql"),
    // 3: `enqueue_batch`, a batch's adds in one INSERT and the few it cannot take.
    include_str!("migrations/003_enqueue_batch.sql"),
    // 4: the primary key (id, topic) in place of (topic, id) and the index on the id.
    include_str!("migrations/004_id_first_key.sql"),
];

/// The newest schema version this build knows.
pub fn known_version() -> i32 {
    MIGRATIONS.len() as i32
}

/// Creates or migrates `schema` to the newest version (see the module doc). Returns the
/// version it is at.
pub async fn migrate(client: &mut Client, schema: &str) -> Result<i32> {
    migrate_to(client, schema, known_version()).await
}

/// Creates or migrates `schema` up to version `target` (at most [`known_version`]): what
/// [`migrate`] does, stopping early. An upgrade test lays out an older schema with it.
pub async fn migrate_to(client: &mut Client, schema: &str, target: i32) -> Result<i32> {
    migrate_as_build(client, schema, target, known_version()).await
}

/// What [`migrate_to`] does in a build that knows only the first `known` migrations: an
/// upgrade test plays an older build with it (it must refuse a schema a newer build laid
/// out).
pub async fn migrate_as_build(
    client: &mut Client,
    schema: &str,
    target: i32,
    known: i32,
) -> Result<i32> {
    let op = "migrating the schema";
    let known = known.clamp(0, known_version());
    let target = target.clamp(0, known);
    let e = |e| pg(op, Outcome::NotApplied, e);
    let tx = client.transaction().await.map_err(e)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&migration_lock_name(schema)],
    )
    .await
    .map_err(e)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.schema_version (
             one boolean PRIMARY KEY DEFAULT true CHECK (one),
             version integer NOT NULL
         );"
    ))
    .await
    .map_err(e)?;
    let found: i32 = tx
        .query_opt(&format!("SELECT version FROM {schema}.schema_version"), &[])
        .await
        .map_err(e)?
        .map(|r| r.get(0))
        .unwrap_or(0);
    if found > known {
        return Err(Error::storage(
            op,
            BackendError::SchemaTooNew {
                schema: schema.to_owned(),
                found,
                known,
            },
        ));
    }
    for (i, migration) in MIGRATIONS
        .iter()
        .enumerate()
        .take(target as usize)
        .skip(found as usize)
    {
        tracing::info!(schema, version = i + 1, "applying a schema migration");
        tx.batch_execute(&migration.replace("{s}", schema))
            .await
            .map_err(e)?;
    }
    if found < target {
        tx.execute(
            &format!(
                "INSERT INTO {schema}.schema_version (version) VALUES ($1)
                 ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version"
            ),
            &[&target],
        )
        .await
        .map_err(e)?;
    }
    tx.commit()
        .await
        .map_err(|err| pg(op, Outcome::Unknown, err))?;
    Ok(found.max(target))
}

/// Writes the limits and defaults the SQL API applies (`<schema>.sql_config`): this instance's,
/// so `delayq.add` refuses and fills in what this instance's `/add` would. Instances with
/// different settings overwrite each other's at start (the last one started wins).
pub async fn publish_config(
    client: &Client,
    schema: &str,
    limits: &Limits,
    defaults: &TaskDefaults,
) -> Result<()> {
    let op = "writing the SQL API's limits";
    let big = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    client
        .execute(
            &format!(
                "INSERT INTO {schema}.sql_config (one, max_body_bytes, max_delay_ms, max_ttr_ms, \
                 default_ttr_ms, default_max_retries, retention_ms, max_schedule_len) \
                 VALUES (true, $1, $2, $3, $4, $5, $6, $7) ON CONFLICT (one) DO UPDATE SET \
                 max_body_bytes = $1, max_delay_ms = $2, max_ttr_ms = $3, default_ttr_ms = $4, \
                 default_max_retries = $5, retention_ms = $6, max_schedule_len = $7"
            ),
            &[
                &big(limits.max_body_bytes as u64),
                &big(limits.max_delay_ms),
                &big(limits.max_ttr_ms),
                &big(defaults.ttr_ms),
                &defaults.max_retries.as_i64(),
                &big(defaults.retention_ms),
                &big(limits.max_schedule_len as u64),
            ],
        )
        .await
        .map_err(|e| {
            // The server refused the statement: nothing was written.
            let outcome = match e.as_db_error() {
                Some(_) => Outcome::NotApplied,
                None => Outcome::Unknown,
            };
            pg(op, outcome, e)
        })?;
    Ok(())
}

/// The name of the advisory lock that migrations of `schema` take (hashed by `hashtext`).
pub(crate) fn migration_lock_name(schema: &str) -> String {
    format!("delayq schema {schema}")
}
