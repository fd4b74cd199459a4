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
//! statements name tables unqualified; the migrations qualify every name they create.

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
-- beanstalkd's job ids name no tube
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
];

/// The newest schema version this build knows.
pub fn known_version() -> i32 {
    MIGRATIONS.len() as i32
}

/// Creates or migrates `schema` (see the module doc). Returns the version it is at.
pub async fn migrate(client: &mut Client, schema: &str) -> Result<i32> {
    let op = "migrating the schema";
    let e = |e| pg(op, Outcome::NotApplied, e);
    let tx = client.transaction().await.map_err(e)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&format!("delayq schema {schema}")],
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
    let known = known_version();
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
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tracing::info!(schema, version = i + 1, "applying a schema migration");
        tx.batch_execute(&migration.replace("{s}", schema))
            .await
            .map_err(e)?;
    }
    if found < known {
        tx.execute(
            &format!(
                "INSERT INTO {schema}.schema_version (version) VALUES ($1)
                 ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version"
            ),
            &[&known],
        )
        .await
        .map_err(e)?;
    }
    tx.commit()
        .await
        .map_err(|err| pg(op, Outcome::Unknown, err))?;
    Ok(known)
}
